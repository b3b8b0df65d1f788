// The daemon-to-daemon endpoints of a multi-node cluster (DESIGN §5): on the head,
// POST /v1/internal/heartbeat, /v1/internal/join and /v1/internal/events (what HeadLink
// sends); on every daemon, POST /v1/internal/launch and /v1/internal/stop (what
// HttpRemoteNodes sends), GET /v1/internal/logs/{job}/{attempt}/{rank} (a chunk of a
// rank's log that ran here, for `traintl logs` on another daemon: LogStream) and
// GET /v1/blobs/{sha} (libraries by hash, for launches and the voters' copies). Handlers decode the
// request and delegate to the job manager, the Raft node, the agent or the blob store.
// All of them take the cluster credential (http::Access::kCluster), never the API token.
//
// Thread-safety: handlers run on the io_context thread of the HTTP server, the thread the
// job manager and agent live on; a launch whose library must be fetched first fetches it
// on a BlockingCallPool thread, which posts the rest back to the io_context.
#pragma once

#include <boost/asio/io_context.hpp>

#include "daemon/head/job_manager.h"
#include "daemon/http/peer_calls.h"
#include "daemon/http/responder.h"
#include "daemon/http/router.h"
#include "daemon/node/agent.h"
#include "daemon/node/blob_store.h"

namespace traintl {

class RaftNode;

struct InternalRoutesContext {
  // Every pointer must outlive the router's handlers. Default null; only `raft` may stay
  // null (an agent-only node: it refuses joins).
  boost::asio::io_context* io = nullptr;
  JobManager* jobs = nullptr;
  Agent* agent = nullptr;
  BlobStore* blobs = nullptr;
  RaftNode* raft = nullptr;
  const PeerCalls* peers = nullptr;
  BlockingCallPool* calls = nullptr;
  // Where GET /v1/blobs reads a blob (up to 512 MiB) before sending it.
  BlockingCallPool* blob_work = nullptr;
};

void RegisterInternalRoutes(http::Router& router, InternalRoutesContext ctx);

}  // namespace traintl
