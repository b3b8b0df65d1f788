// CheckpointCommitter (daemon/head/checkpoint_committer.h): checkpoint file work runs on
// its own thread, in submission order, and answers on the io_context.
#include "daemon/head/checkpoint_committer.h"

#include <unistd.h>

#include <atomic>
#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <mutex>
#include <thread>

#include "common/file_util.h"

using namespace traintl;

namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/traintl-committer-XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  return tmpl;
}

// Stages rank 0's checkpoint `seq` of attempt 1 with one file.
std::string Stage(const std::string& trial, int seq, const std::string& content) {
  const std::string dir = trial + "/.staging/attempt_1/seq_" + std::to_string(seq) + "/rank_0";
  REQUIRE(MakeDirs(dir).ok());
  REQUIRE(WriteFileAtomic(dir + "/model.pt", content).ok());
  return dir;
}

}  // namespace

TEST_CASE("merges run off the io thread and answer on it, in order, cleanup comes after") {
  const std::string trial = TempDir();
  boost::asio::io_context io;
  // The answers come from another thread: the loop must not stop for lack of work.
  auto work = boost::asio::make_work_guard(io);
  CheckpointCommitter committer(io, std::nullopt);
  const auto io_thread = std::this_thread::get_id();
  std::vector<std::string> merged;
  for (int seq = 0; seq < 3; ++seq) {
    committer.Merge(trial, 1, seq, {{0, Stage(trial, seq, "m" + std::to_string(seq))}},
                    {{"seq", seq}}, [&](Result<std::string> dir) {
                      CHECK(std::this_thread::get_id() == io_thread);
                      REQUIRE(dir.ok());
                      merged.push_back(*dir);
                    });
  }
  // A merge that fails (nothing staged there) reports its error the same way.
  Status failed;
  committer.Merge(trial, 1, 9, {{0, trial + "/.staging/attempt_1/seq_9/rank_0"}}, {},
                  [&](Result<std::string> dir) { failed = dir.status(); });
  // Queued behind the merges: the staging area goes only once they moved their files, and
  // so does a merged checkpoint of the attempt that no record names (seq 1 here: its commit
  // was refused), not one of another attempt.
  REQUIRE(MakeDirs(trial + "/checkpoint_a002_s000000").ok());
  // Another job's trial dir nested here, its name starting the same (storage_path + name).
  REQUIRE(MakeDirs(trial + "/checkpoint_a001_s-4f2a9c1b7d3e").ok());
  committer.CleanUpAttempt(
      trial + "/.staging/attempt_1", trial, 1,
      {trial + "/checkpoint_a001_s000000", trial + "/checkpoint_a001_s000002"});
  // Nothing answered before the io_context ran: the answers are posted to it.
  CHECK(merged.empty());
  while (merged.size() < 3 || failed.ok()) io.run_one();
  CHECK(merged == std::vector<std::string>{trial + "/checkpoint_a001_s000000",
                                           trial + "/checkpoint_a001_s000001",
                                           trial + "/checkpoint_a001_s000002"});
  CHECK(!failed.ok());
  CHECK(*ReadFile(merged[2] + "/model.pt") == "m2");
  while (committer.pending() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(!PathExists(trial + "/.staging/attempt_1"));
  CHECK(PathExists(merged[0]));
  CHECK(!PathExists(merged[1]));
  CHECK(PathExists(merged[2]));
  CHECK(PathExists(trial + "/checkpoint_a002_s000000"));
  CHECK(PathExists(trial + "/checkpoint_a001_s-4f2a9c1b7d3e"));

  // Retention's deletes: only checkpoint directories of this trial dir.
  const std::string outside = TempDir();
  committer.Remove(trial, {merged[0], outside});
  while (committer.pending() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(!PathExists(merged[0]));
  CHECK(PathExists(merged[2]));
  CHECK(PathExists(outside));
  RemoveAll(outside).IgnoreError();
  RemoveAll(trial).IgnoreError();
}

namespace {

// CheckpointFiles that touch no disk: each call is recorded, merges fail when told to.
class RecordingFiles : public CheckpointFiles {
 public:
  Result<std::string> Merge(const std::string& trial_dir, int attempt, int seq,
                            const std::map<int, std::string>& rank_dirs,
                            const nlohmann::json&) override {
    Record("merge " + std::to_string(seq) + " of " + std::to_string(rank_dirs.size()));
    if (fail_merges) return Status::Internal("fsync failed: Input/output error");
    return trial_dir + "/checkpoint_" + std::to_string(seq);
  }
  Status Remove(const std::string&, const std::string& checkpoint_dir) override {
    Record("remove " + checkpoint_dir);
    return Status::PermissionDenied("not ours");
  }
  Status CleanUpAttempt(const std::string& staging_dir, const std::string&, int,
                        const std::set<std::string>&) override {
    Record("cleanup " + staging_dir);
    return Status::Ok();
  }
  Status RemoveDir(const std::string& dir) override {
    Record("rmdir " + dir);
    return Status::Ok();
  }
  std::vector<std::string> calls() {
    std::lock_guard<std::mutex> l(mu_);
    return calls_;
  }
  std::atomic<bool> fail_merges{false};

 private:
  void Record(std::string call) {
    std::lock_guard<std::mutex> l(mu_);
    calls_.push_back(std::move(call));
  }
  std::mutex mu_;
  std::vector<std::string> calls_;
};

}  // namespace

TEST_CASE("a merge the files refuse answers its error, file work keeps its order") {
  boost::asio::io_context io;
  auto work = boost::asio::make_work_guard(io);
  RecordingFiles files;
  files.fail_merges = true;
  CheckpointCommitter committer(io, std::nullopt, &files);
  std::vector<Result<std::string>> answers;
  committer.Merge("/t", 1, 0, {{0, "/s/r0"}, {1, "/s/r1"}}, nlohmann::json::object(),
                  [&](Result<std::string> r) { answers.push_back(std::move(r)); });
  committer.Remove("/t", {"/t/checkpoint_000000"});  // its failure is only logged
  committer.CleanUpAttempt("/t/.staging/attempt_1", "/t", 1, {});
  committer.Merge("/t", 2, 1, {{0, "/s/r0"}}, nlohmann::json::object(),
                  [&](Result<std::string> r) { answers.push_back(std::move(r)); });
  while (answers.size() < 2) io.run_one();
  REQUIRE_FALSE(answers[0].ok());
  CHECK(answers[0].status().message() == "fsync failed: Input/output error");
  REQUIRE_FALSE(answers[1].ok());
  CHECK(files.calls() == std::vector<std::string>{"merge 0 of 2", "remove /t/checkpoint_000000",
                                                  "cleanup /t/.staging/attempt_1", "merge 1 of 1"});

  files.fail_merges = false;
  committer.Merge("/t", 2, 2, {{0, "/s/r0"}}, nlohmann::json::object(),
                  [&](Result<std::string> r) { answers.push_back(std::move(r)); });
  while (answers.size() < 3) io.run_one();
  REQUIRE(answers[2].ok());
  CHECK(*answers[2] == "/t/checkpoint_2");
}
