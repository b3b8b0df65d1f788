#include "daemon/consensus/raft_node.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "common/file_util.h"
#include "common/logging.h"
#include "daemon/consensus/auth_transport.h"
#include "daemon/consensus/raft_address.h"
#include "daemon/consensus/raft_node_internal.h"

namespace traintl {

namespace raft_internal {

std::string RaftError(int rv, const char* detail) {
  std::string out = raft_strerror(rv);
  if (detail != nullptr && detail[0] != '\0' && out != detail) out += std::string(": ") + detail;
  return out;
}

const Status& ShuttingDown() {
  static const Status kStatus = Status::Unavailable("shutting down");
  return kStatus;
}

const Status& ShuttingDownOutcomeUnknown() {
  static const Status kStatus = Status::Unavailable("shutting down; outcome unknown");
  return kStatus;
}

}  // namespace raft_internal

namespace {

constexpr char kLockFile[] = "LOCK";
constexpr char kAddressFile[] = "raft_address";

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

}  // namespace

using raft_internal::IsLoopbackHost;
using raft_internal::PickFreePort;
using raft_internal::SplitHostPort;

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
RaftNode::LogProgress RaftNode::Progress() const { return impl_->Progress(); }
void RaftNode::SetFatalCallback(StatusCallback callback) {
  impl_->SetFatalCallback(std::move(callback));
}

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

Status RaftNode::CheckSpaceFor(uint64_t bytes, const std::string& what) {
  return impl_->disk_guard().CheckOther(bytes, what);
}
std::string RaftNode::address() const { return impl_->address(); }
bool RaftNode::InLoopThread() const { return impl_->InLoopThread(); }

}  // namespace traintl
