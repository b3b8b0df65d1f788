#include "daemon/state/commands.h"

#include <utility>

#include "proto/job_definition.h"

namespace traintl::commands {

using nlohmann::json;

namespace {

cmd::SubmitJob SubmitJobOf(const JobRecord& job, const std::string& submission_id) {
  cmd::SubmitJob c;
  c.job_id = job.id;
  c.name = job.name;
  c.policy = job.policy;
  c.priority = job.priority;
  c.library_sha256 = job.library_sha256;
  c.library_path = job.library_path;
  c.trial_dir = job.trial_dir;
  c.submitted_at = job.submitted_at;
  c.submission_id = submission_id;
  return c;
}

}  // namespace

std::string SubmitJob(const JobRecord& job, const std::string& submission_id) {
  cmd::SubmitJob c = SubmitJobOf(job, submission_id);
  if (!job.definition.empty()) {
    c.definition = json::parse(job.definition);
  } else if (auto d = JobDefinitionFromSpec(json::parse(job.spec)); d.ok()) {
    c.definition = std::move(*d);
  } else {
    c.spec = json::parse(job.spec);  // as an older release wrote it
  }
  return cmd::Encode(std::move(c));
}

std::string SubmitJob(const JobRecord& job, const JobSpec& spec, const std::string& submission_id,
                      std::optional<cmd::TrialLink> trial) {
  cmd::SubmitJob c = SubmitJobOf(job, submission_id);
  c.definition = JobDefinitionToJson(spec);
  c.trial = std::move(trial);
  return cmd::Encode(std::move(c));
}

std::string SetPendingReasons(const std::map<std::string, std::string>& reasons) {
  return cmd::Encode(cmd::SetPendingReasons{reasons});
}

std::string StartAttempt(const std::string& job_id, int attempt, const std::string& restored_from,
                         const std::string& head_node, const std::string& head_run,
                         const std::vector<std::string>& rank_nodes,
                         const std::map<std::string, std::string>& node_addresses) {
  return cmd::Encode(cmd::StartAttempt{job_id, attempt, restored_from, head_node, head_run,
                                       rank_nodes, node_addresses});
}

std::string JobRunning(const std::string& job_id, int attempt) {
  return cmd::Encode(cmd::JobRunning{job_id, attempt});
}

std::string WorkerEvent(const std::string& job_id, int attempt, int rank, const std::string& event,
                        const std::string& detail) {
  return cmd::Encode(cmd::WorkerEvent{job_id, attempt, rank, event, detail});
}

std::string Report(const std::string& job_id, int attempt, int seq, const json& metrics) {
  return cmd::Encode(cmd::Report{job_id, attempt, seq, metrics});
}

std::string CommitCheckpoint(const std::string& job_id, int attempt, int seq,
                             const std::string& path, const json& metrics) {
  return cmd::Encode(cmd::CommitCheckpoint{job_id, attempt, seq, path, metrics});
}

std::string EndAttempt(const std::string& job_id, int attempt, const AttemptOutcome& o) {
  return cmd::Encode(cmd::EndAttempt{job_id, attempt, o});
}

std::string StopJob(const std::string& job_id, const std::string& reason) {
  return cmd::Encode(cmd::StopJob{job_id, reason});
}
std::string DeleteJob(const std::string& job_id) { return cmd::Encode(cmd::DeleteJob{job_id}); }

std::string FailPendingJob(const std::string& job_id, const std::string& reason) {
  return cmd::Encode(cmd::FailPendingJob{job_id, reason});
}

std::string SetVoterAddress(uint64_t raft_id, const std::string& api_address) {
  return cmd::Encode(cmd::SetVoterAddress{raft_id, api_address});
}

}  // namespace traintl::commands
