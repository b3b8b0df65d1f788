#include "daemon/http/peer_calls.h"

#include <algorithm>
#include <exception>

namespace traintl {

namespace {

using SteadyClock = std::chrono::steady_clock;

// Pause between tries of a request the peer refused unread (every connection busy).
constexpr std::chrono::milliseconds kRefusedRetryDelay{50};

}  // namespace

bool SplitAddress(const std::string& address, std::string* host, uint16_t* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  *host = address.substr(0, colon);
  try {
    int p = std::stoi(address.substr(colon + 1));
    if (p <= 0 || p > 65535) return false;
    *port = static_cast<uint16_t>(p);
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

std::map<std::string, std::string> PeerCalls::AuthHeaders() const {
  return {{"Authorization", "Bearer " + options_.token}};
}

Result<http::ClientResponse> PeerCalls::Fetch(const std::string& host, uint16_t port,
                                              const std::string& method, const std::string& target,
                                              const std::string& body,
                                              const std::map<std::string, std::string>& headers,
                                              std::chrono::milliseconds timeout) const {
  const auto deadline = SteadyClock::now() + timeout;
  for (;;) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
    auto r = http::Fetch(host, port, method, target, body, headers,
                         std::max(left, std::chrono::milliseconds(1)), Tls());
    if (!r.ok() || !http::RefusedUnread(*r) ||
        SteadyClock::now() + kRefusedRetryDelay >= deadline) {
      return r;
    }
    std::this_thread::sleep_for(kRefusedRetryDelay);
  }
}

Result<std::unique_ptr<http::ClientStream>> PeerCalls::OpenStream(
    const std::string& host, uint16_t port, const std::string& method, const std::string& target,
    const std::map<std::string, std::string>& headers, std::chrono::milliseconds connect_timeout,
    const std::atomic<bool>* cancel) const {
  http::ClientRequest request;
  request.method = method;
  request.host = host;
  request.port = port;
  request.target = target;
  request.headers = headers;
  if (const http::ClientTls* tls = Tls()) request.tls = *tls;
  http::ClientOptions options;
  options.connect_timeout = connect_timeout;
  options.cancel = cancel;
  options.user_agent = "traintl-http";
  auto s = http::ClientStream::Open(request, options);
  if (s.ok()) return s;
  return Status(s.status().code() == Status::Code::kInvalidArgument ? s.status().code()
                                                                    : Status::Code::kUnavailable,
                method + (Tls() ? " https://" : " http://") + host + ":" + std::to_string(port) +
                    target + ": " + s.status().message());
}

Result<http::ClientResponse> PeerCalls::Call(const std::string& address, const std::string& method,
                                             const std::string& target, const std::string& body,
                                             std::chrono::milliseconds timeout, Auth auth) const {
  std::string host;
  uint16_t port = 0;
  if (!SplitAddress(address, &host, &port))
    return Status::InvalidArgument("bad address " + address);
  std::map<std::string, std::string> headers;
  if (auth == Auth::kToken) headers = AuthHeaders();
  if (!body.empty()) headers.emplace("Content-Type", "application/json");
  return Fetch(host, port, method, target, body, headers, timeout);
}

Result<std::string> PeerCalls::GetBlob(const std::string& address, const std::string& sha) const {
  auto r = Call(address, "GET", "/v1/blobs/" + sha, "", std::chrono::seconds(60));
  if (!r.ok()) return r.status();
  if (r->status != 200) return Status::NotFound("the head has no blob " + sha);
  return std::move(r->body);
}

void BlockingCallPool::Start() {
  for (size_t i = 0; i < num_threads_; ++i) threads_.emplace_back([this] { ThreadMain(); });
}

void BlockingCallPool::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

void BlockingCallPool::Post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    work_.push_back(std::move(fn));
  }
  cv_.notify_all();
}

void BlockingCallPool::ThreadMain() {
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !work_.empty(); });
      if (stopping_) return;
      fn = std::move(work_.front());
      work_.pop_front();
    }
    fn();
  }
}

}  // namespace traintl
