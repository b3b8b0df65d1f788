// RaftNode's loop thread: start-up (libuv handles, transport, raft_io, raft_init,
// bootstrap, raft_start), the posted-work queue, the raft_io close glue that works around
// C-Raft 0.15 bugs, and shutdown.
#include <pthread.h>
#include <signal.h>

#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "common/logging.h"
#include "daemon/consensus/auth_transport.h"
#include "daemon/consensus/raft_address.h"
#include "daemon/consensus/raft_node_internal.h"

namespace traintl {
namespace {

// How often raft_state is polled: C-Raft 0.15 has no state-change callback.
constexpr unsigned kPollIntervalMs = 5;
// Longest wait at shutdown for in-flight disk writes (see CloseWhenIoIdle).
constexpr int kCloseDrainMs = 5000;

}  // namespace

using raft_internal::AddressInUse;
using raft_internal::RaftError;
using raft_internal::RunGuarded;
using raft_internal::ShuttingDown;
using raft_internal::ShuttingDownOutcomeUnknown;

// ---------------------------------------------------------------------------------------
// Loop thread: start-up, shutdown

void RaftNode::Impl::Run(std::shared_ptr<std::promise<Status>> started) {
  loop_thread_id_.store(std::this_thread::get_id());
  // libuv writes to sockets with write(2); a peer that went away would SIGPIPE the whole
  // process. Blocked on this thread, the write fails with EPIPE instead.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  Status st = InitLoop();
  if (!st.ok()) {
    TeardownFailedStart();
    loop_thread_id_.store(std::thread::id());
    started->set_value(st);
    return;
  }
  phase_ = Phase::kRunning;
  {
    std::lock_guard<std::mutex> l(qmu_);
    accepting_ = true;
  }
  uv_timer_start(&poll_, OnPollTimer, 0, kPollIntervalMs);
  LOG_INFO << "raft: node " << options_.node_id << " started at " << address() << " dir "
           << options_.data_dir << " term " << raft_.current_term << " last index "
           << raft_last_index(&raft_) << " applied " << raft_last_applied(&raft_);
  started->set_value(Status::Ok());
  started.reset();

  uv_run(&loop_, UV_RUN_DEFAULT);  // returns once BeginClose closed every handle
  FreeIo();

  DrainQueue();
  FailOutstanding();
  int rv = uv_loop_close(&loop_);
  if (rv != 0) {
    LOG_ERROR << "raft: uv_loop_close: " << uv_strerror(rv);
  }
  LOG_INFO << "raft: node " << options_.node_id << " stopped";
  loop_thread_id_.store(std::thread::id());
}

Status RaftNode::Impl::InitLoop() {
  int rv = uv_loop_init(&loop_);
  if (rv != 0) return Status::Internal(std::string("raft: uv_loop_init: ") + uv_strerror(rv));
  loop_inited_ = true;
  if ((rv = uv_async_init(&loop_, &async_, OnAsync)) != 0) {
    return Status::Internal(std::string("raft: uv_async_init: ") + uv_strerror(rv));
  }
  async_.data = this;
  async_inited_ = true;
  if ((rv = uv_timer_init(&loop_, &poll_)) != 0) {
    return Status::Internal(std::string("raft: uv_timer_init: ") + uv_strerror(rv));
  }
  poll_.data = this;
  poll_inited_ = true;

  if (!options_.cluster_secret.empty()) {
    AuthTransportOptions auth;
    auth.secret = options_.cluster_secret;
    auth.handshake_timeout = std::chrono::milliseconds(options_.auth_handshake_timeout_ms);
    if ((rv = AuthTransportInit(&transport_, &loop_, auth)) != 0) {
      return Status::Internal("raft: authenticated transport: " + RaftError(rv, transport_.errmsg));
    }
    auth_transport_ = true;
  } else {
    LOG_WARN << "raft: no cluster secret; the Raft port " << options_.raft_address
             << " accepts anyone who can reach it";
    if ((rv = raft_uv_tcp_init(&transport_, &loop_)) != 0) {
      return Status::Internal("raft: raft_uv_tcp_init: " + RaftError(rv, transport_.errmsg));
    }
  }
  tcp_inited_ = true;
  if ((rv = raft_uv_init(&io_, &loop_, options_.data_dir.c_str(), &transport_)) != 0) {
    return Status::Internal("raft: raft_uv_init " + options_.data_dir + ": " +
                            RaftError(rv, io_.errmsg));
  }
  io_inited_ = true;
  raft_uv_set_connect_retry_delay(&io_, options_.connect_retry_delay_ms);
  uv_io_close_ = io_.close;
  io_.close = CloseIoOnce;
  uv_append_ = io_.append;
  io_.append = AppendChecked;

  fsm_.version = 2;  // v2: snapshot_finalize releases our snapshot buffers
  fsm_.data = this;
  fsm_.apply = FsmApply;
  fsm_.snapshot = FsmSnapshot;
  fsm_.restore = FsmRestore;
  fsm_.snapshot_finalize = FsmSnapshotFinalize;
  fsm_.snapshot_async = nullptr;

  std::string self_address = address();
  // raft_init runs io->init: the data dir is checked and probed here.
  if ((rv = raft_init(&raft_, &io_, &fsm_, options_.node_id, self_address.c_str())) != 0) {
    std::string detail = RaftError(rv, raft_errmsg(&raft_));
    if (io_.errmsg[0] != '\0') detail += std::string(" (io: ") + io_.errmsg + ")";
    return Status::Internal("raft: raft_init: " + detail);
  }
  raft_inited_ = true;
  raft_.data = this;
  raft_set_election_timeout(&raft_, options_.election_timeout_ms);
  raft_set_heartbeat_timeout(&raft_, options_.heartbeat_timeout_ms);
  raft_set_snapshot_threshold(&raft_, options_.snapshot_threshold);
  raft_set_snapshot_trailing(&raft_, options_.snapshot_trailing);
  raft_set_install_snapshot_timeout(&raft_, options_.install_snapshot_timeout_ms);
  raft_set_pre_vote(&raft_, options_.pre_vote);

  if (!options_.join) {
    struct raft_configuration conf;
    raft_configuration_init(&conf);
    rv = 0;
    for (const RaftPeer& p : bootstrap_) {
      if ((rv = raft_configuration_add(&conf, p.id, p.address.c_str(), RAFT_VOTER)) != 0) break;
    }
    if (rv == 0) rv = raft_bootstrap(&raft_, &conf);
    raft_configuration_close(&conf);
    if (rv == 0) {
      LOG_INFO << "raft: bootstrapped a new cluster of " << bootstrap_.size() << " voter(s)";
    } else if (rv != RAFT_CANTBOOTSTRAP) {  // CANTBOOTSTRAP: the dir has state already
      return Status::Internal("raft: raft_bootstrap: " + RaftError(rv, raft_errmsg(&raft_)));
    }
  }
  // Loads the log and restores the latest snapshot into the state machine.
  if ((rv = raft_start(&raft_)) != 0) {
    std::string detail = RaftError(rv, raft_errmsg(&raft_));
    if (io_.errmsg[0] != '\0') detail += std::string(" (io: ") + io_.errmsg + ")";
    if (transport_.errmsg[0] != '\0')
      detail += std::string(" (transport: ") + transport_.errmsg + ")";
    if (AddressInUse(self_address)) detail += " (address already in use)";
    return Status::Unavailable("raft: raft_start on " + self_address + ": " + detail);
  }
  return Status::Ok();
}

void RaftNode::Impl::OnRaftClosedAfterFailedStart(struct raft* raft) {
  static_cast<Impl*>(raft->data)->failed_start_closed_ = true;
}

// C-Raft 0.15's uv backend can fire its close callback twice: a segment writer whose close
// it does not track calls uvMaybeFireCloseCb again after the callback already ran
// (fixed upstream in cowsql/raft#45). The second call reaches raft's ioCloseCb, which
// frees raft state twice, or, if the backend was already freed, reads freed memory. So
// raft's io->close is wrapped to let the callback through once, and the backend and
// transport are freed only after the loop has run dry (FreeIo).
void RaftNode::Impl::CloseIoOnce(struct raft_io* io, raft_io_close_cb cb) {
  Impl* self = FromIo(io);
  self->raft_io_close_cb_ = cb;
  self->uv_io_close_(io, OnIoClosed);
}

void RaftNode::Impl::OnIoClosed(struct raft_io* io) {
  Impl* self = FromIo(io);
  if (self->io_close_fired_) {
    LOG_DEBUG << "raft: ignored a repeated io close callback";
    return;
  }
  self->io_close_fired_ = true;
  self->raft_io_close_cb_(io);
}

// C-Raft 0.15's uv backend marks itself errored after a failed write (a full disk) and
// never writes again, while raft keeps the entries in memory: a follower then acks
// nothing it stores, and may win an election it cannot serve. So a failed append stops
// the node (Fail), and the restart reloads what the disk holds. The completion callback
// gets only the request, so each append in flight is found in a table: which node made
// it and raft's callback (several nodes may share a process, as in tests).
namespace {

struct AppendInFlight {
  void* impl;  // the RaftNode::Impl
  raft_io_append_cb cb;
};
std::mutex g_appends_mu;
std::unordered_map<struct raft_io_append*, AppendInFlight> g_appends;

}  // namespace

int RaftNode::Impl::AppendChecked(struct raft_io* io, struct raft_io_append* req,
                                  const struct raft_entry entries[], unsigned n,
                                  raft_io_append_cb cb) {
  Impl* self = FromIo(io);
  {
    std::lock_guard<std::mutex> l(g_appends_mu);
    g_appends[req] = {self, cb};
  }
  const int rv = self->uv_append_(io, req, entries, n, OnAppended);
  if (rv != 0) {
    {
      std::lock_guard<std::mutex> l(g_appends_mu);
      g_appends.erase(req);
    }
    if (self->phase_ == Phase::kRunning) {
      self->Fail("writing the replicated log failed: " + RaftError(rv, io->errmsg));
    }
  }
  return rv;
}

void RaftNode::Impl::OnAppended(struct raft_io_append* req, int status) {
  AppendInFlight a{};
  {
    std::lock_guard<std::mutex> l(g_appends_mu);
    auto it = g_appends.find(req);
    if (it == g_appends.end()) {
      LOG_ERROR << "raft: an append completed that was never started";
      std::abort();
    }
    a = it->second;
    g_appends.erase(it);
  }
  Impl* self = static_cast<Impl*>(a.impl);
  // RAFT_CANCELED: the node is closing.
  if (status != 0 && status != RAFT_CANCELED && self->phase_ == Phase::kRunning) {
    self->Fail("writing the replicated log failed: " + RaftError(status, self->io_.errmsg));
  }
  a.cb(req, status);
}

RaftNode::Impl* RaftNode::Impl::FromIo(struct raft_io* io) {
  return static_cast<Impl*>(static_cast<struct raft*>(io->data)->data);  // raft_init sets io->data
}

void RaftNode::Impl::FreeIo() {
  if (io_inited_) raft_uv_close(&io_);
  if (tcp_inited_) {
    if (auth_transport_) {
      AuthTransportFree(&transport_);
    } else {
      raft_uv_tcp_close(&transport_);
    }
  }
  io_inited_ = tcp_inited_ = false;
}

void RaftNode::Impl::TeardownFailedStart() {
  if (!loop_inited_) return;
  if (raft_inited_) {
    raft_.data = this;
    raft_close(&raft_, OnRaftClosedAfterFailedStart);
  }
  if (async_inited_) uv_close(reinterpret_cast<uv_handle_t*>(&async_), nullptr);
  async_closed_ = true;
  if (poll_inited_) uv_close(reinterpret_cast<uv_handle_t*>(&poll_), nullptr);
  uv_run(&loop_, UV_RUN_DEFAULT);
  FreeIo();
  if (raft_inited_ && !failed_start_closed_) {
    LOG_ERROR << "raft: close after failed start hung";
  }
  int rv = uv_loop_close(&loop_);
  if (rv != 0) {
    LOG_ERROR << "raft: uv_loop_close after failed start: " << uv_strerror(rv);
  }
  phase_ = Phase::kClosed;
}

void RaftNode::Impl::BeginClose() {
  if (phase_ != Phase::kRunning) return;
  phase_ = Phase::kClosing;
  stopping_ = true;
  {
    std::lock_guard<std::mutex> l(qmu_);
    accepting_ = false;
  }
  SetReady(false);
  close_deadline_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(kCloseDrainMs);
  uv_timer_stop(&poll_);
  CloseWhenIoIdle();
}

// C-Raft 0.15 can crash (SIGSEGV inside raft_close) when disk writes are still in flight:
// the uv backend cancels them (RAFT_CANCELED) and then faults; reproduced every time with
// 300 proposals pending. So the close waits, for at most kCloseDrainMs, until every
// appended entry is stored and no snapshot is being written; meanwhile pending proposals
// usually commit, and new ones are refused ("shutting down").
void RaftNode::Impl::CloseWhenIoIdle() {
  bool idle = raft_.last_stored >= raft_last_index(&raft_) && raft_.snapshot.put.data == nullptr;
  if (!idle && std::chrono::steady_clock::now() < close_deadline_) {
    uv_timer_start(
        &poll_, [](uv_timer_t* t) { static_cast<Impl*>(t->data)->CloseWhenIoIdle(); }, 1, 0);
    return;
  }
  if (!idle) {
    LOG_WARN << "raft: closing with disk writes in flight after waiting " << kCloseDrainMs
             << " ms (stored " << raft_.last_stored << " of " << raft_last_index(&raft_) << ")";
  }
  UpdateLeader(0, nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&poll_), nullptr);
  // Fails pending applies/barriers/changes (RAFT_LEADERSHIPLOST) and the transfer.
  raft_close(&raft_, OnRaftClosed);
}

void RaftNode::Impl::OnRaftClosed(struct raft* raft) {
  auto* self = static_cast<Impl*>(raft->data);
  self->phase_ = Phase::kClosed;
  // The io and transport are freed by FreeIo once the loop has run dry (see CloseIoOnce).
  uv_close(reinterpret_cast<uv_handle_t*>(&self->async_), nullptr);
  self->async_closed_ = true;
  self->FailOutstanding();
}

// Completes whatever C-Raft did not call back before it closed, so that every done
// callback runs exactly once. Raft no longer references any request once it is closed.
void RaftNode::Impl::FailOutstanding() {
  auto pending = std::move(pending_);
  pending_.clear();
  for (auto& entry : pending) {
    RunGuarded("propose callback", [&] { entry.second->done(ShuttingDownOutcomeUnknown()); });
  }
  barrier_.reset();
  change_.reset();
  if (active_op_ != nullptr) FinishChange(ShuttingDownOutcomeUnknown());
  auto queued = std::move(change_queue_);
  change_queue_.clear();
  for (auto& op : queued) {
    StatusCallback done = std::move(op->done);
    if (done) RunGuarded("membership callback", [&] { done(ShuttingDown()); });
  }
  if (transfer_ != nullptr) {
    std::unique_ptr<Transfer> t = std::move(transfer_);
    RunGuarded("transfer callback", [&] { t->done(ShuttingDown()); });
  }
  finished_transfers_.clear();
}

void RaftNode::Impl::DrainQueue() {
  for (;;) {
    std::deque<std::function<void()>> work;
    {
      std::lock_guard<std::mutex> l(qmu_);
      work.swap(queue_);
    }
    if (work.empty()) return;
    for (auto& fn : work) RunGuarded("posted function", fn);
  }
}

void RaftNode::Impl::OnAsync(uv_async_t* handle) {
  auto* self = static_cast<Impl*>(handle->data);
  std::deque<std::function<void()>> work;
  {
    std::lock_guard<std::mutex> l(self->qmu_);
    work.swap(self->queue_);
  }
  for (auto& fn : work) RunGuarded("posted function", fn);
}

}  // namespace traintl
