#include "daemon/consensus/raft_node.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

// C-Raft 0.15's headers lack extern "C" guards.
extern "C" {
#include <raft.h>
#include <raft/uv.h>
}

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>

#include "common/file_util.h"
#include "common/logging.h"
#include "daemon/consensus/auth_transport.h"
#include "daemon/consensus/entry_codec.h"

namespace traintl {
namespace {

// How often raft_state is polled: C-Raft 0.15 has no state-change callback.
constexpr unsigned kPollIntervalMs = 5;
// Longest wait at shutdown for in-flight disk writes (see CloseWhenIoIdle).
constexpr int kCloseDrainMs = 5000;

constexpr char kLockFile[] = "LOCK";
constexpr char kAddressFile[] = "raft_address";

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// Splits "host:port"; port must be a decimal number in [0, 65535].
Status SplitHostPort(const std::string& address, std::string* host, int* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return Status::InvalidArgument("raft address '" + address + "' is not host:port");
  }
  std::string port_text = address.substr(colon + 1);
  if (port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos) {
    return Status::InvalidArgument("raft address '" + address + "' has a bad port");
  }
  int p = std::stoi(port_text);
  if (p > 65535) return Status::InvalidArgument("raft address '" + address + "' has a bad port");
  *host = address.substr(0, colon);
  *port = p;
  return Status::Ok();
}

// True for "localhost" and IPv4 127.0.0.0/8 literals.
bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost") return true;
  in_addr a{};
  return inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

// A port of `host` that is free right now (bind to port 0, read it back, close). Another
// process could take it before raft listens on it; Start then fails with a clear error.
Result<int> PickFreePort(const std::string& host) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  if (inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) {
    return Status::InvalidArgument("raft address port 0 needs an IPv4 literal host, not '" + host +
                                   "'");
  }
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Internal(std::string("socket: ") + std::strerror(errno));
  sa.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    Status st = Status::Unavailable("bind " + host + ":0: " + std::strerror(errno));
    ::close(fd);
    return st;
  }
  socklen_t len = sizeof sa;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    Status st = Status::Internal(std::string("getsockname: ") + std::strerror(errno));
    ::close(fd);
    return st;
  }
  ::close(fd);
  return static_cast<int>(ntohs(sa.sin_port));
}

// C-Raft reports a failed listen as a bare "I/O error"; this tells the usual cause.
bool AddressInUse(const std::string& address) {
  std::string host;
  int port = 0;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  if (!SplitHostPort(address, &host, &port).ok() || port == 0 ||
      inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) {
    return false;
  }
  sa.sin_port = htons(static_cast<uint16_t>(port));
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // as libuv does
  bool in_use = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 && errno == EADDRINUSE;
  ::close(fd);
  return in_use;
}

std::string RaftError(int rv, const char* detail) {
  std::string out = raft_strerror(rv);
  if (detail != nullptr && detail[0] != '\0' && out != detail) out += std::string(": ") + detail;
  return out;
}

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

const Status& ShuttingDown() {
  static const Status kStatus = Status::Unavailable("shutting down");
  return kStatus;
}

const Status& ShuttingDownOutcomeUnknown() {
  static const Status kStatus = Status::Unavailable("shutting down; outcome unknown");
  return kStatus;
}

}  // namespace

const char* RaftRoleName(RaftMember::Role role) {
  switch (role) {
    case RaftMember::Role::kVoter:
      return "voter";
    case RaftMember::Role::kStandby:
      return "standby";
    case RaftMember::Role::kSpare:
      return "spare";
  }
  return "unknown";
}

class RaftNode::Impl {
 public:
  DiskGuard& disk_guard() { return disk_guard_; }
  Impl(RaftOptions options, StateMachine* state_machine)
      : options_(std::move(options)),
        sm_(state_machine),
        disk_guard_(options_.data_dir, options_.min_free_bytes) {
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
  Status AcquireLock();
  void ReleaseLock();
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
  std::thread thread_;
  int lock_fd_ = -1;

  mutable std::mutex address_mu_;
  std::string address_;  // resolved raft address

  std::atomic<std::thread::id> loop_thread_id_{};
  std::atomic<bool> is_leader_{false};
  mutable std::mutex leader_mu_;
  LeaderInfo leader_;
  LeadershipCallback leadership_cb_;  // set before Start, then read on the loop thread

  // Work posted to the loop thread. uv_async_send is called under qmu_ and only while
  // accepting_, which the loop thread clears (under qmu_) before it closes async_, so a
  // send never races with the close.
  std::mutex qmu_;
  std::deque<std::function<void()>> queue_;
  bool accepting_ = false;

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

// ---------------------------------------------------------------------------------------
// Start / Stop (caller threads)

Status RaftNode::Impl::ValidateOptions() const {
  if (sm_ == nullptr) return Status::InvalidArgument("raft: state machine is null");
  if (options_.node_id == 0) return Status::InvalidArgument("raft: node_id must not be 0");
  if (options_.data_dir.empty()) return Status::InvalidArgument("raft: data_dir is empty");
  if (options_.election_timeout_ms == 0 || options_.heartbeat_timeout_ms == 0 ||
      options_.heartbeat_timeout_ms >= options_.election_timeout_ms) {
    return Status::InvalidArgument(
        "raft: need 0 < heartbeat_timeout_ms < election_timeout_ms, got " +
        std::to_string(options_.heartbeat_timeout_ms) + " and " +
        std::to_string(options_.election_timeout_ms));
  }
  if (options_.snapshot_threshold == 0) {
    return Status::InvalidArgument("raft: snapshot_threshold must not be 0");
  }
  if (options_.connect_retry_delay_ms == 0) {
    return Status::InvalidArgument("raft: connect_retry_delay_ms must not be 0");
  }
  if (!options_.cluster_secret.empty() && options_.cluster_secret.size() < kMinClusterSecretBytes) {
    return Status::InvalidArgument("raft: cluster_secret must have at least " +
                                   std::to_string(kMinClusterSecretBytes) + " bytes");
  }
  if (options_.auth_handshake_timeout_ms == 0) {
    return Status::InvalidArgument("raft: auth_handshake_timeout_ms must not be 0");
  }
  std::string host;
  int port = 0;
  TRAINTL_RETURN_IF_ERROR(SplitHostPort(options_.raft_address, &host, &port));
  if (options_.cluster_secret.empty() && !IsLoopbackHost(host)) {
    return Status::PermissionDenied("raft: refusing to listen on non-loopback address " +
                                    options_.raft_address +
                                    " without a cluster secret (anyone could join the cluster)");
  }
  return Status::Ok();
}

Status RaftNode::Impl::AcquireLock() {
  std::string path = JoinPath(options_.data_dir, kLockFile);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Internal("raft: open " + path + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      std::string holder;
      auto content = ReadFile(path);
      if (content.ok()) holder = Trim(*content);
      return Status::FailedPrecondition("raft: data dir " + options_.data_dir +
                                        " is in use by another raft node (" + path + " is locked" +
                                        (holder.empty() ? "" : " by pid " + holder) + ")");
    }
    return Status::Internal("raft: flock " + path + ": " + std::strerror(err));
  }
  // The pid is only a hint for the error message above; the flock is the lock.
  std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    LOG_WARN << "raft: cannot write pid into " << path << ": " << std::strerror(errno);
  }
  lock_fd_ = fd;
  return Status::Ok();
}

void RaftNode::Impl::ReleaseLock() {
  if (lock_fd_ >= 0) {
    ::close(lock_fd_);  // releases the flock
    lock_fd_ = -1;
  }
}

Result<std::string> RaftNode::Impl::ResolveAddress() {
  std::string host;
  int port = 0;
  TRAINTL_RETURN_IF_ERROR(SplitHostPort(options_.raft_address, &host, &port));
  if (port != 0) return options_.raft_address;

  std::string path = JoinPath(options_.data_dir, kAddressFile);
  if (PathExists(path)) {
    TRAINTL_ASSIGN_OR_RETURN(std::string content, ReadFile(path));
    std::string saved = Trim(content);
    std::string saved_host;
    int saved_port = 0;
    Status st = SplitHostPort(saved, &saved_host, &saved_port);
    if (!st.ok() || saved_port == 0) {
      return Status::Internal("raft: " + path + " holds a bad address '" + saved + "'");
    }
    if (saved_host != host) {
      LOG_WARN << "raft: reusing address " << saved << " from " << path << " (host differs from "
               << options_.raft_address << ")";
    }
    return saved;
  }
  TRAINTL_ASSIGN_OR_RETURN(int chosen, PickFreePort(host));
  std::string address = host + ":" + std::to_string(chosen);
  TRAINTL_RETURN_IF_ERROR(WriteFileAtomic(path, address + "\n"));
  LOG_INFO << "raft: chose address " << address << " (saved in " << path << ")";
  return address;
}

Result<std::vector<RaftPeer>> RaftNode::Impl::BootstrapConfiguration(
    const std::string& self_address) const {
  if (options_.bootstrap_peers.empty()) {
    return std::vector<RaftPeer>{{options_.node_id, self_address}};
  }
  std::vector<RaftPeer> peers = options_.bootstrap_peers;
  std::set<uint64_t> ids;
  bool found_self = false;
  for (RaftPeer& p : peers) {
    if (p.id == 0) return Status::InvalidArgument("raft: bootstrap peer with id 0");
    if (!ids.insert(p.id).second) {
      return Status::InvalidArgument("raft: bootstrap peer id " + std::to_string(p.id) +
                                     " listed twice");
    }
    if (p.id == options_.node_id) {
      found_self = true;
      if (p.address.empty() || p.address == options_.raft_address) {
        p.address = self_address;
      } else if (p.address != self_address) {
        return Status::InvalidArgument("raft: bootstrap_peers gives node " + std::to_string(p.id) +
                                       " address " + p.address + " but its raft address is " +
                                       self_address);
      }
    } else if (p.address.empty()) {
      return Status::InvalidArgument("raft: bootstrap peer " + std::to_string(p.id) +
                                     " has no address");
    }
  }
  if (!found_self) {
    return Status::InvalidArgument("raft: bootstrap_peers does not list this node (id " +
                                   std::to_string(options_.node_id) + ")");
  }
  return peers;
}

Status RaftNode::Impl::Start() {
  std::lock_guard<std::mutex> l(lifecycle_mu_);
  if (started_) {
    return Status::FailedPrecondition("raft: a RaftNode starts once; create a new one to restart");
  }
  started_ = true;
  TRAINTL_RETURN_IF_ERROR(ValidateOptions());
  TRAINTL_RETURN_IF_ERROR(MakeDirs(options_.data_dir));
  TRAINTL_RETURN_IF_ERROR(AcquireLock());
  auto fail = [this](Status st) {
    ReleaseLock();
    return st;
  };
  Result<std::string> address = ResolveAddress();
  if (!address.ok()) return fail(address.status());
  {
    std::lock_guard<std::mutex> al(address_mu_);
    address_ = *address;
  }
  if (!options_.join) {
    Result<std::vector<RaftPeer>> conf = BootstrapConfiguration(*address);
    if (!conf.ok()) return fail(conf.status());
    bootstrap_ = std::move(*conf);
  }

  auto started = std::make_shared<std::promise<Status>>();
  std::future<Status> started_future = started->get_future();
  thread_ = std::thread([this, started] { Run(started); });
  Status st = started_future.get();
  if (!st.ok()) {
    thread_.join();
    return fail(st);
  }
  return Status::Ok();
}

void RaftNode::Impl::RequestClose() {
  std::lock_guard<std::mutex> l(qmu_);
  if (!accepting_) return;  // closing already, or never ran
  queue_.push_back([this] { BeginClose(); });
  uv_async_send(&async_);
}

void RaftNode::Impl::Stop() {
  if (InLoopThread()) {
    // Joining itself is impossible; a later Stop()/destructor elsewhere waits.
    stopping_ = true;
    RequestClose();
    return;
  }
  std::lock_guard<std::mutex> l(lifecycle_mu_);
  stopping_ = true;
  if (!thread_.joinable()) return;
  RequestClose();
  thread_.join();
  ReleaseLock();
}

bool RaftNode::Impl::Post(std::function<void()> fn) {
  std::lock_guard<std::mutex> l(qmu_);
  if (!accepting_) return false;
  queue_.push_back(std::move(fn));
  uv_async_send(&async_);  // the only thread-safe libuv call
  return true;
}

void RaftNode::Impl::Defer(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> l(qmu_);
    queue_.push_back(std::move(fn));
  }
  // Once async_ is closed, Run() drains the queue after the loop ends.
  if (!async_closed_) uv_async_send(&async_);
}

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
  if (!entry) {
    // Deterministic on every node (same bytes), so skipping keeps the replicas equal.
    LOG_ERROR << "raft: skipping a malformed log entry: " << error;
    return;
  }
  Result<std::string> outcome = Status::Internal("raft: malformed log entry");
  std::string command(entry->command);
  try {
    outcome = sm_->Apply(command);
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

int RaftNode::Impl::FsmSnapshot(struct raft_fsm* fsm, struct raft_buffer* bufs[],
                                unsigned* n_bufs) {
  return static_cast<Impl*>(fsm->data)->TakeSnapshot(bufs, n_bufs);
}

int RaftNode::Impl::TakeSnapshot(struct raft_buffer* bufs[], unsigned* n_bufs) {
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
    return RAFT_IOERR;
  }
  snapshot_error_.clear();
  const std::string& data = *state;
  size_t len = raft_codec::SnapshotImageBytes(data.size());
  auto* base = static_cast<char*>(raft_calloc(1, len));
  auto* array = static_cast<struct raft_buffer*>(raft_malloc(sizeof(struct raft_buffer)));
  if (base == nullptr || array == nullptr) {
    raft_free(base);
    raft_free(array);
    return RAFT_NOMEM;
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

// ---------------------------------------------------------------------------------------
// RaftNode

RaftNode::RaftNode(RaftOptions options, StateMachine* state_machine)
    : impl_(std::make_unique<Impl>(std::move(options), state_machine)) {}
RaftNode::~RaftNode() = default;
Status RaftNode::Start() { return impl_->Start(); }
void RaftNode::Stop() { impl_->Stop(); }
void RaftNode::Propose(std::string command, ProposeCallback done) {
  impl_->Propose(std::move(command), std::move(done));
}
bool RaftNode::Post(std::function<void()> fn) { return impl_->Post(std::move(fn)); }
bool RaftNode::IsLeader() const { return impl_->IsLeader(); }
LeaderInfo RaftNode::Leader() const { return impl_->Leader(); }
void RaftNode::SetLeadershipCallback(LeadershipCallback callback) {
  impl_->SetLeadershipCallback(std::move(callback));
}
void RaftNode::AddVoter(uint64_t id, std::string address, StatusCallback done) {
  impl_->AddVoter(id, std::move(address), std::move(done));
}
void RaftNode::Remove(uint64_t id, StatusCallback done) { impl_->Remove(id, std::move(done)); }
void RaftNode::TransferLeadership(uint64_t id, StatusCallback done) {
  impl_->TransferLeadership(id, std::move(done));
}
Result<std::vector<RaftMember>> RaftNode::Configuration() { return impl_->Configuration(); }
Result<RaftTransportStats> RaftNode::TransportStats() { return impl_->TransportStats(); }
uint64_t RaftNode::id() const { return impl_->id(); }
DiskSpace RaftNode::disk_space() { return impl_->disk_guard().Last(/*refresh=*/true); }
std::string RaftNode::address() const { return impl_->address(); }
bool RaftNode::InLoopThread() const { return impl_->InLoopThread(); }

}  // namespace traintl
