// RaftNode::Impl, shared by the files that implement RaftNode (raft_node.cc: start/stop
// from caller threads and the public forwarders; raft_node_loop.cc: the libuv loop, its
// start-up and shutdown and the raft_io glue; raft_node_leadership.cc;
// raft_node_fsm.cc: proposals and the StateMachine; raft_node_membership.cc). Not part of
// the public interface: only those files include it.
//
// Thread-safety: as documented on RaftNode. The members after "touched by the loop thread
// only" must only be used on the loop thread; the others say what guards them.
#pragma once

#include <uv.h>

// C-Raft 0.15's headers lack extern "C" guards.
extern "C" {
#include <raft.h>
#include <raft/uv.h>
}

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "common/result.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "daemon/consensus/disk_guard.h"
#include "daemon/consensus/raft_node.h"

namespace traintl {
namespace raft_internal {

// A C-Raft error code with its detail message (raft_errmsg, io errmsg), if it adds anything.
std::string RaftError(int rv, const char* detail);

// Runs a user callback; an exception must not unwind through C-Raft's C frames.
template <class F>
void RunGuarded(const char* what, F&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    LOG_ERROR << "raft: " << what << " threw: " << e.what();
  } catch (...) {
    LOG_ERROR << "raft: " << what << " threw";
  }
}

const Status& ShuttingDown();
const Status& ShuttingDownOutcomeUnknown();

}  // namespace raft_internal

class RaftNode::Impl {
 public:
  DiskGuard& disk_guard() { return disk_guard_; }
  Impl(RaftOptions options, StateMachine* state_machine)
      : options_(std::move(options)),
        disk_guard_(options_.data_dir, options_.min_free_bytes),
        sm_(state_machine) {
    std::random_device rd;
    next_tag_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }

  ~Impl() {
    if (InLoopThread()) {
      // The loop thread would run on freed memory; this is a caller bug, not an error.
      LOG_ERROR << "raft: RaftNode destroyed on its own loop thread";
      std::abort();
    }
    Stop();
  }

  Status Start();
  void Stop();
  bool Post(std::function<void()> fn);
  bool InLoopThread() const { return loop_thread_id_.load() == std::this_thread::get_id(); }
  void Propose(std::string command, ProposeCallback done);
  void AddVoter(uint64_t id, std::string address, StatusCallback done);
  void Remove(uint64_t id, StatusCallback done);
  void TransferLeadership(uint64_t id, StatusCallback done);
  Result<std::vector<RaftMember>> Configuration();
  Result<RaftTransportStats> TransportStats();

  bool IsLeader() const { return is_leader_.load(); }
  RaftNode::LogProgress Progress() const {
    return {term_.load(), commit_index_.load(), applied_index_.load(), last_index_.load()};
  }
  LeaderInfo Leader() const {
    std::lock_guard<std::mutex> l(leader_mu_);
    return leader_;
  }
  void SetLeadershipCallback(LeadershipCallback cb) {
    std::lock_guard<std::mutex> l(lifecycle_mu_);
    if (started_) {
      LOG_ERROR << "raft: SetLeadershipCallback after Start is ignored";
      return;
    }
    leadership_cb_ = std::move(cb);
  }
  void SetFatalCallback(StatusCallback cb) {
    std::lock_guard<std::mutex> l(lifecycle_mu_);
    if (started_) {
      LOG_ERROR << "raft: SetFatalCallback after Start is ignored";
      return;
    }
    fatal_cb_ = std::move(cb);
  }
  uint64_t id() const { return options_.node_id; }
  std::string address() const {
    std::lock_guard<std::mutex> l(address_mu_);
    return address_;
  }

 private:
  // Loop-thread lifecycle.
  enum class Phase { kStarting, kRunning, kClosing, kClosed };

  struct Proposal {
    struct raft_apply req {};  // "struct": the function raft_apply() hides the tag
    Impl* impl = nullptr;
    uint64_t tag = 0;
    ProposeCallback done;
    std::optional<Result<std::string>> result;  // set by the FSM when the entry is applied
  };

  struct Barrier {
    struct raft_barrier req {};
    Impl* impl = nullptr;
    raft_term term = 0;
  };

  // A queued membership change; `done` is taken when it completes, so it runs once.
  struct ChangeOp {
    enum class Kind { kAddVoter, kRemove } kind = Kind::kAddVoter;
    uint64_t id = 0;
    std::string address;
    StatusCallback done;
    // AddVoter: this op added the server as a spare. When the promotion then fails (the
    // server never caught up, e.g. it cannot authenticate), the spare is removed again
    // so that the leader stops trying to reach it, and `failure` is reported.
    bool added = false;
    std::optional<Status> failure;
  };

  struct Change {
    enum class Step { kAdd, kAssign, kRemove } step = Step::kAdd;
    struct raft_change req {};
    Impl* impl = nullptr;
  };

  struct Transfer {
    struct raft_transfer req {};
    Impl* impl = nullptr;
    uint64_t target = 0;
    StatusCallback done;
  };

  // Caller-thread helpers of Start.
  Status ValidateOptions() const;
  Status AcquireLock() TRAINTL_REQUIRES(lifecycle_mu_);  // lifecycle_mu_ held
  void ReleaseLock() TRAINTL_REQUIRES(lifecycle_mu_);    // lifecycle_mu_ held (Start, Stop)
  Result<std::string> ResolveAddress();
  Result<std::vector<RaftPeer>> BootstrapConfiguration(const std::string& self_address) const;

  // Loop thread.
  void Run(std::shared_ptr<std::promise<Status>> started);
  Status InitLoop();
  void TeardownFailedStart();
  void BeginClose();
  void CloseWhenIoIdle();
  void FailOutstanding();
  void DrainQueue();
  void Defer(std::function<void()> fn);
  void RequestClose();
  void Poll();
  void StartBarrier();
  void SetReady(bool ready);
  void UpdateLeader(raft_id id, const char* address);
  Status NotLeaderStatus();
  Status ProposeErrorStatus(int rv);
  Status ChangeErrorStatus(int rv, const ChangeOp& op, const char* detail);
  void ProposeOnLoop(std::string command, ProposeCallback done);
  void ApplyEntry(const struct raft_buffer* buf);
  int TakeSnapshot(struct raft_buffer* bufs[], unsigned* n_bufs);
  int RestoreSnapshot(struct raft_buffer* buf);
  void EnqueueChange(std::shared_ptr<ChangeOp> op);
  void StartNextChange();
  void SubmitChange(Change::Step step);
  void FinishChange(Status status);
  void TransferOnLoop(uint64_t id, StatusCallback done);
  Result<std::vector<RaftMember>> ConfigurationOnLoop();
  const struct raft_server* FindServer(uint64_t id) const;

  // C callbacks.
  static void OnAsync(uv_async_t* handle);
  static void OnPollTimer(uv_timer_t* handle);
  static void OnRaftClosed(struct raft* raft);
  static void OnRaftClosedAfterFailedStart(struct raft* raft);
  static void CloseIoOnce(struct raft_io* io, raft_io_close_cb cb);
  static void OnIoClosed(struct raft_io* io);
  static int AppendChecked(struct raft_io* io, struct raft_io_append* req,
                           const struct raft_entry entries[], unsigned n, raft_io_append_cb cb);
  static void OnAppended(struct raft_io_append* req, int status);
  // Reports `why` through fatal_cb_ once, and stops applying entries.
  void Fail(const std::string& why);
  static Impl* FromIo(struct raft_io* io);
  void FreeIo();
  static void OnApplied(struct raft_apply* req, int status, void* result);
  static void OnBarrier(struct raft_barrier* req, int status);
  static void OnChange(struct raft_change* req, int status);
  static void OnTransfer(struct raft_transfer* req);
  static int FsmApply(struct raft_fsm* fsm, const struct raft_buffer* buf, void** result);
  static int FsmSnapshot(struct raft_fsm* fsm, struct raft_buffer* bufs[], unsigned* n_bufs);
  static int FsmSnapshotFinalize(struct raft_fsm* fsm, struct raft_buffer* bufs[],
                                 unsigned* n_bufs);
  static int FsmRestore(struct raft_fsm* fsm, struct raft_buffer* buf);

  // Why work cannot be posted now.
  Status NotRunning() const {
    return Status::Unavailable(stopping_ ? "shutting down" : "raft node is not running");
  }

  const RaftOptions options_;
  DiskGuard disk_guard_;  // thread-safe
  StateMachine* const sm_;

  // Guards Start/Stop against each other and SetLeadershipCallback.
  mutable std::mutex lifecycle_mu_;
  std::atomic<bool> started_{false};   // written under lifecycle_mu_
  std::atomic<bool> stopping_{false};  // Stop() called or shutdown begun
  std::thread thread_ TRAINTL_GUARDED_BY(lifecycle_mu_);
  int lock_fd_ TRAINTL_GUARDED_BY(lifecycle_mu_) = -1;  // the data dir's flock

  mutable std::mutex address_mu_;
  std::string address_ TRAINTL_GUARDED_BY(address_mu_);  // resolved raft address

  std::atomic<std::thread::id> loop_thread_id_{};
  std::atomic<bool> is_leader_{false};
  // Written by Poll on the loop thread, read by Progress() on any.
  std::atomic<uint64_t> term_{0}, commit_index_{0}, applied_index_{0}, last_index_{0};
  mutable std::mutex leader_mu_;
  LeaderInfo leader_ TRAINTL_GUARDED_BY(leader_mu_);
  LeadershipCallback leadership_cb_;  // set under lifecycle_mu_ before Start, then read on the
                                      // loop thread without it (so not annotated)
  StatusCallback fatal_cb_;           // likewise

  // Work posted to the loop thread. uv_async_send is called under qmu_ and only while
  // accepting_, which the loop thread clears (under qmu_) before it closes async_, so a
  // send never races with the close.
  std::mutex qmu_;
  std::deque<std::function<void()>> queue_ TRAINTL_GUARDED_BY(qmu_);
  bool accepting_ TRAINTL_GUARDED_BY(qmu_) = false;

  // ---- Everything below is touched by the loop thread only. ----
  std::vector<RaftPeer> bootstrap_;  // written by Start before the thread exists
  Phase phase_ = Phase::kStarting;
  uv_loop_t loop_{};
  uv_async_t async_{};
  uv_timer_t poll_{};
  struct raft_uv_transport transport_ {};
  struct raft_io io_ {};
  struct raft_fsm fsm_ {};
  struct raft raft_ {};
  bool loop_inited_ = false, async_inited_ = false, poll_inited_ = false;
  bool tcp_inited_ = false, io_inited_ = false, raft_inited_ = false;
  bool auth_transport_ = false;  // transport_ is an AuthTransport, else C-Raft's TCP one
  bool async_closed_ = false;
  bool failed_start_closed_ = false;
  void (*uv_io_close_)(struct raft_io*, raft_io_close_cb) = nullptr;  // the backend's close
  raft_io_close_cb raft_io_close_cb_ = nullptr;                       // raft's callback
  bool io_close_fired_ = false;
  // The backend's append (AppendChecked wraps it).
  int (*uv_append_)(struct raft_io*, struct raft_io_append*, const struct raft_entry[], unsigned,
                    raft_io_append_cb) = nullptr;
  bool failed_ = false;  // Fail ran: entries are no longer applied
  std::string fail_reason_;
  std::chrono::steady_clock::time_point close_deadline_;

  int last_state_ = -1;
  raft_id last_leader_id_ = ~raft_id{0};
  std::string last_leader_address_;
  bool ready_ = false;  // the loop thread's view of is_leader_
  raft_term ready_term_ = 0;
  std::unique_ptr<Barrier> barrier_;

  uint64_t next_tag_ = 0;
  std::unordered_map<uint64_t, std::unique_ptr<Proposal>> pending_;

  std::deque<std::shared_ptr<ChangeOp>> change_queue_;
  std::shared_ptr<ChangeOp> active_op_;  // between its first submission and its completion
  std::unique_ptr<Change> change_;       // the raft_change C-Raft holds now
  std::unique_ptr<Transfer> transfer_;
  // C-Raft sends TimeoutNow through the raft_io_send embedded in raft_transfer and may
  // still reference it after the transfer callback, so requests are freed only at close.
  std::vector<std::unique_ptr<Transfer>> finished_transfers_;

  std::string snapshot_error_;  // last snapshot failure, logged once per distinct message
};

}  // namespace traintl
