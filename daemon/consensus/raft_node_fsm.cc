// RaftNode: proposals (Propose to OnApplied) and the raft_fsm that drives the
// StateMachine (apply, snapshot, restore) on the loop thread.
#include <new>
#include <string>

#include "common/logging.h"
#include "daemon/consensus/entry_codec.h"
#include "daemon/consensus/raft_node_internal.h"

namespace traintl {

using raft_internal::RaftError;
using raft_internal::RunGuarded;
using raft_internal::ShuttingDown;
using raft_internal::ShuttingDownOutcomeUnknown;

// ---------------------------------------------------------------------------------------
// Proposals and the FSM

void RaftNode::Impl::Propose(std::string command, ProposeCallback done) {
  if (command.size() > kMaxCommandBytes) {
    done(Status::InvalidArgument("raft: command of " + std::to_string(command.size()) +
                                 " bytes exceeds the limit of " +
                                 std::to_string(kMaxCommandBytes)));
    return;
  }
  struct Request {
    std::string command;
    ProposeCallback done;
  };
  auto req = std::make_shared<Request>(Request{std::move(command), std::move(done)});
  bool posted = Post([this, req] { ProposeOnLoop(std::move(req->command), std::move(req->done)); });
  if (!posted) req->done(NotRunning());
}

Status RaftNode::Impl::ProposeErrorStatus(int rv) {
  switch (rv) {
    case RAFT_LEADERSHIPLOST:
      return Status::Unavailable("leadership lost; outcome unknown");
    case RAFT_SHUTDOWN:
      return ShuttingDownOutcomeUnknown();
    case RAFT_NOTLEADER:
      return NotLeaderStatus();
    case RAFT_NOMEM:
    case RAFT_TOOMANY:
    case RAFT_TOOBIG:
    case RAFT_NOSPACE:
      return Status::ResourceExhausted("raft: " + RaftError(rv, nullptr));
    default:
      return Status::Unavailable("raft: " + RaftError(rv, nullptr));
  }
}

void RaftNode::Impl::ProposeOnLoop(std::string command, ProposeCallback done) {
  if (phase_ != Phase::kRunning) {
    RunGuarded("propose callback", [&] { done(ShuttingDown()); });
    return;
  }
  if (failed_) {
    // Stopping (Fail): this node could not tell the outcome of what it commits now.
    Status st = Status::Unavailable("this node cannot store the cluster state (" + fail_reason_ +
                                    "); it is stopping");
    RunGuarded("propose callback", [&] { done(st); });
    return;
  }
  if (raft_state(&raft_) != RAFT_LEADER) {
    Status st = NotLeaderStatus();
    RunGuarded("propose callback", [&] { done(st); });
    return;
  }
  struct raft_buffer buf;
  buf.len = raft_codec::CommandEntryBytes(command.size());
  if (Status disk = disk_guard_.Check(buf.len); !disk.ok()) {
    RunGuarded("propose callback", [&] { done(disk); });
    return;
  }
  buf.base = raft_calloc(1, buf.len);  // zeroes the padding; raft owns it once applied
  if (buf.base == nullptr) {
    RunGuarded("propose callback",
               [&] { done(Status::ResourceExhausted("raft: out of memory for an entry")); });
    return;
  }
  uint64_t tag = next_tag_++;
  raft_codec::EncodeCommandEntry(command, tag, static_cast<char*>(buf.base));

  auto proposal = std::make_unique<Proposal>();
  Proposal* raw = proposal.get();
  raw->impl = this;
  raw->tag = tag;
  raw->done = std::move(done);
  raw->req.data = raw;
  pending_.emplace(tag, std::move(proposal));
  int rv = raft_apply(&raft_, &raw->req, &buf, 1, OnApplied);
  if (rv != 0) {
    raft_free(buf.base);  // ownership passes to raft only on success
    auto node = pending_.extract(tag);
    Status st = ProposeErrorStatus(rv);
    RunGuarded("propose callback", [&] { node.mapped()->done(st); });
  }
}

void RaftNode::Impl::OnApplied(struct raft_apply* req, int status, void* /*result*/) {
  auto* p = static_cast<Proposal*>(req->data);
  Impl* self = p->impl;
  auto node = self->pending_.extract(p->tag);
  if (node.empty()) return;  // already failed by FailOutstanding
  std::unique_ptr<Proposal> owned = std::move(node.mapped());
  // Raft fails pending entries with LEADERSHIPLOST when it closes.
  Result<std::string> result =
      status != 0 && self->phase_ != Phase::kRunning
          ? Result<std::string>(ShuttingDownOutcomeUnknown())
      : status != 0 ? Result<std::string>(self->ProposeErrorStatus(status))
      : owned->result.has_value()
          ? std::move(*owned->result)
          : Result<std::string>(Status::Internal("raft: entry applied but no result recorded"));
  RunGuarded("propose callback", [&] { owned->done(std::move(result)); });
}

// Must return 0 whatever happens: a non-zero return makes C-Raft retry the same entry
// forever and stalls the log.
int RaftNode::Impl::FsmApply(struct raft_fsm* fsm, const struct raft_buffer* buf, void** result) {
  *result = nullptr;  // results travel through pending_ (see ApplyEntry)
  static_cast<Impl*>(fsm->data)->ApplyEntry(buf);
  return 0;
}

void RaftNode::Impl::ApplyEntry(const struct raft_buffer* buf) {
  std::string error;
  auto entry = raft_codec::DecodeCommandEntry(buf->base, buf->len, &error);
  if (failed_) {
    // Stopping (Fail): an entry applied after one that was not would make this replica's
    // state one no other has. Its proposer cannot know what became of it: the other
    // replicas apply it.
    if (entry) {
      auto it = pending_.find(entry->tag);
      if (it != pending_.end()) it->second->result = ShuttingDownOutcomeUnknown();
    }
    return;
  }
  if (!entry) {
    // Deterministic on every node (same bytes), so skipping keeps the replicas equal.
    LOG_ERROR << "raft: skipping a malformed log entry: " << error;
    return;
  }
  Result<std::string> outcome = Status::Internal("raft: malformed log entry");
  std::string command(entry->command);
  try {
    outcome = sm_->Apply(command);
  } catch (const StateWriteError& e) {
    Fail(std::string("storing a committed entry failed: ") + e.what());
    // The other replicas apply it: its proposer cannot know what became of it.
    outcome = Status::Unavailable(std::string("outcome unknown: this node cannot store the "
                                              "cluster state (") +
                                  e.what() + "); it is stopping");
  } catch (const std::bad_alloc&) {
    Fail("storing a committed entry failed: out of memory");
    outcome = Status::Unavailable("this node ran out of memory storing the cluster state");
  } catch (const std::exception& e) {
    LOG_ERROR << "raft: StateMachine::Apply threw: " << e.what();
    outcome = Status::Internal(std::string("state machine threw: ") + e.what());
  } catch (...) {
    LOG_ERROR << "raft: StateMachine::Apply threw";
    outcome = Status::Internal("state machine threw");
  }
  auto it = pending_.find(entry->tag);
  if (it != pending_.end()) it->second->result = std::move(outcome);
}

void RaftNode::Impl::Fail(const std::string& why) {
  if (failed_) return;
  failed_ = true;
  fail_reason_ = why;
  LOG_ERROR << "raft: " << why << "; this node stops applying entries and must restart";
  if (fatal_cb_) {
    RunGuarded("fatal callback", [&] { fatal_cb_(Status::Unavailable(why)); });
  }
}

int RaftNode::Impl::FsmSnapshot(struct raft_fsm* fsm, struct raft_buffer* bufs[],
                                unsigned* n_bufs) {
  return static_cast<Impl*>(fsm->data)->TakeSnapshot(bufs, n_bufs);
}

int RaftNode::Impl::TakeSnapshot(struct raft_buffer* bufs[], unsigned* n_bufs) {
  // After Fail the state lacks entries C-Raft counts as applied: a snapshot of it, labelled
  // with that index, would make the gap permanent (a restart replays only what follows).
  // RAFT_BUSY: the one error C-Raft 0.15 takes for "not now" (any other makes a follower
  // that gets it with a heartbeat unavailable until it restarts).
  if (failed_) return RAFT_BUSY;
  Result<std::string> state = Status::Internal("unset");
  try {
    state = sm_->Snapshot();
  } catch (const std::exception& e) {
    state = Status::Internal(std::string("threw: ") + e.what());
  } catch (...) {
    state = Status::Internal("threw");
  }
  if (!state.ok()) {
    if (state.status().message() != snapshot_error_) {
      LOG_WARN << "raft: StateMachine::Snapshot failed (will retry): " << state.status().ToString();
      snapshot_error_ = state.status().message();
    }
    return RAFT_BUSY;  // retried after the next applied entries (see above)
  }
  snapshot_error_.clear();
  const std::string& data = *state;
  size_t len = raft_codec::SnapshotImageBytes(data.size());
  auto* base = static_cast<char*>(raft_calloc(1, len));
  auto* array = static_cast<struct raft_buffer*>(raft_malloc(sizeof(struct raft_buffer)));
  if (base == nullptr || array == nullptr) {
    raft_free(base);
    raft_free(array);
    return RAFT_BUSY;  // no memory now: retried later, as above
  }
  raft_codec::EncodeSnapshotImage(data, base);
  array[0].base = base;
  array[0].len = len;
  *bufs = array;
  *n_bufs = 1;
  LOG_DEBUG << "raft: snapshot of " << data.size() << " bytes at applied index "
            << raft_last_applied(&raft_);
  return 0;
}

// With fsm v2 and snapshot_finalize set, raft frees nothing of the snapshot itself.
int RaftNode::Impl::FsmSnapshotFinalize(struct raft_fsm* /*fsm*/, struct raft_buffer* bufs[],
                                        unsigned* n_bufs) {
  if (*bufs != nullptr) {
    for (unsigned i = 0; i < *n_bufs; i++) raft_free((*bufs)[i].base);
    raft_free(*bufs);
  }
  *bufs = nullptr;
  *n_bufs = 0;
  return 0;
}

int RaftNode::Impl::FsmRestore(struct raft_fsm* fsm, struct raft_buffer* buf) {
  return static_cast<Impl*>(fsm->data)->RestoreSnapshot(buf);
}

// On success the FSM owns buf->base and must free it; on failure raft frees it.
int RaftNode::Impl::RestoreSnapshot(struct raft_buffer* buf) {
  auto image = raft_codec::DecodeSnapshotImage(buf->base, buf->len);
  if (!image) {
    LOG_ERROR << "raft: malformed snapshot of " << buf->len << " bytes";
    return RAFT_CORRUPT;
  }
  const size_t length = image->size();
  Status st;
  try {
    st = sm_->Restore(std::string(*image));
  } catch (const std::exception& e) {
    st = Status::Internal(std::string("threw: ") + e.what());
  } catch (...) {
    st = Status::Internal("threw");
  }
  if (!st.ok()) {
    LOG_ERROR << "raft: StateMachine::Restore failed: " << st.ToString();
    return RAFT_CORRUPT;
  }
  raft_free(buf->base);
  LOG_INFO << "raft: restored a snapshot of " << length << " bytes";
  return 0;
}

}  // namespace traintl
