#include "daemon/head/http_remote_nodes.h"

#include <boost/asio/post.hpp>
#include <chrono>

#include "common/json_depth.h"
#include "common/logging.h"

namespace traintl {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

// The rendezvous port from a launch's answer; `planned_port` when an older agent did not
// say one (it used the head's port).
Result<int> LaunchedPort(const Result<http::ClientResponse>& r, int planned_port) {
  if (!r.ok()) return r.status();
  json b = ParseJsonBounded(r->body);
  if (r->status != 200)
    return Status::Unavailable(b.is_object() ? b.value("error", r->body) : r->body);
  const json* p = b.is_object() && b.contains("master_port") ? &b["master_port"] : nullptr;
  if (p != nullptr && p->is_number_integer() && p->get<int>() > 0 && p->get<int>() < 65536)
    return p->get<int>();
  if (planned_port > 0) return planned_port;
  return Status::Unavailable("the node did not say its rendezvous port (an older version?)");
}

}  // namespace

void HttpRemoteNodes::Launch(const std::string& api_address, json plan,
                             std::function<void(Result<int>)> done) {
  plan["blob_source"] = self_api_address_;
  const int planned_port = plan.value("master_port", 0);
  calls_->Post([io = &io_, peers = peers_, api_address, body = plan.dump(), done, planned_port] {
    auto r =
        peers->Call(api_address, "POST", "/v1/internal/launch", body, std::chrono::seconds(30));
    Result<int> port = LaunchedPort(r, planned_port);
    asio::post(*io, [done, port] { done(port); });
  });
}

void HttpRemoteNodes::Stop(const std::string& api_address, const std::string& job_id, int attempt,
                           bool urgent) {
  const std::string body =
      json{{"job_id", job_id}, {"attempt", attempt}, {"urgent", urgent}}.dump();
  calls_->Post([peers = peers_, api_address, body] {
    auto r = peers->Call(api_address, "POST", "/v1/internal/stop", body, std::chrono::seconds(3));
    if (!r.ok() || r->status != 200)
      LOG_WARN << "could not ask " << api_address << " to stop workers";
  });
}

void HttpRemoteNodes::Ack(const std::string& api_address, const std::string& job_id, int attempt,
                          const std::vector<std::pair<int, int>>& acks) {
  json list = json::array();
  for (const auto& [rank, seq] : acks) list.push_back({rank, seq});
  const std::string body = json{{"job_id", job_id}, {"attempt", attempt}, {"acks", list}}.dump();
  calls_->Post([peers = peers_, api_address, body] {
    auto r = peers->Call(api_address, "POST", "/v1/internal/ack", body, std::chrono::seconds(3));
    // The worker goes on by itself after WorkerHost::kMaxHold.
    if (!r.ok() || r->status != 200)
      LOG_WARN << "could not ask " << api_address << " to ack held reports";
  });
}

void HttpRemoteNodes::Regroup(const std::string& api_address, const std::string& job_id,
                              int attempt, const events::Regroup& regroup) {
  json message = json::parse(events::Encode(regroup));
  message.erase("type");
  json body = {{"job_id", job_id}, {"attempt", attempt}};
  body.update(message);
  const std::string text = body.dump();
  calls_->Post([peers = peers_, api_address, text] {
    auto r =
        peers->Call(api_address, "POST", "/v1/internal/regroup", text, std::chrono::seconds(3));
    // Its survivors' collectives fail anyway; unannounced, they fail the attempt (a restart).
    if (!r.ok() || r->status != 200)
      LOG_WARN << "could not ask " << api_address << " to regroup workers";
  });
}

}  // namespace traintl
