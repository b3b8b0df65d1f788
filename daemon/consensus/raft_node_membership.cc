// RaftNode: membership changes (AddVoter, Remove; serialized through a queue), leadership
// transfer, and the reads of the configuration and transport counters.
#include "common/logging.h"
#include "daemon/consensus/auth_transport.h"
#include "daemon/consensus/raft_node_internal.h"

namespace traintl {

using raft_internal::RaftError;
using raft_internal::RunGuarded;
using raft_internal::ShuttingDown;
using raft_internal::ShuttingDownOutcomeUnknown;

// ---------------------------------------------------------------------------------------
// Membership

const struct raft_server* RaftNode::Impl::FindServer(uint64_t id) const {
  for (unsigned i = 0; i < raft_.configuration.n; i++) {
    if (raft_.configuration.servers[i].id == id) return &raft_.configuration.servers[i];
  }
  return nullptr;
}

void RaftNode::Impl::AddVoter(uint64_t id, std::string address, StatusCallback done) {
  if (id == 0 || address.empty()) {
    done(Status::InvalidArgument("raft: AddVoter needs a non-zero id and an address"));
    return;
  }
  auto op = std::make_shared<ChangeOp>();
  op->kind = ChangeOp::Kind::kAddVoter;
  op->id = id;
  op->address = std::move(address);
  op->done = std::move(done);
  if (!Post([this, op] { EnqueueChange(op); })) {
    op->done(NotRunning());
  }
}

void RaftNode::Impl::Remove(uint64_t id, StatusCallback done) {
  if (id == 0) {
    done(Status::InvalidArgument("raft: Remove needs a non-zero id"));
    return;
  }
  auto op = std::make_shared<ChangeOp>();
  op->kind = ChangeOp::Kind::kRemove;
  op->id = id;
  op->done = std::move(done);
  if (!Post([this, op] { EnqueueChange(op); })) {
    op->done(NotRunning());
  }
}

void RaftNode::Impl::EnqueueChange(std::shared_ptr<ChangeOp> op) {
  if (phase_ != Phase::kRunning) {
    StatusCallback done = std::move(op->done);
    RunGuarded("membership callback", [&] { done(ShuttingDown()); });
    return;
  }
  change_queue_.push_back(std::move(op));
  StartNextChange();
}

void RaftNode::Impl::StartNextChange() {
  while (active_op_ == nullptr && !change_queue_.empty() && phase_ == Phase::kRunning) {
    active_op_ = std::move(change_queue_.front());
    change_queue_.pop_front();
    const ChangeOp& op = *active_op_;
    if (raft_state(&raft_) != RAFT_LEADER) {
      FinishChange(NotLeaderStatus());
      continue;
    }
    const struct raft_server* server = FindServer(op.id);
    if (op.kind == ChangeOp::Kind::kAddVoter) {
      if (server == nullptr) {
        SubmitChange(Change::Step::kAdd);
      } else if (op.address != server->address) {
        FinishChange(Status::AlreadyExists("raft: server " + std::to_string(op.id) +
                                           " is already a member at " + server->address));
      } else if (server->role == RAFT_VOTER) {
        FinishChange(Status::Ok());
      } else {
        SubmitChange(Change::Step::kAssign);  // e.g. a previous AddVoter stopped half-way
      }
    } else {
      if (server == nullptr) {
        FinishChange(
            Status::NotFound("raft: server " + std::to_string(op.id) + " is not a member"));
      } else {
        SubmitChange(Change::Step::kRemove);
      }
    }
  }
}

Status RaftNode::Impl::ChangeErrorStatus(int rv, const ChangeOp& op, const char* detail) {
  std::string what =
      "raft: " + std::string(op.kind == ChangeOp::Kind::kAddVoter ? "adding" : "removing") +
      " server " + std::to_string(op.id) + ": " + RaftError(rv, detail);
  switch (rv) {
    case RAFT_NOTLEADER:
      return NotLeaderStatus();
    case RAFT_LEADERSHIPLOST:
      return Status::Unavailable("leadership lost; outcome unknown");
    case RAFT_SHUTDOWN:
      return ShuttingDownOutcomeUnknown();
    case RAFT_CANTCHANGE:
      return Status::Unavailable(what + " (another configuration change is in progress)");
    case RAFT_DUPLICATEID:
    case RAFT_DUPLICATEADDRESS:
      return Status::AlreadyExists(what);
    case RAFT_BADID:
    case RAFT_NOTFOUND:
      return Status::NotFound(what);
    case RAFT_BADROLE:
    case RAFT_INVALID:
      return Status::InvalidArgument(what);
    case RAFT_NOMEM:
      return Status::ResourceExhausted(what);
    default:
      return Status::Unavailable(what);
  }
}

void RaftNode::Impl::SubmitChange(Change::Step step) {
  const ChangeOp& op = *active_op_;
  auto c = std::make_unique<Change>();
  c->step = step;
  c->impl = this;
  c->req.data = c.get();
  int rv = 0;
  switch (step) {
    case Change::Step::kAdd:
      rv = raft_add(&raft_, &c->req, op.id, op.address.c_str(), OnChange);
      break;
    case Change::Step::kAssign:
      rv = raft_assign(&raft_, &c->req, op.id, RAFT_VOTER, OnChange);
      break;
    case Change::Step::kRemove:
      rv = raft_remove(&raft_, &c->req, op.id, OnChange);
      break;
  }
  if (rv != 0) {
    FinishChange(ChangeErrorStatus(rv, op, raft_errmsg(&raft_)));
    return;
  }
  change_ = std::move(c);
}

void RaftNode::Impl::OnChange(struct raft_change* req, int status) {
  auto* c = static_cast<Change*>(req->data);
  Impl* self = c->impl;
  std::unique_ptr<Change> owned = std::move(self->change_);
  if (self->active_op_ == nullptr) return;  // already failed by FailOutstanding
  if (self->active_op_->failure.has_value()) {
    // The clean-up removal of a spare whose promotion failed: report the promotion error.
    self->FinishChange(*self->active_op_->failure);
    return;
  }
  if (status != 0 && self->phase_ != Phase::kRunning) {
    self->FinishChange(ShuttingDownOutcomeUnknown());
  } else if (status != 0 && owned->step == Change::Step::kAssign && self->active_op_->added) {
    self->active_op_->failure = self->ChangeErrorStatus(status, *self->active_op_, nullptr);
    LOG_WARN << "raft: server " << self->active_op_->id << " did not catch up ("
             << self->active_op_->failure->message() << "); removing it again";
    self->Defer([self] {
      if (self->active_op_ == nullptr) return;
      if (self->phase_ != Phase::kRunning || raft_state(&self->raft_) != RAFT_LEADER) {
        self->FinishChange(*self->active_op_->failure);
      } else {
        self->SubmitChange(Change::Step::kRemove);
      }
    });
    return;
  } else if (status != 0) {
    self->FinishChange(self->ChangeErrorStatus(status, *self->active_op_, nullptr));
  } else if (owned->step == Change::Step::kAdd) {
    self->active_op_->added = true;
    // Promote outside this callback: C-Raft is still finishing the add.
    self->Defer([self] {
      if (self->active_op_ == nullptr) return;
      if (self->phase_ != Phase::kRunning) {
        self->FinishChange(ShuttingDownOutcomeUnknown());
      } else if (raft_state(&self->raft_) != RAFT_LEADER) {
        self->FinishChange(self->NotLeaderStatus());
      } else {
        self->SubmitChange(Change::Step::kAssign);
      }
    });
    return;
  } else {
    self->FinishChange(Status::Ok());
  }
}

// Completes the active change and schedules the next one.
void RaftNode::Impl::FinishChange(Status status) {
  std::shared_ptr<ChangeOp> op = std::move(active_op_);
  active_op_ = nullptr;
  if (op != nullptr) {
    StatusCallback done = std::move(op->done);
    if (done) RunGuarded("membership callback", [&] { done(status); });
  }
  if (!change_queue_.empty()) Defer([this] { StartNextChange(); });
}

void RaftNode::Impl::TransferLeadership(uint64_t id, StatusCallback done) {
  auto shared_done = std::make_shared<StatusCallback>(std::move(done));
  if (!Post([this, id, shared_done] { TransferOnLoop(id, std::move(*shared_done)); })) {
    (*shared_done)(NotRunning());
  }
}

void RaftNode::Impl::TransferOnLoop(uint64_t id, StatusCallback done) {
  Status st;
  if (phase_ != Phase::kRunning) {
    st = ShuttingDown();
  } else if (raft_state(&raft_) != RAFT_LEADER) {
    st = NotLeaderStatus();
  } else if (transfer_ != nullptr) {
    st = Status::Unavailable("raft: a leadership transfer is already in progress");
  } else {
    auto t = std::make_unique<Transfer>();
    t->impl = this;
    t->target = id;
    t->done = std::move(done);
    t->req.data = t.get();
    int rv = raft_transfer(&raft_, &t->req, id, OnTransfer);
    if (rv == 0) {
      transfer_ = std::move(t);
      return;
    }
    done = std::move(t->done);
    std::string what = "raft: transfer of leadership to " +
                       (id == 0 ? std::string("any voter") : std::to_string(id)) + ": " +
                       RaftError(rv, raft_errmsg(&raft_));
    if (rv == RAFT_BADID) {
      st = Status::InvalidArgument(what + " (not another voter of the configuration)");
    } else if (rv == RAFT_NOTFOUND) {
      st = Status::FailedPrecondition(what + " (no other voter)");
    } else if (rv == RAFT_NOTLEADER) {
      st = NotLeaderStatus();
    } else {
      st = Status::Unavailable(what);
    }
  }
  RunGuarded("transfer callback", [&] { done(st); });
}

void RaftNode::Impl::OnTransfer(struct raft_transfer* req) {
  auto* t = static_cast<Transfer*>(req->data);
  Impl* self = t->impl;
  if (self->transfer_.get() != t) return;  // already failed by FailOutstanding
  std::unique_ptr<Transfer> owned = std::move(self->transfer_);
  uint64_t target = req->id != 0 ? req->id : t->target;
  raft_id leader = 0;
  const char* address = nullptr;
  raft_leader(&self->raft_, &leader, &address);
  Status st;
  if (self->phase_ != Phase::kRunning) {
    st = ShuttingDown();
  } else if (leader != 0 && leader != self->options_.node_id && (target == 0 || leader == target)) {
    st = Status::Ok();
  } else {
    st = Status::Unavailable("raft: leadership transfer to " + std::to_string(target) +
                             " did not complete; leader is " +
                             (leader == 0 ? std::string("unknown") : std::to_string(leader)));
  }
  StatusCallback done = std::move(owned->done);
  self->finished_transfers_.push_back(std::move(owned));
  RunGuarded("transfer callback", [&] { done(st); });
}

Result<std::vector<RaftMember>> RaftNode::Impl::ConfigurationOnLoop() {
  if (phase_ != Phase::kRunning) return ShuttingDown();
  std::vector<RaftMember> out;
  for (unsigned i = 0; i < raft_.configuration.n; i++) {
    const struct raft_server& s = raft_.configuration.servers[i];
    RaftMember m;
    m.id = s.id;
    m.address = s.address != nullptr ? s.address : "";
    m.role = s.role == RAFT_VOTER     ? RaftMember::Role::kVoter
             : s.role == RAFT_STANDBY ? RaftMember::Role::kStandby
                                      : RaftMember::Role::kSpare;
    out.push_back(std::move(m));
  }
  return out;
}

Result<RaftTransportStats> RaftNode::Impl::TransportStats() {
  auto read = [this]() -> RaftTransportStats {
    RaftTransportStats out;
    if (!auth_transport_ || !tcp_inited_) return out;
    AuthTransportStats s = GetAuthTransportStats(&transport_);
    out.accepted = s.accepted;
    out.connected = s.connected;
    out.rejected = s.rejected;
    out.refused_busy = s.refused_busy;
    return out;
  };
  if (InLoopThread()) return read();
  auto promise = std::make_shared<std::promise<Result<RaftTransportStats>>>();
  auto future = promise->get_future();
  if (!Post([promise, read] { promise->set_value(read()); })) return NotRunning();
  return future.get();
}

Result<std::vector<RaftMember>> RaftNode::Impl::Configuration() {
  if (InLoopThread()) return ConfigurationOnLoop();
  auto promise = std::make_shared<std::promise<Result<std::vector<RaftMember>>>>();
  auto future = promise->get_future();
  if (!Post([this, promise] { promise->set_value(ConfigurationOnLoop()); })) {
    return NotRunning();
  }
  return future.get();
}

}  // namespace traintl
