// Peer calls: the plumbing every daemon-to-daemon request shares (DESIGN §5).
//
// PeerCalls sends one request to another daemon at "host:port": with the cluster
// credential (except the anonymous /healthz probes), which opens the peer's
// daemon-to-daemon routes and makes the peer's HTTP server treat it as authenticated traffic that
// anonymous connections cannot crowd out (http::ServerOptions), over HTTPS when the cluster serves
// TLS, and sent again within the call's timeout while the peer refuses it unread because all its
// connections are busy (http::RefusedUnread: a busy peer is not a lost peer).
//
// BlockingCallPool is the small pool of threads those blocking calls run on, so that the
// io_context thread never waits on a peer.
//
// Thread-safety: PeerCalls is immutable after construction and may be used from any
// thread (never from the io_context thread of a server it calls, see http::Fetch).
// BlockingCallPool's Post and stopping() are thread-safe; Start and Stop are called from
// one thread (the daemon's io_context thread or after it returned).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "common/result.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "daemon/http/client.h"

namespace traintl {

// Splits "host:port" (port 1..65535). False when `address` is not of that form.
bool SplitAddress(const std::string& address, std::string* host, uint16_t* port);

struct PeerCallOptions {
  // The cluster credential (http::ServerOptions::cluster_token, the same on every daemon),
  // sent as "Authorization: Bearer <token>". Default "".
  std::string token;
  // Daemon-to-daemon calls use HTTPS, verified with `client_tls`: a cluster serves TLS on
  // every daemon or on none. Default false.
  bool tls = false;
  // CA and client settings of those HTTPS calls. Default: the system's CAs.
  http::ClientTls client_tls;
};

class PeerCalls {
 public:
  // Whether a call carries the cluster credential.
  enum class Auth { kToken, kAnonymous };

  explicit PeerCalls(PeerCallOptions options) : options_(std::move(options)) {}
  PeerCalls(const PeerCalls&) = delete;
  PeerCalls& operator=(const PeerCalls&) = delete;

  // {"Authorization": "Bearer <token>"}.
  std::map<std::string, std::string> AuthHeaders() const;

  // http::Fetch to host:port with exactly `headers`, sent again while the peer refuses it
  // unread (it was not processed, so a write may be resent too), within `timeout` in all.
  Result<http::ClientResponse> Fetch(const std::string& host, uint16_t port,
                                     const std::string& method, const std::string& target,
                                     const std::string& body,
                                     const std::map<std::string, std::string>& headers,
                                     std::chrono::milliseconds timeout) const;

  // Fetch to the daemon at `address` ("host:port"), with the token unless kAnonymous and
  // "Content-Type: application/json" when `body` is not empty. InvalidArgument for a bad
  // address; otherwise as http::Fetch (any HTTP status is a successful Result).
  Result<http::ClientResponse> Call(const std::string& address, const std::string& method,
                                    const std::string& target, const std::string& body,
                                    std::chrono::milliseconds timeout,
                                    Auth auth = Auth::kToken) const;

  // Sends `method target` with exactly `headers` to host:port and reads the answer's head
  // only: its body is read as it comes (a streamed answer such as a followed log). The
  // connection must be made within `connect_timeout`; reading has no deadline but gives
  // up once `*cancel` is set (checked a few times a second). Errors as Fetch's.
  Result<std::unique_ptr<http::ClientStream>> OpenStream(
      const std::string& host, uint16_t port, const std::string& method, const std::string& target,
      const std::map<std::string, std::string>& headers, std::chrono::milliseconds connect_timeout,
      const std::atomic<bool>* cancel) const;

  // GET /v1/blobs/{sha} from the daemon at `address` (60 s at most): the blob's bytes,
  // unverified (BlobStore::Put checks the hash). NotFound when the peer answers but does
  // not have it; Call's errors otherwise.
  Result<std::string> GetBlob(const std::string& address, const std::string& sha) const;

 private:
  // The TLS settings of the calls; null for plain HTTP.
  const http::ClientTls* Tls() const { return options_.tls ? &options_.client_tls : nullptr; }

  // Constant after construction.
  const PeerCallOptions options_;
};

class BlockingCallPool {
 public:
  // `threads`: how many calls may block at once (the daemon uses 8).
  explicit BlockingCallPool(size_t threads) : num_threads_(threads) {}
  ~BlockingCallPool() { Stop(); }
  BlockingCallPool(const BlockingCallPool&) = delete;
  BlockingCallPool& operator=(const BlockingCallPool&) = delete;

  void Start();  // starts the threads
  // Joins them; work not begun by then is dropped. Idempotent.
  void Stop();
  // Runs `fn` on one of the threads.
  void Post(std::function<void()> fn);
  // True once Stop began: long-running work should give up.
  bool stopping() const { return stopping_.load(); }

 private:
  void ThreadMain();

  // Constant after construction.
  const size_t num_threads_;

  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> work_ TRAINTL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;  // touched by Start and Stop only
};

// Runs `work()` on one of `pool`'s threads, then `done(result)` on `io`: blocking work
// (file I/O, hashing, a peer call) whose result an HTTP responder answers with. A
// responder belongs to the io thread, its connection too, so `done` (which holds it) is
// moved there, run there and let go there. Both must be copyable (the pool keeps
// std::function).
template <typename Work, typename Done>
void PostThen(BlockingCallPool& pool, boost::asio::io_context& io, Work work, Done done) {
  pool.Post([&io, work = std::move(work), done = std::move(done)]() mutable {
    auto result = work();
    boost::asio::post(io, [result = std::move(result), done = std::move(done)]() mutable {
      done(std::move(result));
    });
  });
}

}  // namespace traintl
