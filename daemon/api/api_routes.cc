#include "daemon/api/api_routes.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <mutex>

#include "common/crypto.h"
#include "common/file_util.h"
#include "common/fs_identity.h"
#include "common/json_depth.h"
#include "common/logging.h"
#include "daemon/api/log_stream.h"
#include "daemon/api/views.h"
#include "daemon/http/responder.h"
#include "daemon/state/commands.h"
#include "proto/job_definition.h"
#include "proto/rank_list.h"

namespace traintl {

namespace asio = boost::asio;
using http::Request;
using http::Responder;
using nlohmann::json;
using ResponderPtr = std::shared_ptr<Responder>;

namespace {

// GET /v1/jobs pages: this many jobs unless ?limit= says otherwise, and never more than
// kMaxJobPage (an answer's size and time stay bounded however many jobs are stored).
constexpr int kDefaultJobPage = 100;
constexpr int kMaxJobPage = 1000;

// Resolves {job} (id or prefix) or answers 404 / 409 and returns nullopt.
std::optional<JobRecord> ResolveJob(const ApiContext& ctx, const Request& req,
                                    const ResponderPtr& res) {
  std::vector<std::string> candidates;
  auto id = ctx.store->ResolveJobId(req.params.at("job"), &candidates);
  if (!id.ok()) {
    if (!candidates.empty()) {
      res->SendError(409, id.status().message(), {{"candidates", candidates}});
    } else {
      res->SendError(404, id.status().message());
    }
    return std::nullopt;
  }
  auto job = ctx.store->GetJob(*id);
  if (!job) res->SendError(404, "no job " + *id);
  return job;
}

// Parses a non-negative integer query parameter; answers 400 and returns false on error.
bool QueryInt(const Request& req, const ResponderPtr& res, const char* name, int* out) {
  auto it = req.query.find(name);
  if (it == req.query.end() || it->second.empty()) return true;
  const std::string& v = it->second;
  if (v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos) {
    res->SendError(400, std::string("query parameter ") + name + " must be a non-negative integer");
    return false;
  }
  *out = std::stoi(v);
  return true;
}

}  // namespace

bool QueryFlag(const http::Request& req, const std::string& name) {
  auto it = req.query.find(name);
  return it != req.query.end() && (it->second == "1" || it->second == "true");
}

int HttpStatusFor(const Status& st) {
  switch (st.code()) {
    case Status::Code::kInvalidArgument:
      return 400;
    case Status::Code::kNotFound:
      return 404;
    case Status::Code::kFailedPrecondition:
      return 409;
    case Status::Code::kUnavailable:
      return 503;
    case Status::Code::kResourceExhausted:
      return IsDiskFull(st) ? 507 : 503;
    default:
      return 500;
  }
}

bool ReadSubmissionId(const json& body, const ResponderPtr& res, std::string* out) {
  auto it = body.find("submission_id");
  if (it == body.end()) return true;
  if (!it->is_string() || it->get<std::string>().size() > 128) {
    res->SendError(400, "submission_id: must be a string of at most 128 chars",
                   {{"field", "submission_id"}});
    return false;
  }
  *out = it->get<std::string>();
  return true;
}

bool ResolveJobCode(const ApiContext& ctx, const json& body, const JobSpec& spec,
                    const ResponderPtr& res, std::string* sha256, std::string* path_out) {
  // The job's code blob: the library, or a python or command job's packed working_dir.
  const bool is_library = spec.entry_kind == EntrypointKind::kLibrary;
  const char* blob_field = is_library ? "library_sha256" : "working_dir_sha256";
  const char* other_field = is_library ? "working_dir_sha256" : "library_sha256";
  if (body.contains(other_field)) {
    res->SendError(400,
                   std::string(other_field) + ": does not apply to a " +
                       EntrypointKindName(spec.entry_kind) + " entry point (send " + blob_field +
                       ")",
                   {{"field", other_field}});
    return false;
  }
  if (body.contains(blob_field)) {
    if (!body[blob_field].is_string()) {
      res->SendError(400, std::string(blob_field) + ": must be a string", {{"field", blob_field}});
      return false;
    }
    if (!is_library && spec.working_dir.empty()) {
      res->SendError(400, std::string(blob_field) + ": the spec has no entrypoint.working_dir",
                     {{"field", blob_field}});
      return false;
    }
    *sha256 = body[blob_field].get<std::string>();
    auto path = ctx.blobs->PathOf(*sha256);
    if (!path.ok()) {
      // missing_blob: the client may upload it and post again (traintl submit does).
      res->SendError(400,
                     std::string(blob_field) + ": " + path.status().message() +
                         " (upload it with PUT /v1/blobs/<sha256> first)",
                     {{"field", blob_field},
                      {"missing_blob", path.status().code() == Status::Code::kNotFound}});
      return false;
    }
    *path_out = *path;
  } else if (!is_library) {
    if (!spec.working_dir.empty()) {
      res->SendError(400,
                     "entrypoint.working_dir: the packed directory must be uploaded (PUT "
                     "/v1/blobs/<sha256>) and named by working_dir_sha256; traintl submit "
                     "does both",
                     {{"field", "entrypoint.working_dir"}});
      return false;
    }
  } else {
    if (spec.library.empty() || spec.library[0] != '/') {
      res->SendError(400,
                     "entrypoint.library: must be an absolute path on the node when no "
                     "library_sha256 is given",
                     {{"field", "entrypoint.library"}});
      return false;
    }
    // It may exist only on other nodes; when it exists here it must be a regular file (a
    // FIFO would block the worker's dlopen). The worker checks again where it runs.
    struct stat st;
    int found = -1;
    {
      ScopedFsIdentity as_worker(ctx.worker_fs_identity ? &*ctx.worker_fs_identity : nullptr);
      found = ::stat(spec.library.c_str(), &st);
    }
    if (found == 0 && !S_ISREG(st.st_mode)) {
      res->SendError(400, "entrypoint.library: " + spec.library + " is not a regular file",
                     {{"field", "entrypoint.library"}});
      return false;
    }
    *path_out = spec.library;
  }
  return true;
}

namespace {

void HandleSubmit(const ApiContext& ctx, const Request& req, const ResponderPtr& res) {
  // validate's request (dry_run=1): every check but the code's presence, nothing stored,
  // and no warning for what it refuses (checking is what it is for).
  auto dry = req.query.find("dry_run");
  const bool dry_run = dry != req.query.end() && dry->second == "1";
  // Strict parsing: bounded depth and size, no silently merged duplicate keys.
  SpecError syntax;
  auto parsed = ParseJsonStrict(req.body, kMaxSpecDepth + 1, kMaxSpecTextBytes, &syntax);
  if (!parsed.ok()) {
    res->SendError(400, "request body: " + syntax.ToString());
    return;
  }
  json body = std::move(*parsed);
  if (!body.is_object()) {
    res->SendError(400, "request body must be a JSON object {\"spec\": {...}}");
    return;
  }
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (it.key() != "spec" && it.key() != "library_sha256" && it.key() != "working_dir_sha256" &&
        it.key() != "submission_id") {
      res->SendError(400, "unknown field " + it.key(), {{"field", it.key()}});
      return;
    }
  }
  if (!body.contains("spec")) {
    res->SendError(400, "spec: required", {{"field", "spec"}});
    return;
  }
  SpecError err;
  auto spec = ParseJobSpec(body["spec"], &err);
  if (!spec.ok()) {
    if (!dry_run) LOG_WARN << "refused a job spec from " << req.remote << ": " << err.ToString();
    res->SendError(400, err.ToString(), {{"field", err.field}});
    return;
  }
  if (dry_run) {
    for (const char* field : {"library_sha256", "working_dir_sha256", "submission_id"}) {
      if (body.contains(field)) {
        res->SendError(400, std::string(field) + ": not taken by a dry run", {{"field", field}});
        return;
      }
    }
  }
  Status feasible = ctx.jobs->CheckFeasible(*spec);
  if (!feasible.ok()) {
    if (!dry_run) {
      LOG_WARN << "refused job " << spec->name << " from " << req.remote << ": "
               << feasible.message();
    }
    res->SendError(400, feasible.message(), {{"field", "scaling_config"}});
    return;
  }
  if (dry_run) {
    res->SendJson(200, {{"valid", true}, {"spec", JobSpecToJson(*spec)}});
    return;
  }
  JobManager::Submission sub;
  if (!ResolveJobCode(ctx, body, *spec, res, &sub.library_sha256, &sub.library_path)) return;
  if (!ReadSubmissionId(body, res, &sub.submission_id)) return;
  sub.spec = std::move(*spec);
  ctx.jobs->Submit(std::move(sub), [res](Result<std::string> id) {
    if (!id.ok()) {
      res->SendError(HttpStatusFor(id.status()), id.status().message());
      return;
    }
    res->SendJson(201, {{"job_id", *id}, {"state", kJobPending}});
  });
}

void HandleLogs(const ApiContext& ctx, const Request& req, const ResponderPtr& res) {
  auto job = ResolveJob(ctx, req, res);
  if (!job) return;
  LogStream::Options o;
  const int num_workers = JobNumWorkers(*job);
  int rank = 0, attempt = 0, tail = 0, max_bytes = 0;
  if (!QueryInt(req, res, "rank", &rank) || !QueryInt(req, res, "attempt", &attempt) ||
      !QueryInt(req, res, "tail", &tail) || !QueryInt(req, res, "max_bytes", &max_bytes))
    return;
  o.tail_max_bytes = static_cast<size_t>(max_bytes);
  if (auto it = req.query.find("ranks"); it != req.query.end() && !it->second.empty()) {
    // "all", or a comma-separated list: interleaved, each line prefixed with its rank.
    o.prefix = true;
    if (it->second != "all") {
      Result<std::vector<int>> ranks = ParseRankList(it->second);
      if (!ranks.ok() || ranks->back() >= num_workers) {
        res->SendError(400, "query parameter ranks must be all or ranks 0.." +
                                std::to_string(num_workers - 1) + ", comma-separated");
        return;
      }
      o.ranks = std::move(*ranks);
    }
  } else {
    o.ranks = {rank};
  }
  o.follow = QueryFlag(req, "follow");
  if (auto it = req.query.find("since"); it != req.query.end() && !it->second.empty()) {
    if (it->second.size() > 15 || it->second.find_first_not_of("0123456789") != std::string::npos) {
      res->SendError(400, "query parameter since must be a time in ms since the epoch");
      return;
    }
    o.since_ms = std::stoll(it->second);
  }
  o.tail = tail;
  o.attempt = attempt;
  if (attempt > job->attempt || (job->attempt == 0 && !o.follow)) {
    res->SendError(404, job->attempt == 0 ? "job " + job->id + " has not started yet"
                                          : "job " + job->id + " has attempts 1.." +
                                                std::to_string(job->attempt));
    return;
  }
  // One rank asked for by number, of an attempt that ran: its log must be here.
  if (!o.prefix && !o.follow) {
    const int a = attempt > 0 ? attempt : job->attempt;
    // A rank that ran on another node is read from there (LogStream).
    bool remote = false;
    if (ctx.peers != nullptr)
      if (auto rec = ctx.store->GetAttempt(job->id, a))
        remote = PlaceRankLogs({rank}, rec->rank_nodes, rec->node_addresses, ctx.node_id)[0].remote;
    if (!remote && !PathExists(ctx.agent->LogPath(job->id, a, rank))) {
      res->SendError(
          404, "no log for rank " + std::to_string(rank) + " of attempt " + std::to_string(a));
      return;
    }
  }
  if (*ctx.open_log_streams >= ctx.max_log_streams) {
    res->SendError(503, "too many log streams open (" + std::to_string(ctx.max_log_streams) +
                            "); retry later");
    return;
  }
  auto stream = std::make_shared<LogStream>(ctx, res, job->id, num_workers, std::move(o));
  stream->Start();
}

// A new job with a finished or running job's definition and code (library or packed
// working_dir), as it was submitted.
void HandleResubmit(const ApiContext& ctx, const Request& req, const ResponderPtr& res) {
  auto job = ResolveJob(ctx, req, res);
  if (!job) return;
  json doc = ParseJsonBounded(job->definition);
  Result<JobSpec> spec = job->definition.empty() || doc.is_discarded()
                             ? Result<JobSpec>(Status::InvalidArgument("no definition"))
                             : JobDefinitionFromJson(doc);
  if (!spec.ok()) {
    res->SendError(409, "job " + job->id + " cannot be resubmitted: it was stored by an older " +
                            "release (" + spec.status().message() + "); submit its job.json");
    return;
  }
  JobManager::Submission sub;
  sub.library_sha256 = job->library_sha256;
  sub.library_path = job->library_path;
  if (!sub.library_sha256.empty()) {
    auto path = ctx.blobs->PathOf(sub.library_sha256);
    if (!path.ok()) {
      res->SendError(409, "job " + job->id + "'s code (blob " + sub.library_sha256 +
                              ") is no longer stored; submit its job.json");
      return;
    }
    sub.library_path = *path;
  }
  if (Status feasible = ctx.jobs->CheckFeasible(*spec); !feasible.ok()) {
    res->SendError(400, feasible.message(), {{"field", "scaling_config"}});
    return;
  }
  sub.spec = std::move(*spec);
  const std::string from = job->id;
  ctx.jobs->Submit(std::move(sub), [res, from](Result<std::string> id) {
    if (!id.ok()) {
      res->SendError(HttpStatusFor(id.status()), id.status().message());
      return;
    }
    res->SendJson(201, {{"job_id", *id}, {"state", kJobPending}, {"resubmitted_from", from}});
  });
}

// A page's cursor: "<submitted_at>.<id>" of its last job.
std::string EncodeCursor(const JobRecord& last) {
  return std::to_string(last.submitted_at) + "." + last.id;
}

std::optional<std::pair<int64_t, std::string>> DecodeCursor(const std::string& cursor) {
  const size_t dot = cursor.find('.');
  if (dot == std::string::npos || dot == 0 || dot > 18 || dot + 1 == cursor.size() ||
      cursor.size() - dot - 1 > 64)
    return std::nullopt;
  const std::string at = cursor.substr(0, dot), id = cursor.substr(dot + 1);
  if (at.find_first_not_of("0123456789") != std::string::npos ||
      id.find_first_not_of("0123456789abcdef") != std::string::npos)
    return std::nullopt;
  return std::make_pair(static_cast<int64_t>(std::stoll(at)), id);
}

// An elastic job's view with its current size, "current_workers", while an attempt runs
// (what the head knows; not replicated: it changes as the group shrinks and grows).
json WithGroupSize(const ApiContext& ctx, const JobRecord& job, json view) {
  if (!view.contains("min_workers") || job.state != kJobRunning) return view;
  if (auto n = ctx.jobs->GroupSize(job.id)) view["current_workers"] = *n;
  return view;
}

void HandleListJobs(const ApiContext& ctx, const Request& req, const ResponderPtr& res) {
  StateStore::JobQuery q;
  int limit = kDefaultJobPage;
  if (!QueryInt(req, res, "limit", &limit)) return;
  if (limit < 1 || limit > kMaxJobPage) {
    res->SendError(400, "query parameter limit must be 1.." + std::to_string(kMaxJobPage));
    return;
  }
  q.limit = static_cast<size_t>(limit);
  if (auto it = req.query.find("state"); it != req.query.end() && !it->second.empty()) {
    static const char* kStates[] = {kJobPending,   kJobStarting, kJobRunning,
                                    kJobSucceeded, kJobFailed,   kJobStopped};
    std::string state = it->second;
    for (char& c : state) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (std::find(std::begin(kStates), std::end(kStates), state) == std::end(kStates)) {
      res->SendError(400,
                     "query parameter state must be one of PENDING, STARTING, RUNNING, "
                     "SUCCEEDED, FAILED, STOPPED");
      return;
    }
    q.state = state;
  }
  if (auto it = req.query.find("name"); it != req.query.end()) q.name = it->second;
  if (auto it = req.query.find("cursor"); it != req.query.end() && !it->second.empty()) {
    q.before = DecodeCursor(it->second);
    if (!q.before) {
      res->SendError(400, "query parameter cursor: not a cursor this daemon gave out");
      return;
    }
  }
  StateStore::JobPage page = ctx.store->ListJobs(q);
  json jobs = json::array();
  for (const auto& j : page.jobs) jobs.push_back(WithGroupSize(ctx, j, JobSummaryJson(j)));
  res->SendJson(200, {{"jobs", jobs},
                      {"next_cursor", page.more ? json(EncodeCursor(page.jobs.back())) : json()}});
}

}  // namespace

void RegisterApiRoutes(http::Router& router, ApiContext ctx) {
  if (!ctx.open_log_streams) ctx.open_log_streams = std::make_shared<int>(0);
  http::RouteOptions open;
  open.access = http::Access::kAnyone;
  router.Add(
      "GET", "/healthz",
      [ctx](const Request&, ResponderPtr res) {
        json out = {{"status", "ok"},
                    {"node_id", ctx.node_id},
                    {"role", ctx.jobs->is_head() ? "head" : ctx.role_when_not_head},
                    {"version", ctx.version}};
        if (ctx.head_address) out["head"] = ctx.head_address();
        // Still 200: the daemon is alive and serves reads; "status" says what is wrong.
        if (ctx.disk_space) {
          DiskSpace disk = ctx.disk_space();
          out["disk_free_bytes"] = disk.free_bytes;
          if (disk.full) out["status"] = "disk_full";
        }
        res->SendJson(200, out);
      },
      open);
  // Every /v1 route may be forwarded to the head (multi-node) before it is served here.
  auto add = [&router, ctx](std::string method, std::string pattern, http::Handler handler,
                            http::RouteOptions options = {}) {
    if (!ctx.forward) {
      router.Add(std::move(method), std::move(pattern), std::move(handler), options);
      return;
    }
    router.Add(
        std::move(method), std::move(pattern),
        [ctx, handler](const Request& req, ResponderPtr res) {
          if (!ctx.forward(req, res, handler)) handler(req, res);
        },
        options);
  };

  http::RouteOptions upload;
  upload.max_body_bytes = ctx.max_upload_bytes;
  auto uploads_mu = std::make_shared<std::mutex>();
  add(
      "PUT", "/v1/blobs/{sha}",
      [ctx, uploads_mu](const Request& req, ResponderPtr res) {
        const std::string sha = req.params.at("sha");
        const size_t size = req.body.size();
        auto body = std::make_shared<const std::string>(std::move(req.body));
        PostThen(
            *ctx.blob_work, *ctx.io,
            [ctx, uploads_mu, sha, body] {
              // One upload at a time between its space check and its write: two checked
              // together could both pass and together eat the Raft log's reserve.
              std::lock_guard<std::mutex> l(*uploads_mu);
              Status st =
                  ctx.check_space ? ctx.check_space(body->size(), "the upload") : Status::Ok();
              return st.ok() ? ctx.blobs->Put(sha, *body) : st;
            },
            [sha, size, res](Status st) {
              if (!st.ok()) {
                res->SendError(HttpStatusFor(st), st.message());
                return;
              }
              res->SendJson(201, {{"sha256", sha}, {"size", size}});
            });
      },
      upload);
  add("HEAD", "/v1/blobs/{sha}", [ctx](const Request& req, ResponderPtr res) {
    res->Send(ctx.blobs->Has(req.params.at("sha")) ? 200 : 404, "application/json", "");
  });

  add("POST", "/v1/jobs",
      [ctx](const Request& req, ResponderPtr res) { HandleSubmit(ctx, req, res); });
  add("GET", "/v1/jobs",
      [ctx](const Request& req, ResponderPtr res) { HandleListJobs(ctx, req, res); });
  add("GET", "/v1/jobs/{job}", [ctx](const Request& req, ResponderPtr res) {
    auto job = ResolveJob(ctx, req, res);
    if (!job) return;
    json detail = WithGroupSize(ctx, *job, JobDetailJson(*job, *ctx.store));
    // What the head knows of the running ranks (not replicated: it changes every step).
    detail["progress"] = ctx.jobs->ProgressView(job->id);
    res->SendJson(200, detail);
  });
  add("POST", "/v1/jobs/{job}/stop", [ctx](const Request& req, ResponderPtr res) {
    auto job = ResolveJob(ctx, req, res);
    if (!job) return;
    const std::string id = job->id;
    ctx.jobs->Stop(id, "", [res, id](Result<std::string> state) {
      if (!state.ok()) {
        res->SendError(HttpStatusFor(state.status()), state.status().message());
        return;
      }
      res->SendJson(200, {{"job_id", id}, {"state", *state}});
    });
  });
  add("DELETE", "/v1/jobs/{job}", [ctx](const Request& req, ResponderPtr res) {
    auto job = ResolveJob(ctx, req, res);
    if (!job) return;
    const bool files = QueryFlag(req, "checkpoints");
    const std::string id = job->id;
    ctx.jobs->Delete(id, files, [res, id, files](Result<cmd::DeleteJobAnswer> r) {
      if (!r.ok()) {
        res->SendError(HttpStatusFor(r.status()), r.status().message());
        return;
      }
      res->SendJson(200, {{"job_id", id},
                          {"deleted", true},
                          {"trial_dir", r->trial_dir},
                          {"trial_dir_removed", files}});
    });
  });
  add("POST", "/v1/jobs/{job}/resubmit",
      [ctx](const Request& req, ResponderPtr res) { HandleResubmit(ctx, req, res); });
  RegisterMetricsRoute(router, ctx);
  if (ctx.tune != nullptr) {
    RegisterTuneRoutes(ctx, [&add](std::string method, std::string pattern, http::Handler h) {
      add(std::move(method), std::move(pattern), std::move(h));
    });
  }
  add("GET", "/v1/jobs/{job}/logs",
      [ctx](const Request& req, ResponderPtr res) { HandleLogs(ctx, req, res); });
  add("GET", "/v1/jobs/{job}/checkpoints", [ctx](const Request& req, ResponderPtr res) {
    auto job = ResolveJob(ctx, req, res);
    if (!job) return;
    auto cks = ctx.store->ListCheckpoints(job->id);
    json out = json::array();
    for (size_t i = 0; i < cks.size(); ++i)
      out.push_back(CheckpointJson(cks[i], i + 1 == cks.size()));
    res->SendJson(200, {{"job_id", job->id}, {"checkpoints", out}});
  });
  add("GET", "/v1/jobs/{job}/metrics", [ctx](const Request& req, ResponderPtr res) {
    auto job = ResolveJob(ctx, req, res);
    if (!job) return;
    // since=T: only reports at or after T (ms), for a poller that has the earlier ones.
    int64_t since = 0;
    if (auto it = req.query.find("since"); it != req.query.end() && !it->second.empty()) {
      if (it->second.size() > 15 ||
          it->second.find_first_not_of("0123456789") != std::string::npos) {
        res->SendError(400, "query parameter since must be a time in ms since the epoch");
        return;
      }
      since = std::stoll(it->second);
    }
    json history = json::array();
    for (const auto& m : ctx.store->ListMetrics(job->id, since)) {
      json metrics = ParseJsonBounded(m.metrics);
      history.push_back({{"attempt", m.attempt},
                         {"seq", m.seq},
                         {"time", m.time},
                         {"metrics", metrics.is_discarded() ? json::object() : metrics}});
    }
    json latest = ParseJsonBounded(job->metrics);
    json out = {{"job_id", job->id},
                {"latest", latest.is_discarded() ? json::object() : latest},
                {"history", history}};
    if (auto it = req.query.find("ranks"); it != req.query.end() && !it->second.empty()) {
      // Every rank's latest reports: the head's memory (rank 0's history above is the
      // replicated one).
      std::vector<int> ranks;
      if (it->second != "all") {
        Result<std::vector<int>> parsed = ParseRankList(it->second);
        if (!parsed.ok()) {
          res->SendError(400, "query parameter ranks must be all or ranks, comma-separated");
          return;
        }
        ranks = std::move(*parsed);
      }
      json per_rank = ctx.jobs->rank_metrics().History(job->id, ranks);
      if (since > 0 && per_rank.is_object()) {
        for (auto& [rank, list] : per_rank.items()) {
          json kept = json::array();
          for (auto& r : list)
            if (r.value("time", int64_t{0}) >= since) kept.push_back(std::move(r));
          list = std::move(kept);
        }
      }
      out["ranks"] = std::move(per_rank);
    }
    res->SendJson(200, out);
  });
  add("GET", "/v1/nodes", [ctx](const Request&, ResponderPtr res) {
    json gpus = json::array();
    for (const auto& g : ctx.node.gpus)
      gpus.push_back(
          {{"index", g.index}, {"name", g.name}, {"uuid", g.uuid}, {"memory", g.memory_bytes}});
    if (ctx.jobs->is_head()) {
      res->SendJson(200, {{"nodes", ctx.jobs->NodesView()}});
      return;
    }
    json node = {{"node_id", ctx.node_id},
                 {"address", ctx.api_address},
                 {"role", ctx.role_when_not_head},
                 {"state", "ALIVE"},
                 {"resources_total", ctx.node.AsResourceMap()},
                 {"resources_used", ctx.jobs->UsedResources()},
                 {"gpus", gpus},
                 {"last_heartbeat", commands::NowMs()}};
    res->SendJson(200, {{"nodes", json::array({node})}});
  });
}

}  // namespace traintl
