// HttpRemoteNodes: the head's RemoteNodes over HTTP - it launches and stops ranks on
// other nodes by calling their internal endpoints (POST /v1/internal/launch and
// /v1/internal/stop, daemon/api/internal_routes.h) with the cluster's token. A launch
// plan names this node as the blob source, so that a node without the job's library
// fetches it from the head.
//
// Thread-safety: Launch and Stop are called on the head's io_context thread (see
// RemoteNodes); the calls block on the BlockingCallPool's threads, which only post
// `done` back to the io_context.
#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "daemon/head/remote_nodes.h"
#include "daemon/http/peer_calls.h"

namespace traintl {

class HttpRemoteNodes : public RemoteNodes {
 public:
  // `self_api_address`: this node's API address, where other nodes fetch libraries.
  // `peers` and `calls` must outlive this.
  HttpRemoteNodes(boost::asio::io_context& io, std::string self_api_address, const PeerCalls* peers,
                  BlockingCallPool* calls)
      : io_(io), self_api_address_(std::move(self_api_address)), peers_(peers), calls_(calls) {}

  void Launch(const std::string& api_address, nlohmann::json plan,
              std::function<void(Result<int>)> done) override;
  void Stop(const std::string& api_address, const std::string& job_id, int attempt,
            bool urgent) override;
  void Ack(const std::string& api_address, const std::string& job_id, int attempt,
           const std::vector<std::pair<int, int>>& acks) override;
  void Regroup(const std::string& api_address, const std::string& job_id, int attempt,
               const events::Regroup& regroup) override;

 private:
  // Constant after construction.
  boost::asio::io_context& io_;
  const std::string self_api_address_;
  const PeerCalls* const peers_;
  BlockingCallPool* const calls_;
};

}  // namespace traintl
