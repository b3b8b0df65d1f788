// Fuzz target: the agent's decoding of what a worker sends on its channel
// (events::DecodeWorkerEvent in proto/worker_events.h). The worker runs user code, so every
// byte is untrusted; a throw here would escape into the daemon's io_context.
// Input: the bytes a worker writes; split into lines as WorkerPool does. Invariants: a
// report's seq is in [0, INT_MAX] and its metrics an object; the decoded event re-encoded
// (as the worker sends it) is one line and decodes to the same event.
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "proto/worker_events.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace events = traintl::events;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t start = 0;
  while (start < in.size()) {
    size_t nl = in.find('\n', start);
    if (nl == std::string_view::npos) break;  // an unterminated line is never handled
    std::string_view line = in.substr(start, nl - start);
    start = nl + 1;
    auto event = events::DecodeWorkerEvent(line);
    if (!event.ok()) continue;
    if (const auto* report = std::get_if<events::Report>(&*event)) {
      FUZZ_CHECK(report->seq >= 0 && report->seq <= INT_MAX);
      FUZZ_CHECK(report->metrics.is_object());
    }
    const std::string again = events::Encode(*event);
    FUZZ_CHECK(again.find('\n') == again.size() - 1);
    auto event2 = events::DecodeWorkerEvent(again);
    FUZZ_CHECK(event2.ok());
    FUZZ_CHECK(*event2 == *event);
  }
  return 0;
}
