// The /v1/tune routes (docs/API.md "Tuning"): create, list, show, stop, resume and delete
// experiments. Handlers decode, delegate to the TuneController or read the store, and
// encode; the views of experiments and trials live here too (nothing else shows them).
#include <algorithm>
#include <cmath>
#include <optional>

#include "common/json_depth.h"
#include "common/logging.h"
#include "daemon/api/api_routes.h"
#include "daemon/head/tune_results.h"
#include "proto/job_spec.h"

namespace traintl {
namespace {

using http::Request;
using nlohmann::json;
using ResponderPtr = std::shared_ptr<http::Responder>;

json Parsed(const std::string& text) {
  json j = ParseJsonBounded(text);
  return j.is_discarded() ? json() : j;
}

struct TrialView {
  json view;
  std::optional<double> best;
};

bool Better(double a, double b, bool max) { return max ? a > b : a < b; }

// Ray's trial states: PENDING, RUNNING, PAUSED, TERMINATED, ERROR.
std::string TrialState(const TrialRecord& t, const std::optional<JobRecord>& job) {
  if (t.status == "ERROR") return "ERROR";
  if (t.status == "PAUSED") return "PAUSED";
  if (!job) return "TERMINATED";
  if (t.status == "DONE") return job->state == kJobFailed ? "ERROR" : "TERMINATED";
  if (!t.pending.empty()) return "PENDING";
  if (job->state == kJobPending || job->state == kJobStarting) return "PENDING";
  if (job->state == kJobRunning) return "RUNNING";
  return job->state == kJobFailed ? "ERROR" : "TERMINATED";
}

TrialView TrialJson(const ExperimentRecord& e, const TrialRecord& t, const StateStore& store,
                    const std::string& metric, bool max) {
  auto job = store.GetJob(t.job_id, /*with_spec=*/false);
  std::vector<json> results = TrialResults(store, t);
  TrialView out;
  json last_result = json::object();
  std::optional<double> last;
  for (const auto& r : results) {
    auto m = r.find(metric);
    if (m == r.end() || !m->is_number()) continue;
    const double v = m->get<double>();
    if (std::isnan(v)) continue;
    last = v;
    if (!out.best || Better(v, *out.best, max)) out.best = v;
  }
  if (!results.empty()) last_result = results.back();
  json restored = nullptr;
  if (job) {
    for (const auto& a : store.ListAttempts(job->id)) {
      if (!a.restored_from.empty()) {
        restored = a.restored_from;
        break;
      }
    }
  }
  out.view = {{"index", t.index},
              {"name", t.name},
              {"config", Parsed(t.config)},
              {"state", TrialState(t, job)},
              {"job_id", t.job_id},
              {"jobs", Parsed(t.jobs)},
              {"job_state", job ? json(job->state) : json()},
              {"iterations", static_cast<int64_t>(results.size())},
              {"last", last ? json(*last) : json()},
              {"best", out.best ? json(*out.best) : json()},
              {"last_result", last_result},
              {"reason", t.reason.empty() && job ? json(job->message) : json(t.reason)},
              {"restored_from", restored},
              {"trial_dir", e.exp_dir + "/" + t.name}};
  return out;
}

// The trial's checkpoint with the best metric (the latest when none recorded the metric).
json BestCheckpoint(const TrialRecord& t, const StateStore& store, const std::string& metric,
                    bool max) {
  json jobs = Parsed(t.jobs);
  std::optional<CheckpointRecord> best, latest;
  std::optional<double> best_v;
  if (!jobs.is_array()) return nullptr;
  for (const auto& id : jobs) {
    if (!id.is_string()) continue;
    for (const auto& ck : store.ListCheckpoints(id.get<std::string>())) {
      latest = ck;
      json m = Parsed(ck.metrics);
      auto v = m.is_object() ? m.find(metric) : m.end();
      if (m.is_object() && v != m.end() && v->is_number()) {
        const double d = v->get<double>();
        if (!best_v || Better(d, *best_v, max)) {
          best_v = d;
          best = ck;
        }
      }
    }
  }
  if (!best) best = latest;
  if (!best) return nullptr;
  return {{"path", best->path}, {"job_id", best->job_id}, {"metrics", Parsed(best->metrics)}};
}

json ExperimentJson(const ExperimentRecord& e, const StateStore& store, bool detail) {
  json spec = Parsed(e.spec);
  json tc = spec.is_object() ? spec.value("tune_config", json::object()) : json::object();
  const std::string metric = tc.value("metric", "");
  const bool max = tc.value("mode", "min") == "max";
  json out = {{"experiment_id", e.id},
              {"name", e.name},
              {"state", e.state},
              {"message", e.message},
              {"created_at", e.created_at},
              {"ended_at", e.ended_at ? json(*e.ended_at) : json()},
              {"exp_dir", e.exp_dir},
              {"metric", metric},
              {"mode", max ? "max" : "min"},
              {"num_trials", e.trials_created}};
  std::vector<TrialRecord> trials = store.ListTrials(e.id);
  std::vector<TrialView> views;
  for (const auto& t : trials) views.push_back(TrialJson(e, t, store, metric, max));
  json counts = json::object();
  for (const auto& v : views) {
    const std::string s = v.view["state"].get<std::string>();
    counts[s] = counts.value(s, 0) + 1;
  }
  out["trials_by_state"] = counts;
  // Sorted by the metric (best first); trials without one after them, by index.
  std::vector<size_t> order(views.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto& x = views[a].best;
    const auto& y = views[b].best;
    if (x && y) return Better(*x, *y, max);
    return x.has_value() && !y.has_value();
  });
  json best = nullptr;
  if (!order.empty() && views[order[0]].best) {
    const size_t i = order[0];
    best = {{"name", views[i].view["name"]},
            {"index", views[i].view["index"]},
            {"config", views[i].view["config"]},
            {"metric", *views[i].best},
            {"checkpoint", BestCheckpoint(trials[i], store, metric, max)},
            {"trial_dir", views[i].view["trial_dir"]}};
  }
  out["best_trial"] = best;
  if (!detail) return out;
  out["seed"] = e.seed;
  out["spec"] = spec;
  json list = json::array();
  for (size_t i : order) list.push_back(std::move(views[i].view));
  out["trials"] = std::move(list);
  return out;
}

// Resolves {exp} (id, prefix or name) or answers 404 / 409.
std::optional<ExperimentRecord> ResolveExperiment(const ApiContext& ctx, const Request& req,
                                                  const ResponderPtr& res) {
  auto id = ctx.store->ResolveExperimentId(req.params.at("exp"));
  if (!id.ok()) {
    res->SendError(HttpStatusFor(id.status()), id.status().message());
    return std::nullopt;
  }
  auto e = ctx.store->GetExperiment(*id);
  if (!e) res->SendError(404, "no experiment " + *id);
  return e;
}

void HandleCreate(const ApiContext& ctx, const Request& req, const ResponderPtr& res) {
  SpecError syntax;
  auto parsed = ParseJsonStrict(req.body, kMaxSpecDepth + 4, kMaxSpecTextBytes, &syntax);
  if (!parsed.ok()) {
    res->SendError(400, "request body: " + syntax.ToString());
    return;
  }
  json body = std::move(*parsed);
  if (!body.is_object() || !body.contains("spec")) {
    res->SendError(400, "request body must be a JSON object {\"spec\": {...}}",
                   {{"field", "spec"}});
    return;
  }
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (it.key() != "spec" && it.key() != "library_sha256" && it.key() != "working_dir_sha256" &&
        it.key() != "submission_id") {
      res->SendError(400, "unknown field " + it.key(), {{"field", it.key()}});
      return;
    }
  }
  auto spec = tune::ParseTuneSpec(body["spec"]);
  if (!spec.ok()) {
    const std::string& m = spec.status().message();
    res->SendError(400, m, {{"field", m.substr(0, m.find(':'))}});
    return;
  }
  // The trainer as it stands (before any param_space value): its code and its own checks.
  SpecError err;
  auto trainer = ParseJobSpec(spec->trainer, &err);
  if (!trainer.ok()) {
    res->SendError(400, "trainer." + err.ToString(), {{"field", "trainer." + err.field}});
    return;
  }
  TuneController::Creation c;
  if (!ResolveJobCode(ctx, body, *trainer, res, &c.library_sha256, &c.library_path)) return;
  if (!ReadSubmissionId(body, res, &c.submission_id)) return;
  c.name = trainer->name;
  c.spec = std::move(*spec);
  const std::string remote = req.remote;
  ctx.tune->Create(std::move(c), [ctx, res, remote](Result<std::string> id) {
    if (!id.ok()) {
      if (id.status().code() == Status::Code::kInvalidArgument)
        LOG_WARN << "refused a tune spec from " << remote << ": " << id.status().message();
      res->SendError(HttpStatusFor(id.status()), id.status().message());
      return;
    }
    auto e = ctx.store->GetExperiment(*id);
    res->SendJson(201, e ? ExperimentJson(*e, *ctx.store, false)
                         : json{{"experiment_id", *id}, {"state", kExperimentRunning}});
  });
}

}  // namespace

void RegisterTuneRoutes(const ApiContext& ctx, const AddRoute& add) {
  add("POST", "/v1/tune",
      [ctx](const Request& req, ResponderPtr res) { HandleCreate(ctx, req, res); });
  add("GET", "/v1/tune", [ctx](const Request&, ResponderPtr res) {
    json list = json::array();
    for (const auto& e : ctx.store->ListExperiments(false, 1000))
      list.push_back(ExperimentJson(e, *ctx.store, false));
    res->SendJson(200, {{"experiments", list}});
  });
  add("GET", "/v1/tune/{exp}", [ctx](const Request& req, ResponderPtr res) {
    if (auto e = ResolveExperiment(ctx, req, res))
      res->SendJson(200, ExperimentJson(*e, *ctx.store, true));
  });
  add("DELETE", "/v1/tune/{exp}", [ctx](const Request& req, ResponderPtr res) {
    auto e = ResolveExperiment(ctx, req, res);
    if (!e) return;
    const bool files = QueryFlag(req, "checkpoints");
    const std::string id = e->id;
    ctx.tune->Delete(id, files, [res, id, files](Result<cmd::DeleteExperimentAnswer> r) {
      if (!r.ok()) {
        res->SendError(HttpStatusFor(r.status()), r.status().message());
        return;
      }
      res->SendJson(200, {{"experiment_id", id},
                          {"deleted", true},
                          {"job_ids", r->job_ids},
                          {"exp_dir", r->exp_dir},
                          {"exp_dir_removed", files && !r->exp_dir.empty()}});
    });
  });
  for (const char* verb : {"stop", "resume"}) {
    const bool stop = std::string(verb) == "stop";
    add("POST", std::string("/v1/tune/{exp}/") + verb,
        [ctx, stop](const Request& req, ResponderPtr res) {
          auto e = ResolveExperiment(ctx, req, res);
          if (!e) return;
          const std::string id = e->id;
          auto done = [ctx, res, id](Status st) {
            if (!st.ok()) {
              res->SendError(HttpStatusFor(st), st.message());
              return;
            }
            auto now = ctx.store->GetExperiment(id);
            res->SendJson(
                200, now ? ExperimentJson(*now, *ctx.store, false) : json{{"experiment_id", id}});
          };
          if (stop) {
            ctx.tune->Stop(id, done);
          } else {
            ctx.tune->Resume(id, done);
          }
        });
  }
}

}  // namespace traintl
