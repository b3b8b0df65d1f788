#include "daemon/head/checkpoint_committer.h"

#include <boost/asio/post.hpp>
#include <utility>

#include "common/logging.h"

namespace traintl {

CheckpointCommitter::CheckpointCommitter(boost::asio::io_context& io, std::optional<FsIdentity> fs,
                                         CheckpointFiles* files)
    : io_(io),
      fs_(std::move(fs)),
      files_(files != nullptr ? files : DiskCheckpointFiles::Get()),
      thread_([this] { Main(); }) {}

CheckpointCommitter::~CheckpointCommitter() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
    jobs_.clear();
  }
  cv_.notify_all();
  thread_.join();
}

size_t CheckpointCommitter::pending() const {
  std::lock_guard<std::mutex> l(mu_);
  return jobs_.size() + running_;
}

void CheckpointCommitter::Post(std::function<void()> job, bool as_worker) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return;
    jobs_.push_back(Job{std::move(job), as_worker});
  }
  cv_.notify_one();
}

void CheckpointCommitter::Main() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [this] { return stopping_ || !jobs_.empty(); });
    if (stopping_) return;
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    ++running_;
    l.unlock();
    {
      // Per thread (setfsuid): the io thread keeps the daemon's own file access.
      ScopedFsIdentity as_worker(fs_ && job.as_worker ? &*fs_ : nullptr);
      job.run();
    }
    l.lock();
    --running_;
  }
}

void CheckpointCommitter::Merge(std::string trial_dir, int attempt, int seq,
                                std::map<int, std::string> rank_dirs, nlohmann::json metrics,
                                std::function<void(Result<std::string>)> done) {
  Post([this, trial_dir = std::move(trial_dir), attempt, seq, rank_dirs = std::move(rank_dirs),
        metrics = std::move(metrics), done = std::move(done)]() mutable {
    Result<std::string> merged = files_->Merge(trial_dir, attempt, seq, rank_dirs, metrics);
    boost::asio::post(io_, [done = std::move(done), merged = std::move(merged)]() mutable {
      done(std::move(merged));
    });
  });
}

void CheckpointCommitter::Remove(std::string trial_dir, std::vector<std::string> dirs) {
  Post([this, trial_dir = std::move(trial_dir), dirs = std::move(dirs)] {
    for (const auto& dir : dirs) {
      // Records go first, files after: a crash in between leaves only garbage.
      if (Status st = files_->Remove(trial_dir, dir); !st.ok())
        LOG_WARN << "cannot delete checkpoint " << dir << ": " << st.message();
    }
  });
}

void CheckpointCommitter::RemoveDirs(std::vector<std::string> dirs) {
  Post(
      [this, dirs = std::move(dirs)] {
        for (const auto& dir : dirs) {
          if (Status st = files_->RemoveDir(dir); !st.ok())
            LOG_WARN << "cannot remove " << dir << ": " << st.message();
        }
      },
      /*as_worker=*/false);
}

void CheckpointCommitter::CleanUpAttempt(std::string staging_dir, std::string trial_dir,
                                         int attempt, std::set<std::string> recorded) {
  Post([this, staging_dir = std::move(staging_dir), trial_dir = std::move(trial_dir), attempt,
        recorded = std::move(recorded)] {
    if (Status st = files_->CleanUpAttempt(staging_dir, trial_dir, attempt, recorded); !st.ok())
      LOG_WARN << "could not clean up " << staging_dir << ": " << st.message();
  });
}

}  // namespace traintl
