// RaftNode's loop thread: tracking the leader and this node's readiness to lead (a
// barrier of its term applied), reported through IsLeader and the leadership callback.
#include "common/logging.h"
#include "daemon/consensus/raft_node_internal.h"

namespace traintl {
namespace {

const char* StateName(int state) {
  switch (state) {
    case RAFT_UNAVAILABLE:
      return "unavailable";
    case RAFT_FOLLOWER:
      return "follower";
    case RAFT_CANDIDATE:
      return "candidate";
    case RAFT_LEADER:
      return "leader";
  }
  return "unknown";
}

}  // namespace

using raft_internal::RaftError;
using raft_internal::RunGuarded;
using raft_internal::ShuttingDown;
using raft_internal::ShuttingDownOutcomeUnknown;

// ---------------------------------------------------------------------------------------
// Loop thread: leadership

void RaftNode::Impl::OnPollTimer(uv_timer_t* handle) { static_cast<Impl*>(handle->data)->Poll(); }

void RaftNode::Impl::Poll() {
  if (phase_ != Phase::kRunning) return;
  int state = raft_state(&raft_);
  raft_id leader_id = 0;
  const char* leader_address = nullptr;
  raft_leader(&raft_, &leader_id, &leader_address);
  UpdateLeader(leader_id, leader_address);
  term_.store(raft_.current_term);
  commit_index_.store(raft_.commit_index);
  applied_index_.store(raft_last_applied(&raft_));
  last_index_.store(raft_last_index(&raft_));
  if (state != last_state_) {
    LOG_INFO << "raft: node " << options_.node_id << " is " << StateName(state) << " in term "
             << raft_.current_term;
    last_state_ = state;
  }
  if (state == RAFT_LEADER) {
    if (ready_ && ready_term_ != raft_.current_term) SetReady(false);
    if (!ready_ && barrier_ == nullptr) StartBarrier();
  } else if (ready_) {
    SetReady(false);
  }
}

// A barrier entry of the current term, once applied, proves that every entry committed
// by earlier leaders has been applied here: only then may the new leader serve reads.
void RaftNode::Impl::StartBarrier() {
  auto b = std::make_unique<Barrier>();
  b->impl = this;
  b->term = raft_.current_term;
  b->req.data = b.get();
  int rv = raft_barrier(&raft_, &b->req, OnBarrier);
  if (rv != 0) {
    LOG_DEBUG << "raft: barrier: " << RaftError(rv, raft_errmsg(&raft_)) << " (will retry)";
    return;
  }
  barrier_ = std::move(b);
}

void RaftNode::Impl::OnBarrier(struct raft_barrier* req, int status) {
  auto* b = static_cast<Barrier*>(req->data);
  Impl* self = b->impl;
  std::unique_ptr<Barrier> owned = std::move(self->barrier_);
  if (status == 0 && self->phase_ == Phase::kRunning && raft_state(&self->raft_) == RAFT_LEADER &&
      self->raft_.current_term == b->term) {
    self->SetReady(true);
  }
}

void RaftNode::Impl::SetReady(bool ready) {
  if (ready == ready_) return;
  ready_ = ready;
  ready_term_ = ready ? raft_.current_term : 0;
  is_leader_.store(ready);
  if (ready) {
    LOG_INFO << "raft: node " << options_.node_id << " leads term " << raft_.current_term
             << " (applied " << raft_last_applied(&raft_) << ")";
  } else {
    LOG_INFO << "raft: node " << options_.node_id << " no longer leads";
  }
  if (leadership_cb_) RunGuarded("leadership callback", [&] { leadership_cb_(ready); });
}

void RaftNode::Impl::UpdateLeader(raft_id id, const char* address) {
  std::string addr = (id != 0 && address != nullptr) ? address : "";
  if (id == last_leader_id_ && addr == last_leader_address_) return;
  last_leader_id_ = id;
  last_leader_address_ = addr;
  {
    std::lock_guard<std::mutex> l(leader_mu_);
    leader_.id = id;
    leader_.address = addr;
  }
  if (phase_ == Phase::kRunning) {
    if (id == 0) {
      LOG_INFO << "raft: node " << options_.node_id << " knows no leader";
    } else {
      LOG_INFO << "raft: node " << options_.node_id << " sees leader " << id << " at " << addr;
    }
  }
}

Status RaftNode::Impl::NotLeaderStatus() {
  raft_id id = 0;
  const char* address = nullptr;
  raft_leader(&raft_, &id, &address);
  if (id == options_.node_id) {
    return Status::Unavailable("not leader; leadership transfer in progress");
  }
  if (id == 0) return Status::Unavailable("not leader; leader is unknown");
  return Status::Unavailable("not leader; leader is " + std::to_string(id) + " at " +
                             (address != nullptr ? address : "unknown address"));
}

}  // namespace traintl
