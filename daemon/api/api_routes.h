// The daemon's HTTP API (docs/API.md): handlers decode the request, delegate to the job
// manager / state store / blob store, and encode the answer - nothing else.
//
// Thread-safety: handlers run on the io_context thread of the HTTP server, which is the
// thread the job manager and agent live on.
#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/fs_identity.h"
#include "daemon/consensus/disk_guard.h"
#include "daemon/consensus/raft_node.h"
#include "daemon/head/job_manager.h"
#include "daemon/head/tune_controller.h"
#include "daemon/http/peer_calls.h"
#include "daemon/http/responder.h"
#include "daemon/http/router.h"
#include "daemon/node/agent.h"
#include "daemon/node/blob_store.h"
#include "daemon/node/fingerprint.h"
#include "daemon/state/state_store.h"

namespace traintl {

struct ApiContext {
  boost::asio::io_context* io = nullptr;
  StateStore* store = nullptr;
  JobManager* jobs = nullptr;
  TuneController* tune = nullptr;  // null: no /v1/tune routes
  RaftNode* raft = nullptr;        // null (an agent without a log): no traintl_raft_* series
  BlobStore* blobs = nullptr;
  Agent* agent = nullptr;
  NodeResources node;
  std::string node_id;
  std::string api_address;
  std::string version;
  size_t max_upload_bytes = 512u << 20;  // largest library upload
  // When workers run as another account (--worker-user), submit looks at an
  // entrypoint.library path (to refuse a FIFO at once) with that account's file access
  // (common/fs_identity.h): root's would tell a token holder what exists where workers
  // cannot look. Default: unset (the daemon's own).
  std::optional<FsIdentity> worker_fs_identity;
  // Most log streams (GET .../logs) open at once; more get 503. Each follow stream polls
  // its file, so an unbounded number would let one client wear the daemon down. Default 64.
  int max_log_streams = 64;
  // How many are open; shared by the routes' copies of this context. Set by
  // RegisterApiRoutes when null.
  std::shared_ptr<int> open_log_streams;
  // Multi-node: the role this daemon shows when it is not the head ("voter" | "agent"),
  // the head's API address as far as it knows, and a hook that may forward a /v1 request
  // to the head instead of serving it (returns true when it took the request; `local`
  // serves it here, possibly later).
  std::string role_when_not_head = "voter";
  // Free space of the replicated log's file system (RaftNode::disk_space); /healthz
  // reports "disk_full" while it is below the reserve. Null: not reported.
  std::function<DiskSpace()> disk_space;
  // Whether `bytes` more may be written beside the replicated log (RaftNode::CheckSpaceFor):
  // library uploads go to data_dir too, and a full disk would stop the log. Null: no check.
  std::function<Status(uint64_t bytes, const std::string& what)> check_space;
  std::function<std::string()> head_address;
  // Multi-node: daemon-to-daemon calls (remote ranks' logs) and the pool they block on.
  // Null on a single node: every rank's log is local.
  const PeerCalls* peers = nullptr;
  BlockingCallPool* calls = nullptr;
  // Where library uploads are checked, hashed and written: a 512 MiB upload takes seconds
  // that the io thread, which serves everything else, must not spend. Required.
  BlockingCallPool* blob_work = nullptr;
  std::function<bool(const http::Request&, const std::shared_ptr<http::Responder>&,
                     const http::Handler& local)>
      forward;
};

void RegisterApiRoutes(http::Router& router, ApiContext ctx);

// For the route files: registers a /v1 route the way RegisterApiRoutes does (forwarded
// to the head first when multi-node).
using AddRoute = std::function<void(std::string method, std::string pattern, http::Handler)>;
// GET /metrics (metrics_route.cc), Prometheus's text format; not forwarded to the head.
void RegisterMetricsRoute(http::Router& router, const ApiContext& ctx);
// The /v1/tune routes (tune_routes.cc).
void RegisterTuneRoutes(const ApiContext& ctx, const AddRoute& add);
// The HTTP status of an expected failure (400, 404, 409, 503, 507, else 500).
int HttpStatusFor(const Status& st);
// Whether query parameter `name` is set ("1" or "true").
bool QueryFlag(const http::Request& req, const std::string& name);
// The request body's optional "submission_id" (the idempotency key of a submission) into
// *out; answers 400 and returns false when it is not a string of at most 128 chars.
bool ReadSubmissionId(const nlohmann::json& body, const std::shared_ptr<http::Responder>& res,
                      std::string* out);
// The code a submitted spec runs, from the request body's library_sha256 or
// working_dir_sha256 (a stored blob) or the spec's absolute library path. Answers 400
// naming the field and returns false when the body or spec do not add up.
bool ResolveJobCode(const ApiContext& ctx, const nlohmann::json& body, const JobSpec& spec,
                    const std::shared_ptr<http::Responder>& res, std::string* sha256,
                    std::string* path);

}  // namespace traintl
