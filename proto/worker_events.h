// The messages of the agent <-> worker channel (fd 3; docs/WORKER_PROTOCOL.md is the
// contract, field names there are the names here): what traintl-worker sends its node
// agent (`WorkerEvent`: hello, report, done) and what the agent sends back
// (`AgentMessage`: ack, stop, regroup), as C++ structs with one codec for both ends. The worker
// writes through Encode and reads through DecodeAgentMessage (worker/agent_channel.cc);
// the agent writes through Encode and reads through DecodeWorkerEvent
// (daemon/node/worker_pool.cc).
//
// The wire format: one JSON object per line, keys in sorted order (nlohmann's dump), a
// "type" naming the message. Encode never fails; invalid UTF-8 in a string (user metrics,
// an exception's message) is replaced, never thrown. A worker runs user code, so Decode
// treats every byte as untrusted and never throws: a line longer than the limit, text
// nested deeper than kMaxJsonDepth, not an object, no string "type", or a field the
// message cannot do without (hello's rank and pid, report's and ack's seq in [0, INT_MAX])
// missing or of the wrong type is InvalidArgument naming the message type and the field
// ("malformed report event: seq: out of range (-1)"). A type this release does not know
// (a newer peer's) is NotFound: both ends ignore it. Optional fields of the wrong type are
// taken as absent, as they always were: one ill-typed field does not cost a report.
//
// Thread-safety: plain values and free functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace traintl::events {

// The longest line (newline included) the agent reads from a worker by default
// (WorkerPoolOptions::max_message_bytes): 4 MiB.
inline constexpr size_t kMaxEventBytes = 4 << 20;

// The most one report's metrics may take as compact JSON (nlohmann's dump): 64 KiB. Each
// report goes through Raft into the head's store, and the head keeps the latest reports
// of every rank in memory, so a metric belongs here and a large value in a checkpoint
// file. The worker refuses a bigger report() with this limit named; the agent fails a rank
// whose report carries more (a worker that bypassed its host).
inline constexpr size_t kMaxReportMetricsBytes = 64 << 10;

// ---- worker -> agent ----

// Sent once the library is loaded and the entry point found, just before it is called.
struct Hello {
  static constexpr std::string_view kType = "hello";
  int rank = 0;     // the world rank
  int64_t pid = 0;  // the worker's process id
  bool operator==(const Hello& o) const { return rank == o.rank && pid == o.pid; }
};

// The seq-th (0-based) report() call of this attempt; the worker then waits for Ack{seq}.
struct Report {
  static constexpr std::string_view kType = "report";
  int seq = 0;                                        // in [0, INT_MAX]
  nlohmann::json metrics = nlohmann::json::object();  // always an object
  std::string checkpoint;  // the staged checkpoint directory; "" = none (null on the wire)
  // The worker waits for this report's ack, which the head gives (hold_reports in the
  // rank context): the agent must not ack it on the head's behalf. Only when true on the
  // wire.
  bool held = false;
  bool operator==(const Report& o) const {
    return seq == o.seq && metrics == o.metrics && checkpoint == o.checkpoint && held == o.held;
  }
};

// The entry point returned (ok) or failed. On the wire a successful done carries only
// "ok" (unless its other fields differ from their defaults); a failed one also "error"
// and "retryable".
struct Done {
  static constexpr std::string_view kType = "done";
  Done() = default;
  Done(bool ok, std::string error, bool retryable,
       std::optional<int> command_exit_code = std::nullopt,
       std::optional<int> command_signal = std::nullopt)
      : ok(ok),
        error(std::move(error)),
        retryable(retryable),
        command_exit_code(command_exit_code),
        command_signal(command_signal) {}
  bool ok = false;
  std::string error;      // the failure's message; "" when ok
  bool retryable = true;  // false: retrying cannot help (e.g. the library cannot load)
  // A command entry point's own end, which the attempt records in place of the worker's
  // exit code 1: its exit code (1..255) or the signal that killed it. Unset otherwise.
  std::optional<int> command_exit_code;
  std::optional<int> command_signal;
  bool operator==(const Done& o) const {
    return ok == o.ok && error == o.error && retryable == o.retryable &&
           command_exit_code == o.command_exit_code && command_signal == o.command_signal;
  }
};

// The rank's training progress (traintl_host_api.progress), sent at most every 250 ms
// while it changes: what the head names stragglers and stalled collectives from. Every
// field is optional; a negative or ill-typed one counts as absent (0).
struct Progress {
  static constexpr std::string_view kType = "progress";
  int64_t steps = 0;           // training steps completed
  double step_s = 0;           // the latest step's wall time
  double busy_s = 0;           // ... of which not spent waiting for peers
  int64_t collective_seq = 0;  // collectives entered so far
  bool in_collective = false;  // waiting in collective `collective_seq` now
  double waiting_s = 0;        // for this long, when sent
  bool operator==(const Progress& o) const {
    return steps == o.steps && step_s == o.step_s && busy_s == o.busy_s &&
           collective_seq == o.collective_seq && in_collective == o.in_collective &&
           waiting_s == o.waiting_s;
  }
};

using WorkerEvent = std::variant<Hello, Report, Done, Progress>;

// Progress's fields as a JSON object (how an agent forwards it to the head), and back
// (leniently, as from a worker).
nlohmann::json ProgressJson(const Progress& p);
Progress ProgressFromJson(const nlohmann::json& j);

// ---- agent -> worker ----

// Report `seq` was accepted; the worker's report() returns.
struct Ack {
  static constexpr std::string_view kType = "ack";
  int seq = 0;  // in [0, INT_MAX]
  bool operator==(const Ack& o) const { return seq == o.seq; }
};

// should_stop() returns true from now on.
struct Stop {
  static constexpr std::string_view kType = "stop";
  bool operator==(const Stop&) const { return true; }
};

// A rank of the attempt died and the head is replacing it (peer recovery: the job's
// failure_config.peer_recovery): the survivors rebuild their collective group as
// generation `generation` together with the replacement and carry on from the most advanced
// survivor's state (traintl_host_api.regroup_wait).
// An elastic job's regroup also names the group: `ranks`, the job's ranks that go on, in
// group order (a rank's place in it is its rank in the group, whose size is its length),
// and the store the group meets at (`store_addr`, `store_port`: served by the process of
// ranks[0]). Absent: every rank, at the attempt's master_addr:master_port.
struct Regroup {
  static constexpr std::string_view kType = "regroup";
  int generation = 0;  // in [1, INT_MAX]; later announcements have larger ones
  std::vector<int> ranks;
  std::string store_addr;
  int store_port = 0;
  bool operator==(const Regroup& o) const {
    return generation == o.generation && ranks == o.ranks && store_addr == o.store_addr &&
           store_port == o.store_port;
  }
};

using AgentMessage = std::variant<Ack, Stop, Regroup>;

// The "type" of a message (its struct's kType).
std::string_view TypeOf(const WorkerEvent& e);
std::string_view TypeOf(const AgentMessage& m);

// One line of the channel, newline included.
// The bytes of `metrics` as compact JSON, as Encode writes them (what
// kMaxReportMetricsBytes bounds).
size_t ReportMetricsBytes(const nlohmann::json& metrics);

std::string Encode(const WorkerEvent& e);
std::string Encode(const AgentMessage& m);

// Decodes one line (with or without its newline); see the file comment for the errors.
// `max_bytes` bounds the line, newline included.
Result<WorkerEvent> DecodeWorkerEvent(std::string_view line, size_t max_bytes = kMaxEventBytes);
Result<AgentMessage> DecodeAgentMessage(std::string_view line, size_t max_bytes = kMaxEventBytes);

}  // namespace traintl::events
