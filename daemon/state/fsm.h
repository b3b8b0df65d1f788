// Fsm: the one place that changes cluster state. It applies committed Raft commands
// (proto/raft_commands.h, contract in proto/WIRE.md) to the StateStore, deterministically:
// everything it writes comes from the command (ids, times), never from the clock or randomness, so
// every voter ends with the same database.
//
// Apply never fails: a bad or stale command yields {"ok":false,"error":...} as its result.
// Every command carries a request id ("rid"); a rid seen before returns the stored result
// without applying again (a proposer that saw RAFT_LEADERSHIPLOST may retry safely), for
// kRememberAppliedMs after it was applied: the results are then dropped, so that the
// store does not grow with every command ever applied (reports, heartbeats of attempts).
//
// Thread-safety: called on the Raft loop thread; the store does its own locking.
#pragma once

#include <string>

#include "daemon/consensus/state_machine.h"
#include "daemon/state/state_store.h"

namespace traintl {

class Fsm : public StateMachine {
 public:
  explicit Fsm(StateStore* store) : store_(store) {}

  // How long (by the commands' own times) a rid's result is kept. A proposer retries
  // within seconds of an election; submissions are also deduplicated by their
  // submission id for as long as the job is stored.
  static constexpr int64_t kRememberAppliedMs = 10 * 60 * 1000;

  std::string Apply(const std::string& command) override;
  Result<std::string> Snapshot() override;
  Status Restore(const std::string& snapshot) override;

 private:
  StateStore* const store_;
};

}  // namespace traintl
