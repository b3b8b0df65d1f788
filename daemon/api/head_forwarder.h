// HeadForwarder: sends the API requests a node that is not the head must not answer
// itself to the head, and relays the head's answer (DESIGN §5).
//
// Writes always go to the head; a voter answers reads from its own replica when no head
// is in reach, and serves /logs itself (its replica knows where each rank ran; LogStream
// reads remote ranks from their nodes). An agent has no replica: it relays /logs to the
// head as the head's answer comes, chunk by chunk, so that a followed log streams through
// it too; each relay holds one of kMaxLogRelays threads of its own while it lasts (more
// at once get 503), never the BlockingCallPool the other peer calls need. A forwarded
// request carries X-Traintl-Forwarded, so that it is never forwarded twice.
// During a failover the head moves: the forwarder looks for the new one for a few
// seconds, and resends only a request that was never sent, so that a write cannot be
// applied twice.
//
// Thread-safety: Forward is called on the io_context thread; the call runs on a
// BlockingCallPool thread, which posts the answer (or the local handler) back to the
// io_context.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "daemon/http/peer_calls.h"
#include "daemon/http/request.h"
#include "daemon/http/responder.h"
#include "daemon/http/router.h"
#include "daemon/node/head_link.h"

namespace traintl {

class HeadForwarder {
 public:
  // `voter`: this node is a Raft voter with a replica of its own (--server). Every
  // pointer must outlive this.
  HeadForwarder(boost::asio::io_context& io, bool voter, HeadLink* link, const PeerCalls* peers,
                BlockingCallPool* calls)
      : io_(io), voter_(voter), link_(link), peers_(peers), calls_(calls) {}

  // Forwards `req` to the head and returns true; false when the caller should serve it
  // locally (this node is the head, or it is a voter and the request is a read with no
  // head in reach). `local` may still serve it later, when the head cannot be reached.
  bool Forward(const http::Request& req, const std::shared_ptr<http::Responder>& res,
               const http::Handler& local);

  // Starts and stops the log relays' threads; Stop ends the relays in flight (their
  // answers end where they are). Called from the daemon's thread, Stop after the
  // io_context returned.
  void Start() { relays_.Start(); }
  void Stop();

  static constexpr int kMaxLogRelays = 8;

 private:
  // One relayed /logs answer: its cancel flag (the daemon stops, or the client left) and
  // the handshake that waits for each chunk to be written before reading the next.
  struct Relay {
    std::atomic<bool> cancel{false};
    std::mutex mu;
    std::condition_variable cv;
    bool written = false;  // guarded by mu
  };
  // Relays `req` (a GET .../logs) to the head, streaming its answer into `res`.
  void RelayLogs(const std::shared_ptr<http::Request>& req,
                 std::map<std::string, std::string> headers,
                 const std::shared_ptr<http::Responder>& res);
  // On a relay thread: finds the head, opens the request and copies the answer.
  void RunRelay(const std::shared_ptr<Relay>& relay, const std::shared_ptr<http::Request>& req,
                const std::map<std::string, std::string>& headers,
                const std::shared_ptr<http::Responder>& res);

  // Constant after construction.
  boost::asio::io_context& io_;
  const bool voter_;
  HeadLink* const link_;
  const PeerCalls* const peers_;
  BlockingCallPool* const calls_;

  BlockingCallPool relays_{kMaxLogRelays};
  std::atomic<int> relays_active_{0};  // taken on the io_context, given back by the relay
  std::mutex relays_mu_;
  std::set<std::shared_ptr<Relay>> relays_in_flight_;  // guarded by relays_mu_ (for Stop)
};

}  // namespace traintl
