// GET /metrics (DESIGN §8): this daemon's view in the Prometheus text format 0.0.4, every
// name prefixed traintl_. It needs the API token like every other route (Prometheus sends
// it with `authorization: {credentials_file: ...}`); it is never forwarded: each daemon is
// scraped for what it knows (its Raft log, its node; the head also every node and job).
#include "daemon/api/api_routes.h"
#include "daemon/metrics/job_metric_series.h"
#include "daemon/metrics/prometheus_text.h"
#include "daemon/state/commands.h"

namespace traintl {
namespace {

using nlohmann::json;

void WriteResources(PrometheusText& out, const std::string& family, const std::string& node,
                    const json& resources) {
  if (!resources.is_object()) return;
  for (auto it = resources.begin(); it != resources.end(); ++it) {
    if (it->is_number())
      out.Sample(family, {{"node", node}, {"resource", it.key()}}, it->get<double>());
  }
}

std::string Render(const ApiContext& ctx) {
  PrometheusText out;
  const bool head = ctx.jobs->is_head();
  out.Family("traintl_build_info", "gauge", "traintl's version on this daemon (always 1)");
  out.Sample("traintl_build_info", {{"version", ctx.version}, {"node", ctx.node_id}}, 1);
  out.Family("traintl_is_head", "gauge", "1 when this daemon is the cluster's head");
  out.Sample("traintl_is_head", {{"node", ctx.node_id}}, head ? 1 : 0);

  // Nodes: every node the head knows; a non-head only itself.
  json nodes = json::array();
  if (head) {
    nodes = ctx.jobs->NodesView();
  } else {
    nodes.push_back({{"node_id", ctx.node_id},
                     {"state", "ALIVE"},
                     {"resources_total", ctx.node.AsResourceMap()},
                     {"resources_used", ctx.jobs->UsedResources()}});
  }
  out.Family("traintl_node_up", "gauge", "1 for a node that heartbeats, 0 for a LOST one");
  for (const auto& n : nodes)
    out.Sample("traintl_node_up", {{"node", n.value("node_id", "")}},
               n.value("state", "") == "ALIVE" ? 1 : 0);
  out.Family("traintl_node_resource_total", "gauge", "what a node offers, per resource");
  for (const auto& n : nodes)
    WriteResources(out, "traintl_node_resource_total", n.value("node_id", ""),
                   n.value("resources_total", json::object()));
  out.Family("traintl_node_resource_used", "gauge", "what running attempts take, per resource");
  for (const auto& n : nodes)
    WriteResources(out, "traintl_node_resource_used", n.value("node_id", ""),
                   n.value("resources_used", json::object()));
  if (head) {
    const int64_t now = commands::NowMs();
    out.Family("traintl_node_heartbeat_age_seconds", "gauge",
               "seconds since the head last heard from a node");
    for (const auto& n : nodes) {
      auto last = n.find("last_heartbeat");
      if (last != n.end() && last->is_number_integer() && last->get<int64_t>() > 0)
        out.Sample("traintl_node_heartbeat_age_seconds", {{"node", n.value("node_id", "")}},
                   static_cast<double>(now - last->get<int64_t>()) / 1000.0);
    }
  }

  // The replicated records: every voter has them.
  StateStore::Counts counts = ctx.store->CountByState();
  out.Family("traintl_jobs", "gauge", "jobs by state");
  for (const char* state :
       {kJobPending, kJobStarting, kJobRunning, kJobSucceeded, kJobFailed, kJobStopped}) {
    auto it = counts.jobs.find(state);
    out.Sample("traintl_jobs", {{"state", state}},
               it == counts.jobs.end() ? 0 : static_cast<double>(it->second));
  }
  out.Family("traintl_attempts", "gauge", "attempts of the stored jobs by state");
  for (const auto& [state, n] : counts.attempts)
    out.Sample("traintl_attempts", {{"state", state}}, static_cast<double>(n));
  out.Family("traintl_restarts", "gauge", "attempts of the stored jobs beyond each one's first");
  out.Sample("traintl_restarts", {}, static_cast<double>(counts.restarts));
  out.Family("traintl_experiments", "gauge", "tuning experiments by state");
  // Every state, 0 included: a deleted experiment must not leave its state's last count.
  for (const char* state : {kExperimentRunning, kJobSucceeded, kJobStopped, kJobFailed}) {
    auto it = counts.experiments.find(state);
    out.Sample("traintl_experiments", {{"state", state}},
               it == counts.experiments.end() ? 0 : static_cast<double>(it->second));
  }

  // Active jobs: their attempt and rank 0's latest reported metrics.
  std::vector<JobRecord> active = ctx.store->ListActiveJobs(/*with_spec=*/false);
  out.Family("traintl_job_attempt", "gauge", "an active job's current attempt number");
  for (const auto& j : active)
    out.Sample("traintl_job_attempt", {{"job_id", j.id}, {"job_name", j.name}}, j.attempt);
  out.Family("traintl_job_failures", "gauge", "an active job's failed attempts so far");
  for (const auto& j : active)
    out.Sample("traintl_job_failures", {{"job_id", j.id}, {"job_name", j.name}}, j.failures);
  out.Family("traintl_job_metric", "gauge",
             "the latest value of each numeric metric an active job reported (rank 0)");
  const JobMetricBounds bounds;  // why and how much: job_metric_series.h
  const size_t left_out = WriteJobMetricSeries(out, "traintl_job_metric", active, bounds);
  out.Family("traintl_job_metric_series_left_out", "gauge",
             "traintl_job_metric series not exported because the scrape had " +
                 std::to_string(bounds.total) + " already");
  out.Sample("traintl_job_metric_series_left_out", {}, static_cast<double>(left_out));

  if (head) {
    // Each rank's step timing (the head's view of the ranks: GET /v1/jobs/{job} progress).
    std::vector<std::pair<const JobRecord*, json>> progress;
    for (const auto& j : active) {
      json view = ctx.jobs->ProgressView(j.id);
      if (view.is_object()) progress.emplace_back(&j, std::move(view));
    }
    const std::pair<const char*, const char*> kRankSeries[] = {
        {"steps", "traintl_rank_steps"},
        {"step_s", "traintl_rank_step_seconds"},
        {"busy_s", "traintl_rank_busy_seconds"}};
    const char* kHelp[] = {"training steps a rank of an active job has completed",
                           "a rank's latest step time",
                           "a rank's latest step time not spent waiting for its peers"};
    for (size_t k = 0; k < 3; ++k) {
      out.Family(kRankSeries[k].second, "gauge", kHelp[k]);
      for (const auto& [job, view] : progress) {
        for (const auto& r : view.value("ranks", json::array())) {
          auto v = r.find(kRankSeries[k].first);
          if (v == r.end() || !v->is_number()) continue;
          out.Sample(kRankSeries[k].second,
                     {{"job_id", job->id},
                      {"job_name", job->name},
                      {"rank", std::to_string(r.value("rank", 0))},
                      {"node", r.value("node", "")}},
                     v->get<double>());
        }
      }
    }
    out.Family("traintl_rank_straggler", "gauge",
               "a straggler's busy time per step over its peers' median (absent: none)");
    for (const auto& [job, view] : progress) {
      for (const auto& st : view.value("stragglers", json::array()))
        out.Sample("traintl_rank_straggler",
                   {{"job_id", job->id},
                    {"job_name", job->name},
                    {"rank", std::to_string(st.value("rank", 0))},
                    {"node", st.value("node", "")}},
                   st.value("slower", 0.0));
    }
  }

  if (ctx.raft != nullptr) {
    RaftNode::LogProgress p = ctx.raft->Progress();
    const LeaderInfo leader = ctx.raft->Leader();
    out.Family("traintl_raft_term", "gauge", "the Raft term this voter is in");
    out.Sample("traintl_raft_term", {}, static_cast<double>(p.term));
    out.Family("traintl_raft_commit_index", "gauge", "the highest entry known committed");
    out.Sample("traintl_raft_commit_index", {}, static_cast<double>(p.commit_index));
    out.Family("traintl_raft_applied_index", "gauge", "the highest entry applied here");
    out.Sample("traintl_raft_applied_index", {}, static_cast<double>(p.applied_index));
    out.Family("traintl_raft_last_index", "gauge", "the highest entry in this voter's log");
    out.Sample("traintl_raft_last_index", {}, static_cast<double>(p.last_index));
    out.Family("traintl_raft_leader", "gauge",
               "the Raft id of the leader this voter knows (0: none)");
    out.Sample("traintl_raft_leader", {}, static_cast<double>(leader.id));
  }
  if (head) {
    ctx.jobs->checkpoint_commit_latency().Write(
        out, "traintl_checkpoint_commit_seconds",
        "from a report with a checkpoint to its commit (merge and Raft commit)");
  }
  return out.text();
}

}  // namespace

void RegisterMetricsRoute(http::Router& router, const ApiContext& ctx) {
  router.Add("GET", "/metrics", [ctx](const http::Request&, std::shared_ptr<http::Responder> res) {
    res->Send(200, "text/plain; version=0.0.4; charset=utf-8", Render(ctx));
  });
}

}  // namespace traintl
