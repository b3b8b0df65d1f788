#include "daemon/api/head_forwarder.h"

#include <boost/asio/post.hpp>
#include <chrono>
#include <map>
#include <string>
#include <thread>

namespace traintl {

namespace asio = boost::asio;

namespace {

constexpr char kForwardedHeader[] = "X-Traintl-Forwarded";

}  // namespace

bool HeadForwarder::Forward(const http::Request& req, const std::shared_ptr<http::Responder>& res,
                            const http::Handler& local) {
  if (link_->is_head()) return false;
  const bool write = req.method != "GET" && req.method != "HEAD";
  const bool logs = req.path.size() > 5 && req.path.compare(req.path.size() - 5, 5, "/logs") == 0;
  // Logs live on the node that ran the rank; a follower's replica knows the job.
  if (voter_ && logs) return false;
  if (!req.header(kForwardedHeader).empty()) {
    if (voter_ && !write) return false;
    res->SendError(503, "this node is not the head and cannot forward again; retry");
    return true;
  }
  if (voter_ && !write && link_->head_address().empty()) return false;
  auto copy = std::make_shared<http::Request>(req);
  std::map<std::string, std::string> headers = {{kForwardedHeader, "1"}};
  if (!req.header("authorization").empty()) headers["Authorization"] = req.header("authorization");
  if (!req.header("content-type").empty()) headers["Content-Type"] = req.header("content-type");
  calls_->Post([this, headers, copy, res, local, write] {
    // During a failover the head moves: look for the new one for a few seconds. A write
    // is only retried when it was never sent, so it cannot be applied twice.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    Result<http::ClientResponse> r = Status::Unavailable("no head found");
    bool sent = false;
    for (;;) {
      const std::string head = link_->FindHead();
      if (!head.empty()) {
        std::string host;
        uint16_t port = 0;
        if (SplitAddress(head, &host, &port)) {
          sent = true;
          r = peers_->Fetch(host, port, copy->method, copy->target, copy->body, headers,
                            std::chrono::seconds(30));
          if (r.ok()) break;
        }
        link_->ForgetHead(head);
      }
      if ((write && sent) || std::chrono::steady_clock::now() > deadline || calls_->stopping())
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    asio::post(io_, [r = std::move(r), copy, res, local, voter = voter_, write]() {
      if (r.ok()) {
        res->Send(r->status, r->header("content-type"), r->body);
      } else if (voter && !write) {
        local(*copy, res);  // no head in reach: answer from this replica
      } else {
        res->SendError(503, "the head did not answer (" + r.status().message() + "); retry");
      }
    });
  });
  return true;
}

}  // namespace traintl
