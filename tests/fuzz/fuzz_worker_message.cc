// Fuzz target: the agent's decoding of what a worker sends on its channel
// (ParseWorkerMessage in daemon/node/worker_pool.h). The worker runs user code, so every
// byte is untrusted; a throw here would escape into the daemon's io_context.
// Input: the bytes a worker writes; split into lines as WorkerPool does. Invariants: a
// report's seq is in [0, INT_MAX] and its metrics an object; the decoded message
// re-encoded as the worker would send it decodes to the same thing.
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "daemon/node/worker_pool.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

nlohmann::json Encode(const traintl::WorkerMessage& m) {
  using Type = traintl::WorkerMessage::Type;
  switch (m.type) {
    case Type::kHello:
      return {{"type", "hello"}};
    case Type::kReport: {
      nlohmann::json j = {{"type", "report"}, {"seq", m.seq}, {"metrics", m.metrics}};
      j["checkpoint"] =
          m.checkpoint.empty() ? nlohmann::json(nullptr) : nlohmann::json(m.checkpoint);
      return j;
    }
    case Type::kDone:
      return {{"type", "done"}, {"ok", m.ok}, {"error", m.error}, {"retryable", m.retryable}};
    case Type::kUnknown:
      return {{"type", m.type_name}};
  }
  return nullptr;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t start = 0;
  while (start < in.size()) {
    size_t nl = in.find('\n', start);
    if (nl == std::string_view::npos) break;  // an unterminated line is never handled
    std::string_view line = in.substr(start, nl - start);
    start = nl + 1;
    auto m = traintl::ParseWorkerMessage(line);
    if (!m) continue;
    if (m->type == traintl::WorkerMessage::Type::kReport) {
      FUZZ_CHECK(m->seq >= 0 && m->seq <= INT_MAX);
      FUZZ_CHECK(m->metrics.is_object());
    }
    std::string again = Encode(*m).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    auto m2 = traintl::ParseWorkerMessage(again);
    FUZZ_CHECK(m2.has_value());
    FUZZ_CHECK(m2->type == m->type);
    FUZZ_CHECK(m2->seq == m->seq && m2->ok == m->ok && m2->retryable == m->retryable);
    FUZZ_CHECK(m2->type_name == m->type_name && m2->checkpoint == m->checkpoint);
  }
  return 0;
}
