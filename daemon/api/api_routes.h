// The daemon's HTTP API (docs/API.md): handlers decode the request, delegate to the job
// manager / state store / blob store, and encode the answer - nothing else.
//
// Thread-safety: handlers run on the io_context thread of the HTTP server, which is the
// thread the job manager and agent live on.
#pragma once

#include <boost/asio/io_context.hpp>
#include <memory>
#include <string>

#include "daemon/head/job_manager.h"
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
  BlobStore* blobs = nullptr;
  Agent* agent = nullptr;
  NodeResources node;
  std::string node_id;
  std::string api_address;
  std::string version;
  size_t max_upload_bytes = 512u << 20;  // largest library upload
};

void RegisterApiRoutes(http::Router& router, const ApiContext& ctx);

}  // namespace traintl
