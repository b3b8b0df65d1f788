#include "daemon/state/commands.h"

#include <chrono>

#include "common/crypto.h"

namespace traintl::commands {
namespace {

using nlohmann::json;

json Base(const char* op) { return json{{"op", op}, {"rid", RandomHex(12)}, {"time", NowMs()}}; }

template <typename T>
json Opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

}  // namespace

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string SubmitJob(const JobRecord& job, const std::string& submission_id) {
  return SubmitJob(job, json::parse(job.spec), submission_id);
}

std::string SubmitJob(const JobRecord& job, const json& spec, const std::string& submission_id) {
  json c = Base("submit_job");
  c["job"] = {{"id", job.id},
              {"name", job.name},
              {"spec", spec},
              {"priority", job.priority},
              {"library_sha256", job.library_sha256},
              {"library_path", job.library_path},
              {"trial_dir", job.trial_dir},
              {"submitted_at", job.submitted_at}};
  c["submission_id"] = submission_id;
  return c.dump();
}

std::string SetPendingReason(const std::string& job_id, const std::string& reason) {
  json c = Base("set_pending_reason");
  c["job_id"] = job_id;
  c["reason"] = reason;
  return c.dump();
}

std::string SetPendingReasons(const std::map<std::string, std::string>& reasons) {
  json c = Base("set_pending_reasons");
  c["reasons"] = reasons;
  return c.dump();
}

std::string StartAttempt(const std::string& job_id, int attempt, const std::string& restored_from) {
  json c = Base("start_attempt");
  c["job_id"] = job_id;
  c["attempt"] = attempt;
  c["restored_from"] = restored_from;
  return c.dump();
}

std::string JobRunning(const std::string& job_id, int attempt) {
  json c = Base("job_running");
  c["job_id"] = job_id;
  c["attempt"] = attempt;
  return c.dump();
}

std::string WorkerEvent(const std::string& job_id, int attempt, int rank, const std::string& event,
                        const std::string& detail) {
  json c = Base("worker_event");
  c["job_id"] = job_id;
  c["attempt"] = attempt;
  c["rank"] = rank;
  c["event"] = event;
  c["detail"] = detail;
  return c.dump();
}

std::string Report(const std::string& job_id, int attempt, int seq, const json& metrics) {
  json c = Base("report");
  c["job_id"] = job_id;
  c["attempt"] = attempt;
  c["seq"] = seq;
  c["metrics"] = metrics;
  return c.dump();
}

std::string CommitCheckpoint(const std::string& job_id, int attempt, int seq,
                             const std::string& path, const json& metrics) {
  json c = Base("commit_checkpoint");
  c["job_id"] = job_id;
  c["attempt"] = attempt;
  c["seq"] = seq;
  c["path"] = path;
  c["metrics"] = metrics;
  return c.dump();
}

std::string EndAttempt(const std::string& job_id, int attempt, const AttemptOutcome& o) {
  json c = Base("end_attempt");
  c["job_id"] = job_id;
  c["attempt"] = attempt;
  c["state"] = o.state;
  c["failed_rank"] = Opt(o.failed_rank);
  c["exit_code"] = Opt(o.exit_code);
  c["signal"] = Opt(o.signal);
  c["reason"] = o.reason;
  c["log_tail"] = o.log_tail;
  c["retryable"] = o.retryable;
  return c.dump();
}

std::string StopJob(const std::string& job_id) {
  json c = Base("stop_job");
  c["job_id"] = job_id;
  return c.dump();
}

std::string FailPendingJob(const std::string& job_id, const std::string& reason) {
  json c = Base("fail_pending_job");
  c["job_id"] = job_id;
  c["reason"] = reason;
  return c.dump();
}

std::string SetVoterAddress(uint64_t raft_id, const std::string& api_address) {
  json c = Base("set_voter_address");
  c["raft_id"] = raft_id;
  c["api_address"] = api_address;
  return c.dump();
}

}  // namespace traintl::commands
