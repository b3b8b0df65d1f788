// StateMachine: the deterministic state that the replicated Raft log drives (in traintl,
// the SQLite cluster-state store). Every voter applies the same committed commands in the
// same order, so every voter ends up with the same state.
//
// Thread-safety: RaftNode calls every method on its raft loop thread only, one call at a
// time; an implementation needs no locking against RaftNode. Anything else that reads
// the state must do so on that thread too (RaftNode::Post / RaftNode::Call) or
// synchronize on its own.
#pragma once

#include <stdexcept>
#include <string>

#include "common/result.h"
#include "common/status.h"

namespace traintl {

// What Apply throws when the environment, not the command, kept it from storing an entry:
// a full disk, an I/O error, no memory. Unlike a command's own error, this differs between
// replicas, so RaftNode stops the node (SetFatalCallback) instead of skipping the entry.
class StateWriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class StateMachine {
 public:
  virtual ~StateMachine() = default;

  // Applies one committed command and returns its result, which reaches the proposer's
  // callback on the leader (followers discard it). Must be deterministic (same state +
  // same command -> same new state and result on every node) and must not fail for the
  // command's sake: an invalid command is a deterministic no-op whose result says why.
  // StateWriteError (or std::bad_alloc) when the entry could not be stored; the state
  // is then as before the call. A command
  // whose outcome was unknown to its proposer (leadership lost) may be proposed again,
  // so commands should carry request ids that Apply de-duplicates.
  virtual std::string Apply(const std::string& command) = 0;

  // Serializes the whole state (for Raft snapshots). Runs synchronously on the loop
  // thread, so it should be quick (e.g. sqlite3_serialize of an in-memory database).
  // An error skips this snapshot; Raft tries again later.
  virtual Result<std::string> Snapshot() = 0;

  // Replaces the whole state with `snapshot`, a string a Snapshot() call returned
  // (possibly on another node). Called at start-up when the log begins with a snapshot
  // and on a follower that installs the leader's snapshot. An error fails RaftNode::Start
  // (at start-up) or the snapshot installation.
  virtual Status Restore(const std::string& snapshot) = 0;
};

}  // namespace traintl
