// Fuzz target: decoding of Raft log entries (daemon/consensus/entry_codec.h) and their
// application by the FSM (daemon/state/fsm.h), the path every committed entry takes on
// every voter.
//
// Input: a sequence of log entries. When it starts with the entry magic ("TRC1") it is
// read as back-to-back framed entries, the way RaftNode stores them; otherwise each line
// is one command's JSON (easier for the fuzzer to grow stateful sequences: submit, start,
// report, ...). Every command is applied, in order, to two fresh state stores. Invariants:
//  - Apply never throws and always answers a JSON object with a boolean "ok";
//  - the two replicas answer identically and end with identical snapshots (determinism:
//    voters must never diverge);
//  - applying a command again (same rid) returns the stored result and changes nothing.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/logging.h"
#include "daemon/consensus/entry_codec.h"
#include "daemon/state/fsm.h"
#include "daemon/state/state_store.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

// Keeps a run short: the FSM's cost is per command, and long sequences add little.
constexpr size_t kMaxCommands = 64;

std::vector<std::string> SplitEntries(std::string_view in) {
  std::vector<std::string> out;
  namespace codec = traintl::raft_codec;
  if (in.size() >= 4 && codec::GetU32(in.data()) == codec::kCommandMagic) {
    size_t off = 0;
    while (off < in.size() && out.size() < kMaxCommands) {
      auto entry = codec::DecodeCommandEntry(in.data() + off, in.size() - off);
      if (!entry) break;
      out.emplace_back(entry->command);
      // Round trip: re-encoding gives back the same header and command bytes.
      std::string again(codec::CommandEntryBytes(entry->command.size()), '\0');
      codec::EncodeCommandEntry(entry->command, entry->tag, again.data());
      auto redecoded = codec::DecodeCommandEntry(again.data(), again.size());
      FUZZ_CHECK(redecoded && redecoded->command == entry->command && redecoded->tag == entry->tag);
      off += codec::CommandEntryBytes(entry->command.size());
    }
    return out;
  }
  size_t start = 0;
  while (start <= in.size() && out.size() < kMaxCommands) {
    size_t nl = in.find('\n', start);
    if (nl == std::string_view::npos) nl = in.size();
    out.emplace_back(in.substr(start, nl - start));
    start = nl + 1;
  }
  return out;
}

void CheckResult(const std::string& result) {
  nlohmann::json r = nlohmann::json::parse(result, nullptr, false);
  FUZZ_CHECK(r.is_object());
  FUZZ_CHECK(r.contains("ok") && r["ok"].is_boolean());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  traintl::SetLogLevel(traintl::LogLevel::kError);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  // Snapshot images are decoded by the same codec; only the framing is checked here (the
  // image is a SQLite database, which SQLite itself validates on restore).
  if (auto image = traintl::raft_codec::DecodeSnapshotImage(data, size)) {
    FUZZ_CHECK(image->size() <= size - traintl::raft_codec::kSnapshotHeaderBytes);
  }
  std::vector<std::string> commands = SplitEntries(in);
  traintl::StateStore store_a, store_b;
  traintl::Fsm fsm_a(&store_a), fsm_b(&store_b);
  for (const std::string& c : commands) {
    std::string ra = fsm_a.Apply(c);
    CheckResult(ra);
    std::string rb = fsm_b.Apply(c);
    FUZZ_CHECK(ra == rb);
    // A replayed rid (a proposer retrying after RAFT_LEADERSHIPLOST) returns the stored
    // result without applying again.
    nlohmann::json parsed = nlohmann::json::parse(c, nullptr, false);
    if (parsed.is_object() && parsed.contains("rid") && parsed["rid"].is_string() &&
        parsed.contains("op") && parsed["op"].is_string()) {
      FUZZ_CHECK(fsm_a.Apply(c) == ra);
    }
  }
  auto snap_a = store_a.Serialize();
  auto snap_b = store_b.Serialize();
  FUZZ_CHECK(snap_a.ok() && snap_b.ok());
  FUZZ_CHECK(*snap_a == *snap_b);
  FUZZ_CHECK(store_a.ListJobs().size() == store_b.ListJobs().size());
  nlohmann::json jobs_a = nlohmann::json::array(), jobs_b = nlohmann::json::array();
  for (const auto& j : store_a.ListJobs()) jobs_a.push_back({j.id, j.state, j.attempt, j.failures});
  for (const auto& j : store_b.ListJobs()) jobs_b.push_back({j.id, j.state, j.attempt, j.failures});
  FUZZ_CHECK(jobs_a == jobs_b);
  return 0;
}
