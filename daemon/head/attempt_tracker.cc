#include "daemon/head/attempt_tracker.h"

#include <algorithm>
#include <csignal>
#include <cstring>
#include <utility>

#include "common/logging.h"
#include "proto/job_spec.h"

namespace traintl {
namespace {

std::string SignalName(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string LastLine(const std::string& text) {
  size_t end = text.find_last_not_of("\n ");
  if (end == std::string::npos) return "";
  size_t start = text.rfind('\n', end);
  start = start == std::string::npos ? 0 : start + 1;
  return text.substr(start, end + 1 - start);
}

// A command entry point's worker that exited 1 after its command ended: how the command
// ended (its code, or the signal that killed it) is what the attempt shows. Not when the
// worker itself was killed or could not start the command (3, 4).
bool EndedByCommand(const WorkerExit& e) {
  return e.exit_code == 1 && !e.signal && (e.command_exit_code || e.command_signal);
}

cmd::AttemptOutcome Failed(std::string reason, std::optional<int> rank = std::nullopt) {
  cmd::AttemptOutcome o;
  o.state = kJobFailed;
  o.failed_rank = rank;
  o.reason = std::move(reason);
  return o;
}

}  // namespace

AttemptTracker::AttemptTracker(AttemptPlacement placement) : placement_(std::move(placement)) {
  for (int r = 0; r < world_size(); ++r) active_.insert(r);
}

bool AttemptTracker::IsRemote(int rank) const {
  return rank >= 0 && rank < world_size() &&
         placement_.rank_nodes[static_cast<size_t>(rank)] != placement_.local_node;
}

int AttemptTracker::RemoteLive() const {
  int n = 0;
  for (int r = 0; r < world_size(); ++r) n += IsRemote(r) && !Exited(r) ? 1 : 0;
  return n;
}

bool AttemptTracker::IsCleanExit(const WorkerExit& e) {
  return e.exit_code && *e.exit_code == 0 && !(e.done_seen && !e.done_ok);
}

AttemptTracker::Commands AttemptTracker::BeginEnding() {
  if (ending_) return {};
  ending_ = true;
  return {StopWorkers{failure_.has_value() && !stop_requested_}};
}

void AttemptTracker::FailWith(cmd::AttemptOutcome o) {
  if (!failure_) failure_ = std::move(o);
}

AttemptTracker::Commands AttemptTracker::OnLaunched(bool head_ok) {
  launched_ = true;
  if (!stop_requested_ && head_ok) return {};
  // Nothing was started: end at once.
  end_proposed_ = true;
  cmd::AttemptOutcome o;
  o.state = stop_requested_ ? kJobStopped : kJobFailed;
  o.reason = stop_requested_ ? stop_reason_ : "the head stepped down before the start";
  return {End{o}};
}

AttemptTracker::Commands AttemptTracker::OnHello(int rank) {
  Commands out{RecordWorkerEvent{rank, "started", ""}};
  const bool completes =
      hellos_.insert(rank).second && static_cast<int>(hellos_.size()) == world_size();
  // Once: a replaced rank's new worker says hello again.
  if (completes && !ending_ && !marked_running_) {
    marked_running_ = true;
    out.push_back(MarkRunning{});
  }
  return out;
}

AttemptTracker::Commands AttemptTracker::OnReport(int rank, int seq, const nlohmann::json& metrics,
                                                  const std::string& checkpoint) {
  std::string ckpt = checkpoint;
  if (!ckpt.empty() &&
      (ckpt.rfind(placement_.staging_prefix, 0) != 0 || ckpt.find("/..") != std::string::npos)) {
    LOG_WARN << "job " << placement_.job_id << " rank " << rank << " reported a checkpoint outside "
             << placement_.staging_prefix << "; ignored";
    ckpt.clear();
  }
  if (!active_.count(rank)) return {};  // left the group of an elastic job
  // After its end was proposed nothing more of the attempt is recorded (a lost node's late
  // report would otherwise be committed while the next attempt starts from an older one).
  if (end_proposed_) return {};
  reports_[seq][rank] = {metrics, ckpt};
  if (generation_ > 0) {
    // After a regroup a rank continues the report sequence of the replica whose state it
    // took, so it may skip seqs: it never sends those, and (replicas holding the same
    // state) the others' reports stand for it.
    for (auto& [q, ranks] : reports_) {
      if (q >= seq) break;
      ranks.emplace(rank, std::pair<nlohmann::json, std::string>{nullptr, ""});
    }
  }
  Commands out;
  CommitComplete(&out);
  return out;
}

void AttemptTracker::CommitComplete(Commands* out) {
  for (auto it = reports_.begin(); it != reports_.end();) {
    auto& ranks = it->second;
    const bool complete =
        std::all_of(active_.begin(), active_.end(), [&ranks](int r) { return ranks.count(r) > 0; });
    if (!complete) {
      ++it;
      continue;
    }
    CommitReport c;
    c.seq = it->first;
    c.metrics = nlohmann::json::object();
    // Rank 0's metrics; a rank standing in for a skipped report has none.
    for (const auto& [r, rep] : ranks) {
      if (rep.first.is_null()) continue;
      c.metrics = rep.first;
      break;
    }
    for (const auto& [r, rep] : ranks)
      if (!rep.second.empty() && active_.count(r)) c.checkpoint_dirs[r] = rep.second;
    if (!c.checkpoint_dirs.empty()) ++commits_in_flight_;
    out->push_back(std::move(c));
    it = reports_.erase(it);
  }
}

AttemptTracker::Commands AttemptTracker::OnExit(const WorkerExit& e, const std::string& log_tail) {
  if (e.generation >= 0) {
    auto current = launched_generation_.find(e.rank);
    if (current != launched_generation_.end() && e.generation < current->second) return {};
  }
  if (e.pid != 0 && e.rank >= 0 && e.rank < world_size()) {
    // One exit per worker: a batch of events a node sends again (its answer was lost) must
    // not end or replace the rank a second time. A worker is its node (the one the rank is
    // placed on: JobManager takes events from no other), its pid and the node's launch
    // count (pids are reused).
    const std::string& node = placement_.rank_nodes[static_cast<size_t>(e.rank)];
    if (!exited_workers_.insert({e.rank, node, e.pid, e.launch}).second) return {};
  }
  exits_[e.rank] = e;
  const std::optional<int> sig = EndedByCommand(e) ? e.command_signal : e.signal;
  const std::optional<int> code = EndedByCommand(e) ? e.command_exit_code : e.exit_code;
  const std::string detail =
      sig ? SignalName(*sig) : "exit code " + std::to_string(code.value_or(-1));
  Commands out{RecordWorkerEvent{e.rank, "exited", detail}};
  if (IsCleanExit(e)) {
    // A rank started again late (peer recovery, an elastic group growing) may still wait
    // to join a group whose other ranks all finished: it can only time out. Stop it.
    bool others_done = true, late_live = false;
    for (int r : active_) {
      if (Exited(r)) {
        others_done = others_done && IsCleanExit(exits_.at(r));
      } else if (moved_.count(r) || replaced_.count(r)) {
        late_live = true;
      } else {
        others_done = false;
      }
    }
    if (others_done && late_live)
      for (auto& c : BeginEnding()) out.push_back(std::move(c));
    return out;
  }
  // A rank an elastic job went on without (its node was lost, and is back).
  if (!active_.count(e.rank)) return out;
  if (Replaceable(e)) {
    ++replacements_;
    ++generation_;
    replaced_.insert(e.rank);
    // The new worker is a new incarnation: until it exits, the rank lives again, and until
    // it says hello it holds no state (a survivor's death then cannot be recovered from).
    exits_.erase(e.rank);
    hellos_.erase(e.rank);
    launched_generation_[e.rank] = generation_;
    ForgetReports({e.rank});
    out.push_back(ReplaceRank{e.rank, generation_});
    return out;
  }
  // A rank this head stopped while the attempt was ending is not a failure of its own.
  const bool expected = ending_ && e.stopped_by_agent;
  cmd::AttemptOutcome outcome = DescribeExit(e, log_tail);
  if (replacements_ > 0 && e.done_seen && !e.done_ok) {
    outcome.reason +=
        " (after a rank of the attempt had been replaced; peer recovery needs the training "
        "loop in run_steps)";
  }
  if (!expected && e.signal && !e.stopped_by_agent && failure_is_own_exit_ && !stop_requested_) {
    // A rank killed from outside is the cause; a peer that failed by itself a moment
    // earlier (its collective saw the dead rank first) is its consequence, whichever exit
    // the agent reaped first.
    failure_ = std::move(outcome);
    failure_is_own_exit_ = false;
  } else if (!expected) {
    // Its worker's exit code, whatever the attempt shows for a command (its signal).
    if (!failure_) failure_is_own_exit_ = e.exit_code.has_value();
    FailWith(std::move(outcome));
  }
  for (auto& c : BeginEnding()) out.push_back(std::move(c));
  return out;
}

void AttemptTracker::ForgetReports(const std::set<int>& ranks) {
  for (auto& [seq, by_rank] : reports_)
    for (int r : ranks) by_rank.erase(r);
}

WorkerExit AttemptTracker::SyntheticExit(int rank, bool killed) const {
  WorkerExit e;
  e.job_id = placement_.job_id;
  e.attempt = placement_.attempt;
  e.rank = rank;
  if (killed) {
    e.signal = SIGKILL;
  } else {
    e.exit_code = 1;
  }
  return e;
}

bool AttemptTracker::Replaceable(const WorkerExit& e) const {
  if (placement_.max_replacements == 0 || !Running()) return false;
  if (placement_.max_replacements > 0 && replacements_ >= placement_.max_replacements) return false;
  // A rank that never got its library running fails the same way again; one that
  // reported its own failure failed in the training code, not by dying.
  if (!hellos_.count(e.rank) || !e.retryable || (e.done_seen && !e.done_ok)) return false;
  if (e.exit_code && (*e.exit_code == 3 || *e.exit_code == 4)) return false;
  for (int r : hellos_)
    if (r != e.rank && !Exited(r)) return true;  // a survivor holds the state
  return false;
}

AttemptTracker::Commands AttemptTracker::OnReplacementFailed(int rank, const std::string& why) {
  exits_[rank] = SyntheticExit(rank, /*killed=*/false);
  Commands out;
  if (TryShrink({rank}, &out)) return out;  // elastic: the others go on without it
  FailWith(Failed("rank " + std::to_string(rank) + " could not be replaced: " + why, rank));
  return BeginEnding();
}

bool AttemptTracker::TryShrink(const std::set<int>& gone, Commands* out) {
  if (placement_.min_ranks <= 0 || !Running()) return false;
  std::vector<int> left;
  for (int r : active_) {
    if (gone.count(r) || Exited(r)) continue;
    // A rank still starting holds no state, and one started again (moved, replaced, grown
    // back) would join the group it was launched for, which no longer meets: the attempt
    // fails and restarts rather than the survivors waiting out the collective timeout.
    if (!hellos_.count(r)) return false;
    left.push_back(r);
  }
  if (static_cast<int>(left.size()) < placement_.min_ranks || left.empty()) return false;
  active_ = std::set<int>(left.begin(), left.end());
  ++generation_;
  ForgetReports(gone);
  out->push_back(Shrink{generation_, left});
  CommitComplete(out);
  return true;
}

void AttemptTracker::MoveRank(int rank, const std::string& node, int generation) {
  if (rank < 0 || rank >= world_size()) return;
  placement_.rank_nodes[static_cast<size_t>(rank)] = node;
  moved_.insert(rank);
  hellos_.erase(rank);  // its new worker holds no state until it says hello
  launched_generation_[rank] = generation >= 0 ? generation : generation_;
}

std::vector<int> AttemptTracker::Missing() const {
  std::vector<int> out;
  if (placement_.min_ranks <= 0 || !Running()) return out;
  for (int r = 0; r < world_size(); ++r)
    if (!active_.count(r)) out.push_back(r);
  if (world_size() < placement_.max_ranks) out.push_back(world_size());
  return out;
}

AttemptTracker::Commands AttemptTracker::OnCapacity(int rank, const std::string& node) {
  const bool added = rank == world_size() && rank < placement_.max_ranks;
  if (placement_.min_ranks <= 0 || !Running() || rank < 0 || (rank >= world_size() && !added) ||
      active_.count(rank)) {
    return {};
  }
  if (added) {
    placement_.rank_nodes.push_back(node);
  } else {
    placement_.rank_nodes[static_cast<size_t>(rank)] = node;
  }
  exits_.erase(rank);  // a new incarnation lives, with no state until its hello
  hellos_.erase(rank);
  active_.insert(rank);
  moved_.insert(rank);
  ++generation_;
  launched_generation_[rank] = generation_;
  return {Grow{generation_, rank, node, std::vector<int>(active_.begin(), active_.end())}};
}

AttemptTracker::Commands AttemptTracker::OnNodeLost(const std::string& node) {
  std::set<int> lost;
  for (int r = 0; r < world_size(); ++r) {
    if (placement_.rank_nodes[static_cast<size_t>(r)] == node && IsRemote(r) && !Exited(r))
      lost.insert(r);
  }
  if (!lost.empty() && placement_.min_ranks > 0) {
    Commands out;
    if (TryShrink(lost, &out)) {
      for (int r : lost) {
        exits_[r] = SyntheticExit(r, /*killed=*/true);
        out.insert(out.begin(), RecordWorkerEvent{r, "exited", "lost with its node " + node});
      }
      return out;
    }
  }
  // Peer recovery: the lost ranks start again elsewhere while a survivor holds the state.
  const int budget = placement_.max_replacements;
  const bool room = budget < 0 || replacements_ + static_cast<int>(lost.size()) <= budget;
  bool survivor = false;
  for (int r : hellos_) survivor = survivor || (!lost.count(r) && !Exited(r) && active_.count(r));
  if (!lost.empty() && budget != 0 && room && survivor && Running()) {
    Commands out;
    for (int r : lost) out.push_back(RecordWorkerEvent{r, "exited", "lost with its node " + node});
    replacements_ += static_cast<int>(lost.size());
    ++generation_;
    ForgetReports(lost);
    out.push_back(Relocate{generation_, std::vector<int>(lost.begin(), lost.end())});
    return out;
  }
  bool hit = false;
  for (int r = 0; r < world_size(); ++r) {
    if (placement_.rank_nodes[static_cast<size_t>(r)] != node || !IsRemote(r) || Exited(r))
      continue;
    hit = true;
    exits_[r] = SyntheticExit(r, /*killed=*/true);
    if (!ending_) FailWith(Failed("rank " + std::to_string(r) + " lost with its node " + node, r));
  }
  return hit ? BeginEnding() : Commands{};
}

AttemptTracker::Commands AttemptTracker::OnNodeStartFailed(const std::string& node,
                                                           const std::string& why) {
  for (int r = 0; r < world_size(); ++r) {
    if (placement_.rank_nodes[static_cast<size_t>(r)] != node || !IsRemote(r) || Exited(r))
      continue;
    exits_[r] = SyntheticExit(r, /*killed=*/false);
  }
  FailWith(Failed(why));
  return BeginEnding();
}

AttemptTracker::Commands AttemptTracker::OnStopRequested(const std::string& reason) {
  if (stop_requested_) return {};
  stop_requested_ = true;
  stop_reason_ = reason.empty() ? kStoppedByUser : reason;
  // Before the start committed there is nothing to stop: OnLaunched ends it.
  return launched_ ? BeginEnding() : Commands{};
}

AttemptTracker::Commands AttemptTracker::OnStepDown() {
  ending_ = true;
  return {StopWorkers{}};
}

AttemptTracker::Commands AttemptTracker::OnCheckpointCommitted(int seq) {
  if (commits_in_flight_ > 0) --commits_in_flight_;
  return {};
}

AttemptTracker::Commands AttemptTracker::OnCheckpointFailed(int seq, const std::string& why) {
  if (commits_in_flight_ > 0) --commits_in_flight_;
  FailWith(Failed("checkpoint " + std::to_string(seq) + " could not be committed: " + why));
  return BeginEnding();
}

AttemptTracker::Commands AttemptTracker::Settle(int local_live) {
  if (!launched_ || end_proposed_) return {};
  if (local_live + RemoteLive() > 0 || commits_in_flight_ > 0) return {};
  cmd::AttemptOutcome o;
  if (stop_requested_) {
    o.state = kJobStopped;
    o.reason = stop_reason_;
  } else if (failure_) {
    o = *failure_;
  } else if (static_cast<int>(exits_.size()) == world_size()) {
    o.state = kJobSucceeded;
  } else {
    return {};  // ranks that started elsewhere have not said how they ended yet
  }
  end_proposed_ = true;
  return {End{o}};
}

cmd::AttemptOutcome DescribeExit(const WorkerExit& e, const std::string& log_tail) {
  cmd::AttemptOutcome o = Failed("", e.rank);
  o.exit_code = e.exit_code;
  o.signal = e.signal;
  if (EndedByCommand(e)) {
    o.exit_code = e.command_exit_code;
    o.signal = e.command_signal;
  }
  o.log_tail = log_tail;
  const std::string r = "rank " + std::to_string(e.rank);
  if (e.signal) {
    o.reason = r + " was killed by " + SignalName(*e.signal);
  } else if (e.exit_code && *e.exit_code == 3) {
    o.reason = r + " could not load the training library: " +
               (e.done_error.empty() ? LastLine(log_tail) : e.done_error);
    o.retryable = false;
  } else if (e.exit_code && *e.exit_code == 4) {
    // A python or command entry point that cannot start (a missing module or program).
    o.reason =
        r + " could not start: " + (e.done_error.empty() ? LastLine(log_tail) : e.done_error);
    o.retryable = false;
  } else if (!e.done_error.empty()) {
    o.reason = r + " failed: " + e.done_error;
  } else {
    o.reason = r + " exited with code " + std::to_string(e.exit_code.value_or(-1));
  }
  if (!e.retryable) o.retryable = false;
  return o;
}

RestartDelay NextRestartDelay(int quick, double ran_s, double backoff_s, double max_s) {
  RestartDelay d;
  // An attempt that ran at least the maximum backoff counts as progress: the sequence
  // starts over.
  d.quick_failures = ran_s < max_s ? quick + 1 : 1;
  d.delay_s = RestartBackoffSeconds(backoff_s, max_s, d.quick_failures);
  return d;
}

std::string LostAttemptReason(const AttemptRecord& a, const std::string& this_node,
                              const std::string& this_run) {
  const std::string n = "attempt " + std::to_string(a.attempt);
  if (a.head_node.empty())  // started by a release that did not record its head
    return n + " lost: its workers are gone (the head changed or its daemon restarted)";
  if (a.head_node != this_node)
    return n + " ended by a head failover: node " + a.head_node +
           ", whose head started it, is no longer the head; node " + this_node +
           " took over and stopped its workers";
  if (a.head_run != this_run)
    return n + " lost: its workers are gone (the daemon on node " + this_node + " restarted)";
  return n +
         " ended: this head lost its leadership while the attempt ran and stopped its "
         "workers";
}

}  // namespace traintl
