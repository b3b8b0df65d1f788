#include "worker/torch/store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>

namespace traintl {
namespace torch {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMaxBytes = 64u << 20;  // a sanity bound on one key or value
constexpr uint32_t kMaxKeys = 1u << 16;
// A reply to a non-blocking request that takes longer than this means a dead server host.
constexpr std::chrono::seconds kReplyGrace{30};

enum : uint8_t { kOk = 0, kTimeout = 1, kBadRequest = 2 };

std::string ErrnoText(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// Sends all of `data`; false when the peer is gone.
bool SendAll(int fd, const void* data, size_t len) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    const ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

// Receives exactly `len` bytes before `deadline` (nullopt: no deadline); false on EOF, an
// error or the deadline.
bool RecvAll(int fd, void* data, size_t len, std::optional<Clock::time_point> deadline) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    if (deadline) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd pfd{fd, POLLIN, 0};
      const int r = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 1 << 30)));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
    }
    const ssize_t n = recv(fd, p, len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

void PutU32(std::string* out, uint32_t v) {
  v = htonl(v);
  out->append(reinterpret_cast<const char*>(&v), 4);
}
void PutI64(std::string* out, int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  PutU32(out, static_cast<uint32_t>(u >> 32));
  PutU32(out, static_cast<uint32_t>(u));
}
void PutBytes(std::string* out, const void* data, size_t len) {
  PutU32(out, static_cast<uint32_t>(len));
  out->append(static_cast<const char*>(data), len);
}

// Reads the framed fields of a request or response from a socket.
class Reader {
 public:
  Reader(int fd, std::optional<Clock::time_point> deadline) : fd_(fd), deadline_(deadline) {}
  bool U8(uint8_t* v) { return RecvAll(fd_, v, 1, deadline_); }
  bool U32(uint32_t* v) {
    if (!RecvAll(fd_, v, 4, deadline_)) return false;
    *v = ntohl(*v);
    return true;
  }
  bool I64(int64_t* v) {
    uint32_t hi = 0, lo = 0;
    if (!U32(&hi) || !U32(&lo)) return false;
    *v = static_cast<int64_t>((static_cast<uint64_t>(hi) << 32) | lo);
    return true;
  }
  template <typename Buffer>
  bool Blob(Buffer* out) {
    uint32_t len = 0;
    if (!U32(&len) || len > kMaxBytes) return false;
    out->resize(len);
    return len == 0 || RecvAll(fd_, out->data(), len, deadline_);
  }

 private:
  int fd_;
  std::optional<Clock::time_point> deadline_;
};

Result<addrinfo*> Resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  // An empty host means every interface (passive) or the local host.
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(),
                             &hints, &res);
  if (rc != 0) {
    return Status::InvalidArgument("cannot resolve " + host + ": " + gai_strerror(rc));
  }
  return res;
}

}  // namespace

// ---- StoreServer

Result<std::unique_ptr<StoreServer>> StoreServer::Start(const std::string& host, int port) {
  TRAINTL_ASSIGN_OR_RETURN(addrinfo * res, Resolve(host, port, /*passive=*/true));
  std::string error = "no address";
  int fd = -1;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = ErrnoText("socket");
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 1024) == 0) break;
    error = ErrnoText("bind/listen");
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) {
    return Status::Unavailable("rendezvous store: cannot listen on " + host + ":" +
                               std::to_string(port) + ": " + error);
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int bound_port =
      ntohs(bound.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                       : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  std::unique_ptr<StoreServer> server(new StoreServer(fd, bound_port));
  if (pipe2(server->stop_pipe_, O_CLOEXEC) != 0) return Status::Internal(ErrnoText("pipe2"));
  server->accept_thread_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

StoreServer::StoreServer(int listen_fd, int port) : listen_fd_(listen_fd), port_(port) {}

StoreServer::~StoreServer() {
  std::vector<std::thread> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (int fd : connections_) shutdown(fd, SHUT_RDWR);  // wakes workers blocked in recv
    workers.swap(workers_);
  }
  changed_.notify_all();  // wakes workers blocked in get/wait
  if (stop_pipe_[1] >= 0) {
    const char byte = 0;
    (void)!write(stop_pipe_[1], &byte, 1);
  }
  if (accept_thread_.joinable()) accept_thread_.join();
  {
    // The accept loop may have added workers before it saw the wake-up.
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : connections_) shutdown(fd, SHUT_RDWR);
    for (auto& t : workers_) workers.push_back(std::move(t));
    workers_.clear();
  }
  for (auto& t : workers) t.join();
  close(listen_fd_);
  for (int fd : stop_pipe_) {
    if (fd >= 0) close(fd);
  }
}

void StoreServer::AcceptLoop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    const int r = poll(fds, 2, -1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 || (fds[1].revents & POLLIN)) return;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      close(fd);
      return;
    }
    connections_.push_back(fd);
    workers_.emplace_back([this, fd] { Serve(fd); });
  }
}

void StoreServer::Serve(int fd) {
  for (;;) {
    Reader in(fd, std::nullopt);
    uint8_t op = 0;
    uint32_t nkeys = 0;
    if (!in.U8(&op) || !in.U32(&nkeys) || nkeys > kMaxKeys) break;
    std::vector<std::string> keys(nkeys);
    bool ok = true;
    for (auto& k : keys) ok = ok && in.Blob(&k);
    Bytes value, value2;
    int64_t arg = 0;
    if (!ok || !in.Blob(&value) || !in.Blob(&value2) || !in.I64(&arg)) break;

    uint8_t status = kOk;
    Bytes out;
    int64_t number = 0;
    const auto needs_key = [&] { return !keys.empty(); };
    std::unique_lock<std::mutex> lock(mu_);
    const auto have_all = [&] {
      return stopping_ || std::all_of(keys.begin(), keys.end(),
                                      [&](const std::string& k) { return data_.count(k) > 0; });
    };
    const auto wait_keys = [&] {
      if (arg <= 0) {
        changed_.wait(lock, have_all);
      } else if (!changed_.wait_for(lock, std::chrono::milliseconds(arg), have_all)) {
        status = kTimeout;
      }
      if (stopping_) status = kTimeout;
    };
    switch (static_cast<StoreClient::Op>(op)) {
      case StoreClient::Op::kSet:
        if (!needs_key()) {
          status = kBadRequest;
          break;
        }
        data_[keys[0]] = std::move(value);
        changed_.notify_all();
        break;
      case StoreClient::Op::kGet:
        if (!needs_key()) {
          status = kBadRequest;
          break;
        }
        keys.resize(1);
        wait_keys();
        if (status == kOk) out = data_[keys[0]];
        break;
      case StoreClient::Op::kAdd: {
        if (!needs_key()) {
          status = kBadRequest;
          break;
        }
        Bytes& slot = data_[keys[0]];
        int64_t current = 0;
        try {
          if (!slot.empty()) current = std::stoll(std::string(slot.begin(), slot.end()));
        } catch (const std::exception&) {
          status = kBadRequest;  // the key holds something other than a number
          break;
        }
        number = current + arg;
        const std::string text = std::to_string(number);
        slot.assign(text.begin(), text.end());
        changed_.notify_all();
        break;
      }
      case StoreClient::Op::kCompareSet: {
        if (!needs_key()) {
          status = kBadRequest;
          break;
        }
        auto it = data_.find(keys[0]);
        if (it == data_.end()) {
          if (value.empty()) {
            data_[keys[0]] = value2;
            out = value2;
            changed_.notify_all();
          } else {
            out = value;
          }
        } else if (it->second == value) {
          it->second = value2;
          out = value2;
          changed_.notify_all();
        } else {
          out = it->second;
        }
        break;
      }
      case StoreClient::Op::kDelete:
        if (!needs_key()) {
          status = kBadRequest;
          break;
        }
        number = static_cast<int64_t>(data_.erase(keys[0]));
        break;
      case StoreClient::Op::kCheck:
        number = std::all_of(keys.begin(), keys.end(),
                             [&](const std::string& k) { return data_.count(k) > 0; });
        break;
      case StoreClient::Op::kNumKeys:
        number = static_cast<int64_t>(data_.size());
        break;
      case StoreClient::Op::kWait:
        wait_keys();
        break;
      default:
        status = kBadRequest;
    }
    lock.unlock();
    std::string reply;
    reply.push_back(static_cast<char>(status));
    PutBytes(&reply, out.data(), out.size());
    PutI64(&reply, number);
    if (!SendAll(fd, reply.data(), reply.size())) break;
  }
  std::lock_guard<std::mutex> lock(mu_);
  connections_.erase(std::remove(connections_.begin(), connections_.end(), fd), connections_.end());
  close(fd);
}

// ---- StoreClient

Result<std::unique_ptr<StoreClient>> StoreClient::Connect(const std::string& host, int port,
                                                          std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::string error;
  auto backoff = std::chrono::milliseconds(10);
  for (;;) {
    TRAINTL_ASSIGN_OR_RETURN(addrinfo * res, Resolve(host, port, /*passive=*/false));
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
      const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) {
        error = ErrnoText("socket");
        continue;
      }
      if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        freeaddrinfo(res);
        const int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return std::unique_ptr<StoreClient>(new StoreClient(fd));
      }
      error = ErrnoText("connect");
      close(fd);
    }
    freeaddrinfo(res);
    if (Clock::now() + backoff > deadline) break;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(250));
  }
  return Status::Unavailable("rendezvous store at " + host + ":" + std::to_string(port) +
                             " unreachable: " + error);
}

StoreClient::~StoreClient() { close(fd_); }

Result<StoreClient::Response> StoreClient::Call(Op op, const std::vector<std::string>& keys,
                                                const Bytes& value, const Bytes& value2,
                                                int64_t arg) {
  std::string request;
  request.push_back(static_cast<char>(op));
  PutU32(&request, static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) PutBytes(&request, k.data(), k.size());
  PutBytes(&request, value.data(), value.size());
  PutBytes(&request, value2.data(), value2.size());
  PutI64(&request, arg);
  // A blocking request may legitimately take its whole timeout; anything beyond that (or
  // kReplyGrace for the others) means the server's host is gone.
  const bool blocking = op == Op::kGet || op == Op::kWait;
  std::optional<Clock::time_point> deadline;
  if (!blocking || arg > 0) {
    deadline = Clock::now() + kReplyGrace + std::chrono::milliseconds(blocking ? arg : 0);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!SendAll(fd_, request.data(), request.size())) {
    return Status::Unavailable("rendezvous store: connection lost (send)");
  }
  Reader in(fd_, deadline);
  Response r;
  if (!in.U8(&r.status) || !in.Blob(&r.value) || !in.I64(&r.number)) {
    return Status::Unavailable("rendezvous store: connection lost or no reply");
  }
  if (r.status == kBadRequest) return Status::Internal("rendezvous store: bad request");
  return r;
}

Status StoreClient::Set(const std::string& key, const Bytes& value) {
  TRAINTL_ASSIGN_OR_RETURN(auto r, Call(Op::kSet, {key}, value, {}, 0));
  (void)r;
  return Status::Ok();
}

Result<Bytes> StoreClient::Get(const std::string& key, std::chrono::milliseconds timeout) {
  TRAINTL_ASSIGN_OR_RETURN(auto r, Call(Op::kGet, {key}, {}, {}, timeout.count()));
  if (r.status == kTimeout) {
    return Status::Unavailable("rendezvous store: timed out after " +
                               std::to_string(timeout.count()) + " ms waiting for key " + key);
  }
  return std::move(r.value);
}

Result<int64_t> StoreClient::Add(const std::string& key, int64_t delta) {
  TRAINTL_ASSIGN_OR_RETURN(auto r, Call(Op::kAdd, {key}, {}, {}, delta));
  return r.number;
}

Result<Bytes> StoreClient::CompareSet(const std::string& key, const Bytes& expected,
                                      const Bytes& desired) {
  TRAINTL_ASSIGN_OR_RETURN(auto r, Call(Op::kCompareSet, {key}, expected, desired, 0));
  return std::move(r.value);
}

Result<bool> StoreClient::Delete(const std::string& key) {
  TRAINTL_ASSIGN_OR_RETURN(auto r, Call(Op::kDelete, {key}, {}, {}, 0));
  return r.number != 0;
}

Result<bool> StoreClient::Check(const std::vector<std::string>& keys) {
  TRAINTL_ASSIGN_OR_RETURN(auto r, Call(Op::kCheck, keys, {}, {}, 0));
  return r.number != 0;
}

Result<int64_t> StoreClient::NumKeys() {
  TRAINTL_ASSIGN_OR_RETURN(auto r, Call(Op::kNumKeys, {}, {}, {}, 0));
  return r.number;
}

Status StoreClient::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  TRAINTL_ASSIGN_OR_RETURN(auto r, Call(Op::kWait, keys, {}, {}, timeout.count()));
  if (r.status == kTimeout) {
    std::string names;
    for (const auto& k : keys) names += (names.empty() ? "" : ", ") + k;
    return Status::Unavailable("rendezvous store: timed out after " +
                               std::to_string(timeout.count()) + " ms waiting for keys " + names);
  }
  return Status::Ok();
}

}  // namespace detail
}  // namespace torch
}  // namespace traintl
