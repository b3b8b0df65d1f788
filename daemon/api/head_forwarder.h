// HeadForwarder: sends the API requests a node that is not the head must not answer
// itself to the head, and relays the head's answer (DESIGN §5).
//
// Writes always go to the head; a voter answers reads from its own replica when no head
// is in reach, and serves /logs itself (logs live on the node that ran the rank). A
// forwarded request carries X-Traintl-Forwarded, so that it is never forwarded twice.
// During a failover the head moves: the forwarder looks for the new one for a few
// seconds, and resends only a request that was never sent, so that a write cannot be
// applied twice.
//
// Thread-safety: Forward is called on the io_context thread; the call runs on a
// BlockingCallPool thread, which posts the answer (or the local handler) back to the
// io_context.
#pragma once

#include <boost/asio/io_context.hpp>
#include <memory>

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

 private:
  // Constant after construction.
  boost::asio::io_context& io_;
  const bool voter_;
  HeadLink* const link_;
  const PeerCalls* const peers_;
  BlockingCallPool* const calls_;
};

}  // namespace traintl
