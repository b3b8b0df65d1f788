#include "proto/raft_commands.h"

#include <chrono>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "common/crypto.h"
#include "common/json_depth.h"
#include "proto/job_definition.h"
#include "proto/json_fields.h"

namespace traintl::cmd {
namespace {

using nlohmann::json;
using proto_internal::FieldError;
using proto_internal::Fields;

json Opt(const std::optional<int>& v) { return v ? json(*v) : json(nullptr); }

// ---- one codec per command: Put writes the body's fields, Take reads them ----

void Put(const SubmitJob& c, json& j) {
  j["job"] = {{"id", c.job_id},
              {"name", c.name},
              {"definition", c.definition},
              {"policy",
               {{"max_failures", c.policy.max_failures},
                {"num_to_keep", c.policy.num_to_keep},
                {"score_attribute", c.policy.score_attribute},
                {"score_max", c.policy.score_max}}},
              {"priority", c.priority},
              {"library_sha256", c.library_sha256},
              {"library_path", c.library_path},
              {"trial_dir", c.trial_dir},
              {"submitted_at", c.submitted_at}};
  // The spec only travels when there is no definition (an entry as older releases wrote
  // it): the definition says everything the spec did, at half the size of both.
  if (c.definition.is_null()) j["job"]["spec"] = c.spec;
  j["submission_id"] = c.submission_id;
  if (c.trial) {
    j["trial"] = {{"experiment_id", c.trial->experiment_id},
                  {"index", c.trial->index},
                  {"name", c.trial->name},
                  {"config", c.trial->config}};
  }
}
void Take(const json& j, SubmitJob* c) {
  Fields top(j, "");
  top.Opt("submission_id", &c->submission_id);
  if (auto t = j.find("trial"); t != j.end() && !t->is_null()) {
    Fields tf(*t, "trial.");
    TrialLink link;
    tf.Req("experiment_id", &link.experiment_id);
    tf.Req("index", &link.index);
    tf.Req("name", &link.name);
    link.config = tf.At("config");
    if (!link.config.is_object()) throw FieldError(tf.Name("config") + "must be an object");
    c->trial = std::move(link);
  }
  Fields f(top.At("job"), "job.");
  f.Req("id", &c->job_id);
  f.Req("name", &c->name);
  if (auto d = j.at("job").find("definition"); d != j.at("job").end() && !d->is_null()) {
    if (!d->is_object()) throw FieldError(f.Name("definition") + "must be an object");
    c->definition = *d;
    f.Opt("spec", &c->spec);
  } else {
    // Written before definitions existed: the one time the spec is validated again.
    c->spec = f.At("spec");
    if (auto from_spec = JobDefinitionFromSpec(c->spec); from_spec.ok())
      c->definition = std::move(*from_spec);
  }
  f.Req("priority", &c->priority);
  f.Req("library_sha256", &c->library_sha256);
  f.Req("library_path", &c->library_path);
  f.Req("trial_dir", &c->trial_dir);
  f.Req("submitted_at", &c->submitted_at);
  auto p = j.at("job").find("policy");
  if (p == j.at("job").end() || p->is_null()) {
    // Written before policies were stored typed: the spec says what they are.
    c->policy = PolicyFromSpecJson(c->spec);
    return;
  }
  Fields pf(*p, "job.policy.");
  pf.Req("max_failures", &c->policy.max_failures);
  pf.Req("num_to_keep", &c->policy.num_to_keep);
  pf.Req("score_attribute", &c->policy.score_attribute);
  pf.Req("score_max", &c->policy.score_max);
}

void Put(const SetPendingReason& c, json& j) {
  j["job_id"] = c.job_id;
  j["reason"] = c.reason;
}
void Take(const json& j, SetPendingReason* c) {
  Fields f(j, "");
  f.Req("job_id", &c->job_id);
  f.Req("reason", &c->reason);
}

void Put(const SetPendingReasons& c, json& j) { j["reasons"] = c.reasons; }
void Take(const json& j, SetPendingReasons* c) { Fields(j, "").Req("reasons", &c->reasons); }

void Put(const StartAttempt& c, json& j) {
  j["job_id"] = c.job_id;
  j["attempt"] = c.attempt;
  j["restored_from"] = c.restored_from;
  j["head_node"] = c.head_node;
  j["head_run"] = c.head_run;
  if (!c.rank_nodes.empty()) {
    j["rank_nodes"] = c.rank_nodes;
    j["node_addresses"] = c.node_addresses;
  }
}
void Take(const json& j, StartAttempt* c) {
  Fields f(j, "");
  f.Req("job_id", &c->job_id);
  f.Req("attempt", &c->attempt);
  f.Req("restored_from", &c->restored_from);
  f.Opt("head_node", &c->head_node);
  f.Opt("head_run", &c->head_run);
  f.Opt("rank_nodes", &c->rank_nodes);
  f.Opt("node_addresses", &c->node_addresses);
}

void Put(const JobRunning& c, json& j) {
  j["job_id"] = c.job_id;
  j["attempt"] = c.attempt;
}
void Take(const json& j, JobRunning* c) {
  Fields f(j, "");
  f.Req("job_id", &c->job_id);
  f.Req("attempt", &c->attempt);
}

void Put(const WorkerEvent& c, json& j) {
  j["job_id"] = c.job_id;
  j["attempt"] = c.attempt;
  j["rank"] = c.rank;
  j["event"] = c.event;
  j["detail"] = c.detail;
}
void Take(const json& j, WorkerEvent* c) {
  Fields f(j, "");
  f.Req("job_id", &c->job_id);
  f.Req("attempt", &c->attempt);
  f.Req("rank", &c->rank);
  f.Req("event", &c->event);
  f.Req("detail", &c->detail);
}

void Put(const Report& c, json& j) {
  j["job_id"] = c.job_id;
  j["attempt"] = c.attempt;
  j["seq"] = c.seq;
  j["metrics"] = c.metrics;
}
void Take(const json& j, Report* c) {
  Fields f(j, "");
  f.Req("job_id", &c->job_id);
  f.Req("attempt", &c->attempt);
  f.Req("seq", &c->seq);
  c->metrics = f.At("metrics");
}

void Put(const CommitCheckpoint& c, json& j) {
  j["job_id"] = c.job_id;
  j["attempt"] = c.attempt;
  j["seq"] = c.seq;
  j["path"] = c.path;
  j["metrics"] = c.metrics;
}
void Take(const json& j, CommitCheckpoint* c) {
  Fields f(j, "");
  f.Req("job_id", &c->job_id);
  f.Req("attempt", &c->attempt);
  f.Req("seq", &c->seq);
  f.Req("path", &c->path);
  c->metrics = f.At("metrics");
}

void Put(const EndAttempt& c, json& j) {
  j["job_id"] = c.job_id;
  j["attempt"] = c.attempt;
  j["state"] = c.outcome.state;
  j["failed_rank"] = Opt(c.outcome.failed_rank);
  j["exit_code"] = Opt(c.outcome.exit_code);
  j["signal"] = Opt(c.outcome.signal);
  j["reason"] = c.outcome.reason;
  j["log_tail"] = c.outcome.log_tail;
  j["retryable"] = c.outcome.retryable;
}
void Take(const json& j, EndAttempt* c) {
  Fields f(j, "");
  f.Req("job_id", &c->job_id);
  f.Req("attempt", &c->attempt);
  f.Req("state", &c->outcome.state);
  f.Opt("failed_rank", &c->outcome.failed_rank);
  f.Opt("exit_code", &c->outcome.exit_code);
  f.Opt("signal", &c->outcome.signal);
  f.Req("reason", &c->outcome.reason);
  f.Req("log_tail", &c->outcome.log_tail);
  f.Opt("retryable", &c->outcome.retryable);
}

void Put(const StopJob& c, json& j) {
  j["job_id"] = c.job_id;
  // Only when set: the command of a user's stop reads as it did before reasons existed.
  if (!c.reason.empty()) j["reason"] = c.reason;
}
void Take(const json& j, StopJob* c) {
  Fields f(j, "");
  f.Req("job_id", &c->job_id);
  f.Opt("reason", &c->reason);
}

void Put(const DeleteJob& c, json& j) { j["job_id"] = c.job_id; }
void Take(const json& j, DeleteJob* c) { Fields(j, "").Req("job_id", &c->job_id); }

void Put(const FailPendingJob& c, json& j) {
  j["job_id"] = c.job_id;
  j["reason"] = c.reason;
}
void Take(const json& j, FailPendingJob* c) {
  Fields f(j, "");
  f.Req("job_id", &c->job_id);
  f.Req("reason", &c->reason);
}

void Put(const SetVoterAddress& c, json& j) {
  j["raft_id"] = c.raft_id;
  j["api_address"] = c.api_address;
}
void Take(const json& j, SetVoterAddress* c) {
  Fields f(j, "");
  f.Req("raft_id", &c->raft_id);
  f.Req("api_address", &c->api_address);
}

void Put(const CreateExperiment& c, json& j) {
  j["experiment_id"] = c.experiment_id;
  j["name"] = c.name;
  j["spec"] = c.spec;
  j["seed"] = c.seed;
  j["exp_dir"] = c.exp_dir;
  j["library_sha256"] = c.library_sha256;
  j["library_path"] = c.library_path;
  j["submission_id"] = c.submission_id;
}
void Take(const json& j, CreateExperiment* c) {
  Fields f(j, "");
  f.Req("experiment_id", &c->experiment_id);
  f.Req("name", &c->name);
  c->spec = f.At("spec");
  if (!c->spec.is_object()) throw FieldError(f.Name("spec") + "must be an object");
  f.Req("seed", &c->seed);
  f.Req("exp_dir", &c->exp_dir);
  f.Req("library_sha256", &c->library_sha256);
  f.Req("library_path", &c->library_path);
  f.Opt("submission_id", &c->submission_id);
}

void Put(const UpdateExperiment& c, json& j) {
  j["experiment_id"] = c.experiment_id;
  if (!c.state.empty()) {
    j["state"] = c.state;
    j["message"] = c.message;
  }
  if (c.scheduler_state) j["scheduler_state"] = *c.scheduler_state;
  json trials = json::array();
  for (const auto& t : c.trials) {
    json u = {{"index", t.index}};
    if (t.status) u["status"] = *t.status;
    if (t.reason) u["reason"] = *t.reason;
    if (t.pending) u["pending"] = *t.pending;
    trials.push_back(std::move(u));
  }
  j["trials"] = std::move(trials);
}
void Take(const json& j, UpdateExperiment* c) {
  Fields f(j, "");
  f.Req("experiment_id", &c->experiment_id);
  f.Opt("state", &c->state);
  f.Opt("message", &c->message);
  f.Opt("scheduler_state", &c->scheduler_state);
  const json& trials = f.At("trials");
  if (!trials.is_array()) throw FieldError(f.Name("trials") + "must be an array");
  for (size_t i = 0; i < trials.size(); ++i) {
    Fields tf(trials[i], "trials[" + std::to_string(i) + "].");
    TrialUpdate u;
    tf.Req("index", &u.index);
    tf.Opt("status", &u.status);
    tf.Opt("reason", &u.reason);
    tf.Opt("pending", &u.pending);
    c->trials.push_back(std::move(u));
  }
}

void Put(const DeleteExperiment& c, json& j) { j["experiment_id"] = c.experiment_id; }
void Take(const json& j, DeleteExperiment* c) {
  Fields(j, "").Req("experiment_id", &c->experiment_id);
}

// op name -> decoder of that alternative, built from Command's alternatives so that a new
// command cannot be left out of the table.
using Decoder = Command (*)(const json&);

template <typename T>
Command DecodeAs(const json& j) {
  T body;
  Take(j, &body);
  return body;
}

template <size_t... I>
std::unordered_map<std::string_view, Decoder> MakeDecoders(std::index_sequence<I...>) {
  return {{std::variant_alternative_t<I, Command>::kOp,
           &DecodeAs<std::variant_alternative_t<I, Command>>}...};
}

const std::unordered_map<std::string_view, Decoder>& Decoders() {
  static const auto* table = new std::unordered_map<std::string_view, Decoder>(
      MakeDecoders(std::make_index_sequence<std::variant_size_v<Command>>()));
  return *table;
}

}  // namespace

JobPolicy PolicyFromSpecJson(const json& spec) {
  JobPolicy p;
  if (!spec.is_object()) return p;
  auto rc = spec.find("run_config");
  if (rc == spec.end() || !rc->is_object()) return p;
  auto section = [&](const char* name) -> const json* {
    auto s = rc->find(name);
    return s != rc->end() && s->is_object() ? &*s : nullptr;
  };
  if (const json* fc = section("failure_config")) {
    auto m = fc->find("max_failures");
    if (m != fc->end() && m->is_number_integer()) p.max_failures = m->get<int>();
  }
  if (const json* cc = section("checkpoint_config")) {
    auto n = cc->find("num_to_keep");
    if (n != cc->end() && n->is_number_integer()) p.num_to_keep = n->get<int>();
    auto a = cc->find("checkpoint_score_attribute");
    if (a != cc->end() && a->is_string()) p.score_attribute = a->get<std::string>();
    auto o = cc->find("checkpoint_score_order");
    p.score_max = o != cc->end() && o->is_string() && o->get<std::string>() == "max";
  }
  return p;
}

std::string_view OpOf(const Command& c) {
  return std::visit([](const auto& body) { return std::decay_t<decltype(body)>::kOp; }, c);
}

std::string Encode(Command c) { return Encode(Envelope{RandomHex(12), NowMs(), std::move(c)}); }

std::string Encode(const Envelope& e) {
  json j = {{"op", std::string(OpOf(e.body))}, {"rid", e.rid}, {"time", e.time}};
  std::visit([&](const auto& body) { Put(body, j); }, e.body);
  // Commands carry text that workers wrote (a log tail, an error): never let a stray byte
  // that slipped past its source's cleaning throw here, on the head's io thread.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<Envelope> Decode(std::string_view text) {
  json j = ParseJsonBounded(text);
  if (!j.is_object()) return Status::InvalidArgument("malformed command: not a JSON object");
  auto op = j.find("op");
  auto rid = j.find("rid");
  if (op == j.end() || !op->is_string() || rid == j.end() || !rid->is_string())
    return Status::InvalidArgument("malformed command: op and rid must be strings");
  const std::string name = op->get<std::string>();
  auto decoder = Decoders().find(name);
  if (decoder == Decoders().end()) return Status::InvalidArgument("unknown op " + name);
  try {
    Envelope e{rid->get<std::string>(), 0, decoder->second(j)};
    Fields(j, "").Req("time", &e.time);
    return e;
  } catch (const std::exception& ex) {
    return Status::InvalidArgument("malformed " + name + " command: " + ex.what());
  }
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace traintl::cmd
