#include "daemon/api/internal_routes.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "common/json_depth.h"
#include "common/logging.h"
#include "daemon/consensus/raft_node.h"
#include "daemon/consensus/state_machine.h"
#include "daemon/head/node_registry.h"
#include "daemon/node/log_chunk.h"
#include "proto/launch_plan.h"
#include "proto/worker_events.h"

namespace traintl {

namespace asio = boost::asio;
using nlohmann::json;
using ResponderPtr = std::shared_ptr<http::Responder>;

namespace {

// The routes of this file are daemon-to-daemon: only the cluster credential opens them,
// not the API token (docs/SECURITY.md). Each Add goes through this.
class ClusterRouter {
 public:
  explicit ClusterRouter(http::Router& router) : router_(router) {}
  void Add(std::string method, std::string pattern, http::Handler handler,
           http::RouteOptions options = {}) {
    options.access = http::Access::kCluster;
    router_.Add(std::move(method), std::move(pattern), std::move(handler), options);
  }

 private:
  http::Router& router_;
};

// `ev[key]` as a T into *out, when present and not null (json::exception when not a T).
template <class T, class Out>
void TakeIfSet(const json& ev, const char* key, Out* out) {
  if (auto v = ev.find(key); v != ev.end() && !v->is_null()) *out = v->get<T>();
}

// One worker event of POST /v1/internal/events, handed to the job manager. Throws
// json::exception on a malformed event.
void ApplyWorkerEvent(JobManager* jobs, const json& ev, const std::string& node) {
  const std::string type = ev.at("type").get<std::string>();
  const std::string job = ev.at("job_id").get<std::string>();
  const int attempt = ev.at("attempt").get<int>();
  const int rank = ev.at("rank").get<int>();
  if (!jobs->IsRankOn(job, attempt, rank, node)) {
    LOG_WARN << "ignoring a " << type << " of job " << job << " attempt " << attempt << " rank "
             << rank << " from node " << node << ": the rank was moved to another node";
    return;
  }
  if (type == "hello") {
    jobs->OnWorkerHello(job, attempt, rank);
  } else if (type == "report") {
    events::Report report;
    report.seq = ev.at("seq").get<int>();
    report.metrics = ev.at("metrics");
    report.checkpoint = ev.at("checkpoint").get<std::string>();
    jobs->OnWorkerReport(job, attempt, rank, report);
  } else if (type == "progress") {
    jobs->OnWorkerProgress(job, attempt, rank, events::ProgressFromJson(ev.at("progress")));
  } else if (type == "exit") {
    WorkerExit e;
    e.job_id = job;
    e.attempt = attempt;
    e.rank = rank;
    if (!ev.at("exit_code").is_null()) e.exit_code = ev["exit_code"].get<int>();
    if (!ev.at("signal").is_null()) e.signal = ev["signal"].get<int>();
    e.done_seen = ev.at("done_seen").get<bool>();
    e.done_ok = ev.at("done_ok").get<bool>();
    e.done_error = ev.at("done_error").get<std::string>();
    e.retryable = ev.at("retryable").get<bool>();
    e.stopped_by_agent = ev.at("stopped_by_agent").get<bool>();
    // Absent from the events of an older release's agent.
    TakeIfSet<int>(ev, "command_exit_code", &e.command_exit_code);
    TakeIfSet<int>(ev, "command_signal", &e.command_signal);
    TakeIfSet<int>(ev, "pid", &e.pid);
    TakeIfSet<uint64_t>(ev, "launch", &e.launch);
    TakeIfSet<int>(ev, "generation", &e.generation);
    jobs->OnRemoteWorkerExit(e, ev.at("log_tail").get<std::string>());
  }
}

void RegisterHeadRoutes(ClusterRouter router, const InternalRoutesContext& ctx) {
  router.Add("POST", "/v1/internal/heartbeat", [ctx](const http::Request& req, ResponderPtr res) {
    if (!ctx.jobs->is_head()) {
      res->SendError(503, "not the head");
      return;
    }
    auto s = NodeStatusFromJson(ParseJsonBounded(req.body));
    if (!s.ok()) {
      res->SendError(400, s.status().message());
      return;
    }
    res->SendJson(200, ctx.jobs->OnHeartbeat(std::move(*s)));
  });

  router.Add("POST", "/v1/internal/join", [ctx](const http::Request& req, ResponderPtr res) {
    if (!ctx.jobs->is_head() || ctx.raft == nullptr) {
      res->SendError(503, "not the head");
      return;
    }
    json body = ParseJsonBounded(req.body);
    uint64_t id = 0;
    std::string address;
    try {
      id = body.at("raft_id").get<uint64_t>();
      address = body.at("raft_address").get<std::string>();
    } catch (const std::exception&) {
      res->SendError(400, "join needs raft_id and raft_address");
      return;
    }
    if (id <= 1 || address.empty()) {
      res->SendError(400, "bad raft_id or raft_address");
      return;
    }
    LOG_INFO << "adding voter " << id << " at " << address;
    ctx.raft->AddVoter(id, address, [io = ctx.io, res, id](Status st) {
      asio::post(*io, [res, st, id] {
        if (st.ok()) {
          res->SendJson(200, {{"raft_id", id}});
        } else {
          res->SendError(503, "could not add the voter: " + st.message());
        }
      });
    });
  });

  http::RouteOptions big;
  big.max_body_bytes = 64u << 20;
  router.Add(
      "POST", "/v1/internal/events",
      [ctx](const http::Request& req, ResponderPtr res) {
        if (!ctx.jobs->is_head()) {
          res->SendError(503, "not the head");
          return;
        }
        // Two levels more than a worker's line may use: the body and its events array.
        json body = ParseJsonBounded(req.body, kMaxJsonDepth + 2);
        if (!body.is_object() || !body.contains("events") || !body["events"].is_array()) {
          res->SendError(400, "malformed events");
          return;
        }
        // Events are applied in order. One the head cannot take now (its state could not
        // be read: not the event's fault) ends the batch with 503 and the count applied
        // before it, which the node drops from its queue before it sends the rest again:
        // an event applied twice could start a second replacement for a failed rank. A node
        // of an older release, which would send the whole batch again, does not say
        // "partial": its event is dropped as before.
        const auto node_field = body.find("node_id");
        const std::string node = node_field != body.end() && node_field->is_string()
                                     ? node_field->get<std::string>()
                                     : "";
        const auto partial_field = body.find("partial");
        const bool partial = partial_field != body.end() && partial_field->is_boolean() &&
                             partial_field->get<bool>();
        size_t applied = 0;
        for (const auto& ev : body["events"]) {
          try {
            ApplyWorkerEvent(ctx.jobs, ev, node);
          } catch (const StateWriteError& e) {
            LOG_WARN << "worker events not taken: " << e.what();
            if (partial) {
              res->SendError(503, "the head cannot read its state now", {{"applied", applied}});
              return;
            }
          } catch (const std::exception& e) {
            LOG_WARN << "malformed worker event from " << (node.empty() ? "?" : node) << ": "
                     << e.what();
          }
          ++applied;
        }
        res->SendJson(200, {{"ok", true}});
      },
      big);
}

// Starts the plan's workers on this node's agent and answers the head.
void LaunchForHead(Agent* agent, BlobStore* blobs, NodeAttemptPlan p, const ResponderPtr& res) {
  if (!p.library_sha256.empty()) {
    auto path = blobs->PathOf(p.library_sha256);
    if (!path.ok()) {
      res->SendError(500, "library " + p.library_sha256 + ": " + path.status().message());
      return;
    }
    p.library_path = *path;
  }
  LOG_INFO << "job " << p.job_id << ": starting " << p.world_ranks.size() << " rank(s) of attempt "
           << p.attempt << " for the head";
  Result<int> port = agent->Launch(p);
  if (!port.ok()) {
    res->SendError(500, port.status().message());
    return;
  }
  res->SendJson(200, {{"ok", true}, {"master_port", *port}});
}

// A non-negative (or, with `allow_negative`, -1) decimal integer of at most 15 digits.
bool ParseQueryInt(const http::Request& req, const char* key, int64_t* out,
                   bool allow_negative = false) {
  auto it = req.query.find(key);
  if (it == req.query.end() || it->second.empty()) return true;
  const std::string& v = it->second;
  if (allow_negative && v == "-1") {
    *out = -1;
    return true;
  }
  if (v.size() > 15 || v.find_first_not_of("0123456789") != std::string::npos) return false;
  *out = std::stoll(v);
  return true;
}

// Job ids are hex; anything else could leave the jobs directory.
bool IsJobIdShaped(const std::string& id) {
  return !id.empty() && id.size() <= 64 &&
         id.find_first_not_of("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_-") ==
             std::string::npos;
}

// GET /v1/internal/logs/{job}/{attempt}/{rank}: a chunk of a rank's log that ran here
// (daemon/node/log_chunk.h), for a daemon serving `traintl logs` of a remote rank.
void HandleInternalLogs(const InternalRoutesContext& ctx, const http::Request& req,
                        const ResponderPtr& res) {
  constexpr int64_t kMaxChunk = 4 << 20;
  const std::string& job = req.params.at("job");
  const std::string& attempt_s = req.params.at("attempt");
  const std::string& rank_s = req.params.at("rank");
  auto small_int = [](const std::string& v) {
    return !v.empty() && v.size() <= 9 && v.find_first_not_of("0123456789") == std::string::npos;
  };
  if (!IsJobIdShaped(job) || !small_int(attempt_s) || !small_int(rank_s)) {
    res->SendError(400, "bad job, attempt or rank");
    return;
  }
  int64_t offset = 0, max = 1 << 20, tail = 0, since = 0, max_bytes = 0;
  if (!ParseQueryInt(req, "offset", &offset, /*allow_negative=*/true) ||
      !ParseQueryInt(req, "max", &max) || !ParseQueryInt(req, "tail", &tail) ||
      !ParseQueryInt(req, "since", &since) || !ParseQueryInt(req, "max_bytes", &max_bytes) ||
      tail > 1000000000) {
    res->SendError(400, "bad offset, max, tail, since or max_bytes");
    return;
  }
  auto marks = req.query.find("marks");
  const std::string path = ctx.agent->LogPath(job, std::stoi(attempt_s), std::stoi(rank_s));
  LogChunk c = ReadLogChunk(
      path, offset, static_cast<size_t>(std::min(max, kMaxChunk)), static_cast<int>(tail), since,
      marks != req.query.end() && marks->second == "1", static_cast<size_t>(max_bytes));
  res->Send(200, "application/octet-stream", EncodeLogChunk(c));
}

void RegisterNodeRoutes(ClusterRouter router, const InternalRoutesContext& ctx) {
  router.Add(
      "GET", "/v1/internal/logs/{job}/{attempt}/{rank}",
      [ctx](const http::Request& req, ResponderPtr res) { HandleInternalLogs(ctx, req, res); });

  router.Add("POST", "/v1/internal/launch", [ctx](const http::Request& req, ResponderPtr res) {
    json body = ParseJsonBounded(req.body);
    if (!body.is_object()) {
      res->SendError(400, "malformed plan");
      return;
    }
    auto plan = NodeAttemptPlanFromJson(body);
    if (!plan.ok()) {
      res->SendError(400, plan.status().message());
      return;
    }
    if (plan->library_sha256.empty() || ctx.blobs->Has(plan->library_sha256)) {
      LaunchForHead(ctx.agent, ctx.blobs, std::move(*plan), res);
      return;
    }
    // Fetch the library by hash from the head (verified by BlobStore::Put), then launch.
    const std::string source = body.value("blob_source", "");
    auto p = std::make_shared<NodeAttemptPlan>(std::move(*plan));
    PostThen(
        *ctx.calls, *ctx.io,
        [ctx, source, p] {
          auto data = ctx.peers->GetBlob(source, p->library_sha256);
          return data.ok() ? ctx.blobs->Put(p->library_sha256, *data) : data.status();
        },
        [ctx, p, res](Status st) {
          if (!st.ok()) {
            res->SendError(500, "cannot fetch the training library: " + st.message());
            return;
          }
          LaunchForHead(ctx.agent, ctx.blobs, *p, res);
        });
  });

  router.Add("POST", "/v1/internal/stop", [ctx](const http::Request& req, ResponderPtr res) {
    json body = ParseJsonBounded(req.body);
    if (!body.is_object() || !body.contains("job_id") || !body["job_id"].is_string() ||
        !body.contains("attempt") || !body["attempt"].is_number_integer()) {
      res->SendError(400, "stop needs job_id and attempt");
      return;
    }
    // "urgent" (optional; older heads omit it): SIGTERM at once, the attempt failed.
    const bool urgent =
        body.contains("urgent") && body["urgent"].is_boolean() && body["urgent"].get<bool>();
    ctx.agent->Stop(body["job_id"].get<std::string>(), body["attempt"].get<int>(), urgent);
    res->SendJson(200, {{"ok", true}});
  });

  // Held reports the head decided on (JobManager::ReleaseReports): their workers go on.
  router.Add("POST", "/v1/internal/ack", [ctx](const http::Request& req, ResponderPtr res) {
    json body = ParseJsonBounded(req.body);
    if (!body.is_object() || !body.contains("job_id") || !body["job_id"].is_string() ||
        !body.contains("attempt") || !body["attempt"].is_number_integer() ||
        !body.contains("acks") || !body["acks"].is_array()) {
      res->SendError(400, "ack needs job_id, attempt and acks");
      return;
    }
    for (const json& a : body["acks"]) {
      if (!a.is_array() || a.size() != 2 || !a[0].is_number_integer() ||
          !a[1].is_number_integer()) {
        res->SendError(400, "acks must be [rank, seq] pairs");
        return;
      }
    }
    for (const json& a : body["acks"])
      ctx.agent->Ack(body["job_id"].get<std::string>(), body["attempt"].get<int>(), a[0].get<int>(),
                     a[1].get<int>());
    res->SendJson(200, {{"ok", true}});
  });

  // Peer recovery: a rank of the attempt is being replaced; its workers here regroup.
  router.Add("POST", "/v1/internal/regroup", [ctx](const http::Request& req, ResponderPtr res) {
    json body = ParseJsonBounded(req.body);
    if (!body.is_object() || !body.contains("job_id") || !body["job_id"].is_string() ||
        !body.contains("attempt") || !body["attempt"].is_number_integer() ||
        !body.contains("generation") || !body["generation"].is_number_integer() ||
        body["generation"].get<int64_t>() < 1 || body["generation"].get<int64_t>() > INT32_MAX) {
      res->SendError(400, "regroup needs job_id, attempt and a generation >= 1");
      return;
    }
    // The message's own codec reads the rest (ranks, store), as a worker would.
    json message = body;
    message["type"] = "regroup";
    message.erase("job_id");
    message.erase("attempt");
    auto regroup = events::DecodeAgentMessage(message.dump());
    if (!regroup.ok()) {
      res->SendError(400, regroup.status().message());
      return;
    }
    ctx.agent->Regroup(body["job_id"].get<std::string>(), body["attempt"].get<int>(),
                       std::get<events::Regroup>(*regroup));
    res->SendJson(200, {{"ok", true}});
  });

  router.Add("GET", "/v1/blobs/{sha}", [ctx](const http::Request& req, ResponderPtr res) {
    auto path = ctx.blobs->PathOf(req.params.at("sha"));
    if (!path.ok()) {
      res->SendError(path.status().code() == Status::Code::kInvalidArgument ? 400 : 404,
                     path.status().message());
      return;
    }
    PostThen(
        *ctx.blob_work, *ctx.io, [path = *path] { return ReadFile(path); },
        [res](Result<std::string> data) {
          if (!data.ok()) {
            res->SendError(500, data.status().message());
            return;
          }
          res->Send(200, "application/octet-stream", std::move(*data));
        });
  });
}

}  // namespace

void RegisterInternalRoutes(http::Router& router, InternalRoutesContext ctx) {
  RegisterHeadRoutes(ClusterRouter(router), ctx);
  RegisterNodeRoutes(ClusterRouter(router), ctx);
}

}  // namespace traintl
