#include "daemon/head/tune_controller.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "common/crypto.h"
#include "common/json_depth.h"
#include "common/logging.h"
#include "daemon/head/deletion_check.h"
#include "daemon/head/tune_results.h"
#include "proto/job_spec.h"

namespace traintl {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

constexpr const char* kTrialDone = "DONE";
constexpr const char* kTrialError = "ERROR";
constexpr const char* kTrialPaused = "PAUSED";

// Trial configs checked at create, beyond every grid point: enough to catch a domain
// whose values the trainer refuses (a num_workers of 0) before anything runs.
constexpr int64_t kConfigsCheckedAtCreate = 16;

json ParsedOr(const std::string& text, json fallback) {
  json j = ParseJsonBounded(text);
  return j.is_discarded() ? fallback : j;
}

// The trial's job spec: the trainer with the trial's config, named after the trial, and
// restored from `restore_job`'s latest checkpoint when it continues another job.
Result<JobSpec> TrialSpec(const tune::TuneSpec& spec, const json& config, const std::string& name,
                          const std::string& restore_job) {
  json doc = tune::SearchSpace::Apply(spec.trainer, config);
  doc["name"] = name;
  if (!restore_job.empty()) doc["resume_from_checkpoint"] = "job:" + restore_job;
  SpecError err;
  auto parsed = ParseJobSpec(doc, &err);
  if (!parsed.ok()) return Status::InvalidArgument("trainer." + err.ToString());
  return parsed;
}

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

cmd::TrialUpdate& UpdateOf(cmd::UpdateExperiment& up, int index) {
  for (auto& t : up.trials)
    if (t.index == index) return t;
  up.trials.push_back(cmd::TrialUpdate{});
  up.trials.back().index = index;
  return up.trials.back();
}

}  // namespace

std::string TrialName(const std::string& experiment_name, int index) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "_%05d", index);
  return experiment_name + buf;
}

TuneController::TuneController(asio::io_context& io, TuneControllerOptions options,
                               StateStore* store, CommandLog* log, JobManager* jobs)
    : io_(io), options_(std::move(options)), store_(store), log_(log), jobs_(jobs), timer_(io) {}

TuneController::~TuneController() { files_.join(); }

void TuneController::Start() { ArmTimer(); }

void TuneController::Shutdown() {
  shut_down_ = true;
  timer_.cancel();
  live_.clear();
  files_.join();
}

void TuneController::WriteFilesLater(std::string dir, TrialRecord trial, json config) {
  asio::post(
      files_, [this, dir = std::move(dir), trial = std::move(trial), config = std::move(config)] {
        // Read here, off the io thread (the store is thread-safe), with the daemon's access.
        const std::vector<json> results = TrialResults(*store_, trial);
        ScopedFsIdentity as_worker(options_.worker_fs_identity ? &*options_.worker_fs_identity
                                                               : nullptr);
        Status st = WriteTrialFiles(dir, results, config);
        if (!st.ok()) LOG_WARN << "tune: " << dir << ": " << st.message();
      });
}

void TuneController::SetHead(bool head) {
  is_head_ = head;
  // A new head reads everything back from the store (Load), as after a failover.
  live_.clear();
  if (head) PassSoon("");
}

void TuneController::ArmTimer() {
  if (shut_down_) return;
  timer_.expires_after(options_.pass_interval);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || shut_down_) return;
    PassAll();
    ArmTimer();
  });
}

void TuneController::PassSoon(const std::string& experiment_id) {
  if (shut_down_ || !queued_.insert(experiment_id).second) return;
  asio::post(io_, [this, experiment_id] {
    queued_.erase(experiment_id);
    if (experiment_id.empty()) {
      PassAll();
    } else {
      Pass(experiment_id);
    }
  });
}

void TuneController::PassAll() {
  if (!is_head_) return;
  std::set<std::string> running;
  for (const auto& e : store_->ListExperiments(/*running_only=*/true)) {
    running.insert(e.id);
    Pass(e.id);
  }
  for (auto it = live_.begin(); it != live_.end();)
    it = running.count(it->first) ? std::next(it) : live_.erase(it);
}

void TuneController::OnJobReported(const std::string& job_id) {
  if (!is_head_) return;
  if (auto t = store_->TrialOfJob(job_id)) PassSoon(t->experiment_id);
}

void TuneController::OnJobEnded(const std::string& job_id) {
  if (!is_head_) return;
  // A trial's files are complete once its job ended, whatever became of its experiment
  // meanwhile (stopped, failed, done) or of the trial: a pass throttles them while the job
  // runs, and passes end with the experiment.
  if (auto t = store_->TrialOfJob(job_id)) {
    if (auto e = store_->GetExperiment(t->experiment_id))
      WriteFilesLater(e->exp_dir + "/" + t->name, *t, ParsedOr(t->config, json::object()));
  }
  OnJobReported(job_id);
}

// The trial job that waited started: the next one may be queued (one waits at a time).
void TuneController::OnJobStarted(const std::string& job_id) { OnJobReported(job_id); }

bool TuneController::HoldsReports(const std::string& job_id) {
  if (!is_head_) return false;
  auto t = store_->TrialOfJob(job_id);
  if (!t) return false;
  if (auto it = live_.find(t->experiment_id); it != live_.end() && it->second)
    return it->second->scheduler->DecidesOnResults();
  auto e = store_->GetExperiment(t->experiment_id);
  if (!e) return false;
  auto live = Load(*e);
  return live.ok() && (*live)->scheduler->DecidesOnResults();
}

Result<std::unique_ptr<TuneController::Live>> TuneController::Load(
    const ExperimentRecord& e) const {
  auto spec = tune::ParseTuneSpec(ParsedOr(e.spec, json()));
  if (!spec.ok()) return Status::InvalidArgument("stored spec: " + spec.status().message());
  auto scheduler = tune::MakeScheduler(spec->config.scheduler, spec->config.metric,
                                       spec->config.mode, static_cast<uint64_t>(e.seed));
  if (!scheduler.ok()) return scheduler.status();
  auto live = std::make_unique<Live>();
  live->spec = std::move(*spec);
  live->scheduler = std::move(*scheduler);
  json saved = ParsedOr(e.scheduler_state, json::object());
  if (saved.is_object() && saved.contains("scheduler")) {
    if (Status st = live->scheduler->LoadState(saved["scheduler"]); !st.ok())
      return Status::InvalidArgument("stored scheduler state: " + st.message());
    if (saved.contains("added") && saved["added"].is_number_integer())
      live->added = saved["added"].get<int>();
    if (saved.contains("fed") && saved["fed"].is_object()) {
      for (auto it = saved["fed"].begin(); it != saved["fed"].end(); ++it) {
        if (it->is_number_integer()) live->fed[std::atoi(it.key().c_str())] = it->get<int64_t>();
      }
    }
  }
  live->next_index = e.trials_created;
  return live;
}

void TuneController::Pass(const std::string& experiment_id) {
  if (!is_head_ || shut_down_) return;
  auto e = store_->GetExperiment(experiment_id);
  if (!e || e->state != kExperimentRunning) {
    live_.erase(experiment_id);
    return;
  }
  auto& slot = live_[experiment_id];
  if (!slot) {
    auto loaded = Load(*e);
    if (!loaded.ok()) {
      live_.erase(experiment_id);
      Fail(experiment_id, loaded.status().message());
      return;
    }
    slot = std::move(*loaded);
  }
  Live& live = *slot;
  if (live.failed) return;
  if (live.updating) {
    live.pass_again = true;
    return;
  }
  const tune::TuneConfig& config = live.spec.config;
  std::vector<TrialRecord> trials = store_->ListTrials(experiment_id);
  const int64_t now = cmd::NowMs();
  const bool budget_over =
      config.time_budget_s > 0 && e->budget_used_ms + (now - e->budget_from) >=
                                      static_cast<int64_t>(config.time_budget_s * 1000);
  const std::string budget_reason =
      "the experiment's time budget of " + Seconds(config.time_budget_s) + " s is used up";

  cmd::UpdateExperiment up;
  up.experiment_id = experiment_id;
  bool changed = false;
  std::map<std::string, const TrialRecord*> by_name;
  for (const auto& t : trials) by_name[t.name] = &t;
  for (const auto& t : trials) {
    if (t.index < live.added) continue;
    live.scheduler->OnTrialAdd(t.name, ParsedOr(t.config, json::object()));
    live.added = t.index + 1;
    changed = true;
  }

  std::vector<std::string> stops;  // jobs to stop once the update is recorded, with reasons
  std::vector<std::string> stop_reasons;
  std::vector<std::string> releases;  // running jobs whose every result was fed: go on
  auto stop_job = [&](const std::string& job_id, const std::string& reason) {
    stops.push_back(job_id);
    stop_reasons.push_back(reason);
  };
  auto complete = [&](TrialRecord& t, const char* status, const std::string& reason) {
    live.scheduler->OnTrialComplete(t.name);
    t.status = status;
    auto& u = UpdateOf(up, t.index);
    u.status = t.status;
    if (!reason.empty()) u.reason = t.reason = reason;
    changed = true;
  };

  int running = 0, waiting = static_cast<int>(live.submitting.size());
  bool any_paused = false;
  for (TrialRecord t : trials) {
    if (t.status == kTrialDone || t.status == kTrialError) continue;
    auto job = store_->GetJob(t.job_id, /*with_spec=*/false);
    if (!job) {
      complete(t, kTrialDone, "its job was deleted");
      continue;
    }
    const bool ended = IsTerminalJobState(job->state);
    const bool stopping = live.stopping.count(t.index) > 0;

    // Results the scheduler has not seen, in order, until one decides something.
    const json trial_config = ParsedOr(t.config, json::object());
    const int64_t count = CountTrialResults(*store_, t);
    if (t.status.empty() && t.pending.empty() && !stopping && count > live.fed[t.index]) {
      // Only the new ones: a trial's results are not read again at every pass.
      const int64_t seen = live.fed[t.index];
      const std::vector<json> results = TrialResults(*store_, t, seen);
      for (size_t i = 0; i < results.size(); ++i) {
        const json& r = results[i];
        live.fed[t.index] = seen + static_cast<int64_t>(i) + 1;
        changed = true;
        auto m = r.find(config.metric);
        if (seen + i == 0 && (m == r.end() || !m->is_number())) {
          std::string keys;
          for (auto it = r.begin(); it != r.end(); ++it) {
            if (it.key() == "training_iteration" || it.key() == "time_total_s" ||
                it.key() == "timestamp" || it.key() == "trial_id" || it.key() == "job_id")
              continue;
            keys += (keys.empty() ? "" : ", ") + it.key();
          }
          const std::string why = "the metric \"" + config.metric +
                                  "\" that tune_config.metric names was not reported (reported: " +
                                  (keys.empty() ? "nothing" : keys) + ")";
          complete(t, kTrialError, why);
          if (!ended) stop_job(t.job_id, why);
          break;
        }
        tune::SchedulerDecision d = live.scheduler->OnTrialResult(t.name, r);
        using A = tune::SchedulerDecision::Action;
        if (d.action == A::kContinue) continue;
        auto& u = UpdateOf(up, t.index);
        if (d.action == A::kStop) {
          u.reason = t.reason = d.reason;
        } else if (d.action == A::kPause) {
          u.status = t.status = kTrialPaused;
          u.reason = t.reason = d.reason;
        } else {
          auto donor = by_name.find(d.donor);
          if (donor == by_name.end()) continue;
          json pending = {
              {"restore_job", donor->second->job_id}, {"config", d.new_config}, {"donor", d.donor}};
          u.pending = t.pending = pending.dump();
          u.reason = t.reason =
              "PBT: continues from " + d.donor + "'s checkpoint with a new config";
        }
        if (!ended) {
          stop_job(t.job_id, d.reason.empty() ? t.reason : d.reason);
          live.stopping.insert(t.index);
        }
        break;
      }
    }
    // The files are rewritten whole: at most every kFilesInterval (each pass would make a
    // trial's reports quadratic), and once its job ended (OnJobEnded, whatever became of
    // the experiment). A new head's first pass writes them at once.
    const auto now = std::chrono::steady_clock::now();
    if (count > 0 && count != live.files_written[t.index] && now >= live.files_due[t.index]) {
      WriteFilesLater(e->exp_dir + "/" + t.name, t, trial_config);
      live.files_written[t.index] = count;
      live.files_due[t.index] = now + kFilesInterval;
    }
    if (t.status == kTrialError) continue;

    if (!ended) {
      ++running;
      if (job->state == kJobPending && job->attempt == 0) ++waiting;
      if (budget_over && !live.stopping.count(t.index)) {
        stop_job(t.job_id, budget_reason);
        live.stopping.insert(t.index);
      }
      if (t.status.empty() && t.pending.empty() && !live.stopping.count(t.index) &&
          (stops.empty() || stops.back() != t.job_id))
        releases.push_back(t.job_id);
      continue;
    }
    // The job ended: continue the trial in a new job, wait, or end it.
    live.stopping.erase(t.index);
    std::string restore_job;
    json next_config = trial_config;
    if (!t.pending.empty()) {
      json p = ParsedOr(t.pending, json::object());
      restore_job = p.value("restore_job", t.job_id);
      if (p.contains("config")) next_config = p["config"];
    } else if (t.status.empty() && job->state == kJobStopped &&
               job->message == kStoppedWithExperiment) {
      restore_job = t.job_id;  // stopped with the experiment, which was resumed since
    }
    if (!restore_job.empty() && !budget_over) {
      ++running;
      if (!live.submitting.count(t.index)) {
        // Results the ended job reported after the decision that ended it (it trained on
        // until the stop reached it) are not the continued trial's: the scheduler never
        // sees them, or it would decide on the same stale numbers again.
        if (live.fed[t.index] < count) {
          live.fed[t.index] = count;
          changed = true;
        }
        json jobs = ParsedOr(t.jobs, json::array());
        if (!SubmitTrialJob(*e, live, t.index, next_config, static_cast<int>(jobs.size()),
                            restore_job))
          return;
        ++waiting;
      }
      continue;
    }
    if (t.status == kTrialPaused && !budget_over) {
      any_paused = true;
      continue;
    }
    complete(t, job->state == kJobFailed ? kTrialError : kTrialDone,
             budget_over && t.reason.empty() ? budget_reason : "");
  }

  // HyperBand's bracket decisions about paused trials.
  for (const auto& name : live.scheduler->TakeTrialsToResume()) {
    auto it = by_name.find(name);
    if (it == by_name.end()) continue;
    auto& u = UpdateOf(up, it->second->index);
    u.status = "";
    u.pending = json{{"restore_job", it->second->job_id},
                     {"config", ParsedOr(it->second->config, json::object())}}
                    .dump();
    changed = true;
  }
  for (const auto& [name, reason] : live.scheduler->TakeTrialsToStop()) {
    auto it = by_name.find(name);
    if (it == by_name.end()) continue;
    auto& u = UpdateOf(up, it->second->index);
    u.status = kTrialDone;
    u.reason = reason;
    changed = true;
  }

  // New trials: one waiting to start at a time (the queue gang-schedules it; the next is
  // created when it starts), within max_concurrent_trials.
  const int64_t total = live.spec.TotalTrials();
  auto more_to_create = [&] { return !budget_over && (total < 0 || live.next_index < total); };
  while (more_to_create() && waiting == 0 &&
         (config.max_concurrent_trials == 0 || running < config.max_concurrent_trials) &&
         live.scheduler->CanAddTrial()) {
    const int index = live.next_index++;
    if (!SubmitTrialJob(*e, live, index, live.spec.space.TrialConfig(e->seed, index), 0, ""))
      return;
    ++running;
    ++waiting;
  }

  if (running == 0 && !any_paused && live.submitting.empty() && !more_to_create()) {
    bool all_done = true;
    for (const auto& t : trials) {
      auto u = std::find_if(up.trials.begin(), up.trials.end(),
                            [&](const cmd::TrialUpdate& x) { return x.index == t.index; });
      const std::string status = u != up.trials.end() && u->status ? *u->status : t.status;
      all_done = all_done && (status == kTrialDone || status == kTrialError);
    }
    if (all_done) {
      up.state = kJobSucceeded;
      up.message = budget_over ? budget_reason : "";
      changed = true;
      LOG_INFO << "tune " << experiment_id << " ended: " << trials.size() << " trials"
               << (budget_over ? " (" + budget_reason + ")" : "");
    }
  }

  if (changed) Record(experiment_id, live, std::move(up));
  // After the update, so that the FSM records the trial's decision before its job ends.
  for (size_t i = 0; i < stops.size(); ++i)
    jobs_->Stop(stops[i], stop_reasons[i], [](Result<std::string>) {});
  for (const auto& job_id : releases) jobs_->ReleaseReports(job_id);
}

bool TuneController::SubmitTrialJob(const ExperimentRecord& e, Live& live, int index,
                                    const json& config, int generation,
                                    const std::string& restore_job) {
  const std::string name = TrialName(e.name, index);
  auto spec = TrialSpec(live.spec, config, name, restore_job);
  if (spec.ok()) {
    if (Status feasible = jobs_->CheckFeasible(*spec); !feasible.ok()) spec = feasible;
  }
  if (!spec.ok()) {
    live.failed = true;
    Fail(e.id, name + ": " + spec.status().message());
    return false;
  }
  JobManager::Submission sub;
  sub.spec = std::move(*spec);
  sub.library_sha256 = e.library_sha256;
  sub.library_path = e.library_path;
  sub.submission_id =
      "tune:" + e.id + ":" + std::to_string(index) + ":" + std::to_string(generation);
  sub.trial_dir =
      e.exp_dir + "/" + name + (generation > 0 ? "/run_" + std::to_string(generation) : "");
  sub.trial = cmd::TrialLink{e.id, index, name, config};
  live.submitting.insert(index);
  if (generation == 0 && index >= live.added) {
    // Now, not once the job is stored: HyperBand fills its brackets with the trials it
    // has been told of.
    live.scheduler->OnTrialAdd(name, config);
    live.added = index + 1;
  }
  const std::string id = e.id;
  jobs_->Submit(std::move(sub), [this, id, index, name](Result<std::string> r) {
    auto it = live_.find(id);
    if (it != live_.end()) it->second->submitting.erase(index);
    if (!r.ok()) {
      LOG_WARN << "tune " << id << ": " << name << " not submitted: " << r.status().message();
      live_.erase(id);  // read back what the store says
    }
    PassSoon(id);
  });
  return true;
}

void TuneController::Record(const std::string& experiment_id, Live& live,
                            cmd::UpdateExperiment update) {
  json fed = json::object();
  for (const auto& [index, n] : live.fed) fed[std::to_string(index)] = n;
  update.scheduler_state =
      json{{"scheduler", live.scheduler->SaveState()}, {"added", live.added}, {"fed", fed}}.dump();
  live.updating = true;
  log_->Propose(cmd::Encode(std::move(update)), [this, experiment_id](Result<json> r) {
    auto it = live_.find(experiment_id);
    if (!r.ok()) {
      LOG_WARN << "tune " << experiment_id << ": update not recorded: " << r.status().message();
      // What this head decided is not what the store says: read it back.
      if (it != live_.end()) live_.erase(it);
    } else if (it != live_.end()) {
      it->second->updating = false;
      it->second->pass_again = false;
    }
    PassSoon(experiment_id);
  });
}

void TuneController::Fail(const std::string& experiment_id, const std::string& message) {
  LOG_WARN << "tune " << experiment_id << " FAILED: " << message;
  cmd::UpdateExperiment up;
  up.experiment_id = experiment_id;
  up.state = kJobFailed;
  up.message = message;
  if (auto it = live_.find(experiment_id); it != live_.end()) it->second->failed = true;
  asio::post(io_, [this, experiment_id] {
    auto it = live_.find(experiment_id);
    if (it != live_.end() && it->second->failed) live_.erase(it);
  });
  log_->Propose(cmd::Encode(std::move(up)), [this, experiment_id](Result<json> r) {
    if (!r.ok()) return;
    for (const auto& t : store_->ListTrials(experiment_id)) {
      auto job = store_->GetJob(t.job_id, false);
      if (job && !IsTerminalJobState(job->state))
        jobs_->Stop(t.job_id, "the experiment failed", [](Result<std::string>) {});
    }
  });
}

void TuneController::Create(Creation c, std::function<void(Result<std::string>)> done) {
  const tune::TuneConfig& config = c.spec.config;
  const uint64_t seed = config.seed
                            ? *config.seed
                            : std::stoull(RandomHex(7), nullptr, 16) & ((uint64_t{1} << 53) - 1);
  auto scheduler = tune::MakeScheduler(config.scheduler, config.metric, config.mode, seed);
  if (!scheduler.ok()) {
    done(scheduler.status());
    return;
  }
  const std::string name = c.name.empty() ? "tune" : c.name;
  // Trial configs the trainer refuses are found now, not when the trial's turn comes.
  const int64_t total = c.spec.TotalTrials();
  const int64_t grid = c.spec.space.GridSize();
  const int64_t checks =
      std::min<int64_t>(total < 0 ? grid : total, grid + kConfigsCheckedAtCreate);
  for (int64_t i = 0; i < std::max<int64_t>(checks, 1); ++i) {
    auto spec = TrialSpec(c.spec, c.spec.space.TrialConfig(seed, i),
                          TrialName(name, static_cast<int>(i)), "");
    if (spec.ok()) {
      if (Status feasible = jobs_->CheckFeasible(*spec); !feasible.ok()) spec = feasible;
    }
    if (!spec.ok()) {
      done(Status::InvalidArgument("trial " + std::to_string(i) + " (" +
                                   tune::SearchSpace::ShortName(c.spec.space.ParamValues(
                                       c.spec.space.TrialConfig(seed, i))) +
                                   "): " + spec.status().message()));
      return;
    }
  }
  std::string storage = options_.default_storage_path;
  if (auto rc = c.spec.trainer.find("run_config"); rc != c.spec.trainer.end() && rc->is_object()) {
    auto sp = rc->find("storage_path");
    if (sp != rc->end() && sp->is_string() && !sp->get<std::string>().empty())
      storage = sp->get<std::string>();
  }
  cmd::CreateExperiment ce;
  ce.experiment_id = RandomHex(6);
  ce.name = name;
  ce.spec = tune::TuneSpecToJson(c.spec);
  ce.seed = static_cast<int64_t>(seed);
  ce.exp_dir = storage + "/" + name + "-" + ce.experiment_id;
  ce.library_sha256 = c.library_sha256;
  ce.library_path = c.library_path;
  ce.submission_id = c.submission_id;
  log_->Propose(
      cmd::Encode(std::move(ce)),
      Answered<cmd::CreateExperimentAnswer>([this, done](Result<cmd::CreateExperimentAnswer> r) {
        if (!r.ok()) {
          done(r.status());
          return;
        }
        LOG_INFO << "tune " << r->experiment_id << " created";
        done(r->experiment_id);
        PassSoon(r->experiment_id);
      }));
}

void TuneController::Stop(const std::string& experiment_id, std::function<void(Status)> done) {
  auto e = store_->GetExperiment(experiment_id);
  if (!e) {
    done(Status::NotFound("no experiment " + experiment_id));
    return;
  }
  if (e->state != kExperimentRunning) {
    done(Status::FailedPrecondition("experiment " + experiment_id + " is " + e->state));
    return;
  }
  cmd::UpdateExperiment up;
  up.experiment_id = experiment_id;
  up.state = kJobStopped;
  up.message = "stopped by user";
  live_.erase(experiment_id);
  log_->Propose(cmd::Encode(std::move(up)), [this, experiment_id, done](Result<json> r) {
    if (!r.ok()) {
      done(r.status());
      return;
    }
    for (const auto& t : store_->ListTrials(experiment_id)) {
      if (t.status == kTrialDone || t.status == kTrialError) continue;
      auto job = store_->GetJob(t.job_id, false);
      if (job && !IsTerminalJobState(job->state))
        jobs_->Stop(t.job_id, kStoppedWithExperiment, [](Result<std::string>) {});
    }
    done(Status::Ok());
  });
}

void TuneController::Resume(const std::string& experiment_id, std::function<void(Status)> done) {
  auto e = store_->GetExperiment(experiment_id);
  if (!e) {
    done(Status::NotFound("no experiment " + experiment_id));
    return;
  }
  if (e->state != kJobStopped) {
    done(Status::FailedPrecondition("experiment " + experiment_id + " is " + e->state +
                                    "; only a STOPPED experiment can be resumed"));
    return;
  }
  cmd::UpdateExperiment up;
  up.experiment_id = experiment_id;
  up.state = kExperimentRunning;
  log_->Propose(cmd::Encode(std::move(up)), [this, experiment_id, done](Result<json> r) {
    if (!r.ok()) {
      done(r.status());
      return;
    }
    done(Status::Ok());
    PassSoon(experiment_id);
  });
}

void TuneController::Delete(const std::string& experiment_id, bool remove_files,
                            std::function<void(Result<cmd::DeleteExperimentAnswer>)> done) {
  auto e = store_->GetExperiment(experiment_id);
  if (!e) {
    done(Status::NotFound("no experiment " + experiment_id));
    return;
  }
  std::set<std::string> jobs;
  for (const auto& t : store_->ListTrials(experiment_id)) {
    for (auto& id : JobsOf(t)) jobs.insert(std::move(id));
  }
  if (Status st = CheckDeletion(*store_, jobs, remove_files ? e->exp_dir : ""); !st.ok()) {
    done(st);
    return;
  }
  log_->Propose(cmd::Encode(cmd::DeleteExperiment{experiment_id}),
                Answered<cmd::DeleteExperimentAnswer>([this, experiment_id, remove_files, done](
                                                          Result<cmd::DeleteExperimentAnswer> r) {
                  if (r.ok()) {
                    jobs_->ForgetDeleted(r->job_ids, {});
                    if (remove_files && !r->exp_dir.empty()) {
                      // Behind the trials' result files still queued: they would make their
                      // dirs again.
                      asio::post(files_, [this, dir = r->exp_dir] {
                        asio::post(io_, [this, dir] {
                          if (!shut_down_) jobs_->ForgetDeleted({}, {dir});
                        });
                      });
                    }
                    LOG_INFO << "experiment " << experiment_id << " deleted with its "
                             << r->job_ids.size() << " trial jobs"
                             << (remove_files ? " and its dir " + r->exp_dir : "");
                  } else if (r.status().message().rfind("no experiment ", 0) == 0) {
                    // Another delete came first: as if this one had come after it.
                    r = Status::NotFound(r.status().message());
                  }
                  done(std::move(r));
                }));
}

}  // namespace traintl
