#include "proto/worker_events.h"

#include <limits>
#include <optional>
#include <utility>

#include "common/json_depth.h"

namespace traintl::events {
namespace {

using nlohmann::json;

// The first problem of a message: the field and what is wrong with it.
struct FieldProblem {
  std::string field;
  std::string what;
};

// Reads one message's fields. Required fields record the first problem; optional ones of
// the wrong type keep their defaults.
class Reader {
 public:
  explicit Reader(const json& j) : j_(j) {}

  const std::optional<FieldProblem>& problem() const { return problem_; }

  // An integer in [0, INT_MAX]; unsigned and signed JSON integers both count, anything
  // outside an int is refused rather than truncated into another number.
  template <typename T>
  void ReqNonNegativeInt(const char* key, T* out) {
    const json* v = Find(key);
    if (v == nullptr) return Fail(key, "missing");
    if (!v->is_number_integer())
      return Fail(key, std::string("wrong type (") + v->type_name() + ")");
    constexpr int64_t kMax = std::numeric_limits<int>::max();
    const bool in_range = v->is_number_unsigned()
                              ? v->get<uint64_t>() <= static_cast<uint64_t>(kMax)
                              : v->get<int64_t>() >= 0 && v->get<int64_t>() <= kMax;
    if (!in_range) return Fail(key, "out of range (" + v->dump() + ")");
    *out = static_cast<T>(v->get<int64_t>());
  }
  void OptBool(const char* key, bool* out) const {
    const json* v = Find(key);
    if (v != nullptr && v->is_boolean()) *out = v->get<bool>();
  }
  void OptString(const char* key, std::string* out) const {
    const json* v = Find(key);
    if (v != nullptr && v->is_string()) *out = v->get<std::string>();
  }
  void OptNonNegative(const char* key, double* out) const {
    const json* v = Find(key);
    if (v != nullptr && v->is_number() && !v->is_boolean() && v->get<double>() >= 0)
      *out = v->get<double>();
  }
  void OptNonNegative(const char* key, int64_t* out) const {
    const json* v = Find(key);
    if (v != nullptr && v->is_number_integer() && v->get<int64_t>() >= 0) *out = v->get<int64_t>();
  }
  // An integer in [lo, hi]; anything else counts as absent.
  void OptIntIn(const char* key, int lo, int hi, std::optional<int>* out) const {
    const json* v = Find(key);
    if (v != nullptr && v->is_number_integer() && v->get<int64_t>() >= lo &&
        v->get<int64_t>() <= hi)
      *out = static_cast<int>(v->get<int64_t>());
  }
  // An array of integers in [0, INT_MAX]; anything else counts as absent.
  void OptIntArray(const char* key, std::vector<int>* out) const {
    const json* v = Find(key);
    if (v == nullptr || !v->is_array()) return;
    std::vector<int> values;
    for (const json& x : *v) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 ||
          x.get<int64_t>() > std::numeric_limits<int>::max())
        return;
      values.push_back(x.get<int>());
    }
    *out = std::move(values);
  }
  void OptObject(const char* key, json* out) const {
    const json* v = Find(key);
    if (v != nullptr && v->is_object()) *out = *v;
  }

 private:
  const json* Find(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  void Fail(const char* key, std::string what) {
    if (!problem_) problem_ = FieldProblem{key, std::move(what)};
  }

  const json& j_;
  std::optional<FieldProblem> problem_;
};

// ---- one codec per message: Put writes its fields, Take reads them ----

void Put(const Hello& m, json& j) {
  j["rank"] = m.rank;
  j["pid"] = m.pid;
}
void Take(Reader& r, Hello* m) {
  r.ReqNonNegativeInt("rank", &m->rank);
  r.ReqNonNegativeInt("pid", &m->pid);
}

void Put(const Report& m, json& j) {
  j["seq"] = m.seq;
  j["metrics"] = m.metrics;
  j["checkpoint"] = m.checkpoint.empty() ? json(nullptr) : json(m.checkpoint);
  if (m.held) j["held"] = true;
}
void Take(Reader& r, Report* m) {
  r.ReqNonNegativeInt("seq", &m->seq);
  r.OptObject("metrics", &m->metrics);
  r.OptString("checkpoint", &m->checkpoint);
  r.OptBool("held", &m->held);
}

void Put(const Done& m, json& j) {
  j["ok"] = m.ok;
  if (m.ok && m.error.empty() && m.retryable) return;  // what a success sends
  j["error"] = m.error;
  j["retryable"] = m.retryable;
  if (m.command_exit_code) j["command_exit_code"] = *m.command_exit_code;
  if (m.command_signal) j["command_signal"] = *m.command_signal;
}
void Take(Reader& r, Done* m) {
  r.OptBool("ok", &m->ok);
  r.OptString("error", &m->error);
  r.OptBool("retryable", &m->retryable);
  r.OptIntIn("command_exit_code", 1, 255, &m->command_exit_code);
  r.OptIntIn("command_signal", 1, 127, &m->command_signal);
}

void Put(const Progress& m, json& j) {
  j["steps"] = m.steps;
  j["step_s"] = m.step_s;
  j["busy_s"] = m.busy_s;
  j["collective_seq"] = m.collective_seq;
  j["in_collective"] = m.in_collective;
  j["waiting_s"] = m.waiting_s;
}
void Take(Reader& r, Progress* m) {
  r.OptNonNegative("steps", &m->steps);
  r.OptNonNegative("step_s", &m->step_s);
  r.OptNonNegative("busy_s", &m->busy_s);
  r.OptNonNegative("collective_seq", &m->collective_seq);
  r.OptBool("in_collective", &m->in_collective);
  r.OptNonNegative("waiting_s", &m->waiting_s);
}

void Put(const Ack& m, json& j) { j["seq"] = m.seq; }
void Take(Reader& r, Ack* m) { r.ReqNonNegativeInt("seq", &m->seq); }

void Put(const Stop&, json&) {}
void Take(Reader&, Stop*) {}

void Put(const Regroup& m, json& j) {
  j["generation"] = m.generation;
  if (!m.ranks.empty()) {
    j["ranks"] = m.ranks;
    j["store_addr"] = m.store_addr;
    j["store_port"] = m.store_port;
  }
}
void Take(Reader& r, Regroup* m) {
  r.ReqNonNegativeInt("generation", &m->generation);
  r.OptIntArray("ranks", &m->ranks);
  r.OptString("store_addr", &m->store_addr);
  int64_t port = 0;
  r.OptNonNegative("store_port", &port);
  m->store_port = port <= 65535 ? static_cast<int>(port) : 0;
}

template <typename Variant>
std::string_view TypeName(const Variant& v) {
  return std::visit([](const auto& m) { return std::decay_t<decltype(m)>::kType; }, v);
}

template <typename Variant>
std::string EncodeLine(const Variant& v) {
  json j = {{"type", std::string(TypeName(v))}};
  std::visit([&](const auto& m) { Put(m, j); }, v);
  std::string line = j.dump(-1, ' ', false, json::error_handler_t::replace);
  line.push_back('\n');
  return line;
}

// The alternative of `Variant` whose kType is `type`, read from `j`.
template <typename Variant, size_t I = 0>
Result<Variant> TakeAs(std::string_view type, const json& j, std::string_view what) {
  if constexpr (I == std::variant_size_v<Variant>) {
    return Status::NotFound("unknown " + std::string(what) + " type \"" + std::string(type) + "\"");
  } else {
    using T = std::variant_alternative_t<I, Variant>;
    if (type != T::kType) return TakeAs<Variant, I + 1>(type, j, what);
    T m;
    Reader r(j);
    Take(r, &m);
    if (r.problem()) {
      // "report event", "ack message": the type and the last word of `what`.
      const std::string noun(what.substr(what.rfind(' ') + 1));
      return Status::InvalidArgument("malformed " + std::string(type) + " " + noun + ": " +
                                     r.problem()->field + ": " + r.problem()->what);
    }
    return Variant(std::move(m));
  }
}

// `what`: "worker event" or "agent message", for the errors.
template <typename Variant>
Result<Variant> DecodeLine(std::string_view line, size_t max_bytes, std::string_view what) {
  const std::string prefix = "malformed " + std::string(what) + ": ";
  const size_t with_newline = line.size() + (!line.empty() && line.back() == '\n' ? 0 : 1);
  if (with_newline > max_bytes) {
    return Status::InvalidArgument(prefix + "a line of " + std::to_string(with_newline) +
                                   " bytes, over the limit of " + std::to_string(max_bytes));
  }
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  json j = ParseJsonBounded(line);
  if (j.is_discarded()) {
    return Status::InvalidArgument(prefix + "not JSON, or nested deeper than " +
                                   std::to_string(kMaxJsonDepth) + " levels");
  }
  if (!j.is_object()) return Status::InvalidArgument(prefix + "not a JSON object");
  auto type = j.find("type");
  if (type == j.end()) return Status::InvalidArgument(prefix + "type: missing");
  if (!type->is_string()) {
    return Status::InvalidArgument(prefix + "type: wrong type (" + type->type_name() + ")");
  }
  return TakeAs<Variant>(type->get<std::string>(), j, what);
}

}  // namespace

json ProgressJson(const Progress& p) {
  json j = json::object();
  Put(p, j);
  return j;
}

Progress ProgressFromJson(const json& j) {
  Progress p;
  if (!j.is_object()) return p;
  Reader r(j);
  Take(r, &p);
  return p;
}

std::string_view TypeOf(const WorkerEvent& e) { return TypeName(e); }
std::string_view TypeOf(const AgentMessage& m) { return TypeName(m); }

size_t ReportMetricsBytes(const nlohmann::json& metrics) {
  return metrics.dump(-1, ' ', false, json::error_handler_t::replace).size();
}

std::string Encode(const WorkerEvent& e) { return EncodeLine(e); }
std::string Encode(const AgentMessage& m) { return EncodeLine(m); }

Result<WorkerEvent> DecodeWorkerEvent(std::string_view line, size_t max_bytes) {
  return DecodeLine<WorkerEvent>(line, max_bytes, "worker event");
}

Result<AgentMessage> DecodeAgentMessage(std::string_view line, size_t max_bytes) {
  return DecodeLine<AgentMessage>(line, max_bytes, "agent message");
}

}  // namespace traintl::events
