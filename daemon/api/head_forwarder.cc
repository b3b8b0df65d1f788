#include "daemon/api/head_forwarder.h"

#include <boost/asio/post.hpp>
#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "daemon/http/browser_session.h"

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
  // A voter's replica knows the job and where its ranks ran: it serves /logs itself.
  if (voter_ && logs) return false;
  if (!req.header(kForwardedHeader).empty()) {
    if (voter_ && !write) return false;
    res->SendError(503, "this node is not the head and cannot forward again; retry");
    return true;
  }
  if (voter_ && !write && link_->head_address().empty()) return false;
  auto copy = std::make_shared<http::Request>(req);
  std::map<std::string, std::string> headers = {{kForwardedHeader, "1"}};
  // What authenticated the request here authenticates it at the head (the cluster has one
  // token, the key of every session): the bearer token, or the dashboard's session cookie
  // with its X-Traintl-Ui header. Only that cookie (each of that name: another service
  // may have set one beside ours): a browser sends this host's cookies of other services
  // too, and they are no business of the head.
  for (const char* name : {"authorization", "x-traintl-ui", "content-type"}) {
    if (!req.header(name).empty()) headers[name] = req.header(name);
  }
  std::string sessions;
  for (const std::string& c : http::SessionCookies(req.header("cookie"))) {
    if (c.find_first_of(";\r\n") != std::string::npos) continue;
    sessions += (sessions.empty() ? "" : "; ") + c;
  }
  if (!sessions.empty()) headers["cookie"] = sessions;
  if (logs && !write) {
    RelayLogs(copy, std::move(headers), res);
    return true;
  }
  // Every responder goes back to the io thread to be let go: a connection is the io
  // thread's, and the last reference to it may be this one.
  calls_->Post([this, headers, copy, res, local, write]() mutable {
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
    asio::post(io_, [r = std::move(r), copy, res = std::move(res), local, voter = voter_, write]() {
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

void HeadForwarder::Stop() {
  {
    std::lock_guard<std::mutex> lock(relays_mu_);
    for (const auto& r : relays_in_flight_) {
      r->cancel = true;
      std::lock_guard<std::mutex> rl(r->mu);
      r->cv.notify_all();
    }
  }
  relays_.Stop();
}

void HeadForwarder::RelayLogs(const std::shared_ptr<http::Request>& req,
                              std::map<std::string, std::string> headers,
                              const std::shared_ptr<http::Responder>& res) {
  if (relays_active_.load() >= kMaxLogRelays) {
    res->SendError(503, "too many log streams relayed to the head (" +
                            std::to_string(kMaxLogRelays) +
                            "); retry later, or ask the head or a voter");
    return;
  }
  ++relays_active_;
  auto relay = std::make_shared<Relay>();
  {
    std::lock_guard<std::mutex> lock(relays_mu_);
    relays_in_flight_.insert(relay);
  }
  relays_.Post([this, relay, req, headers = std::move(headers), res]() mutable {
    RunRelay(relay, req, headers, res);
    {
      std::lock_guard<std::mutex> lock(relays_mu_);
      relays_in_flight_.erase(relay);
    }
    --relays_active_;
    asio::post(io_, [res = std::move(res)] {});  // let go on the io thread
  });
}

void HeadForwarder::RunRelay(const std::shared_ptr<Relay>& relay,
                             const std::shared_ptr<http::Request>& req,
                             const std::map<std::string, std::string>& headers,
                             const std::shared_ptr<http::Responder>& res) {
  // Posts `fn` to the io_context and waits until it called done() (or the relay ends).
  auto on_io = [this, relay](std::function<void(std::function<void(bool)>)> fn) {
    {
      std::lock_guard<std::mutex> lock(relay->mu);
      relay->written = false;
    }
    asio::post(io_, [relay, fn = std::move(fn)] {
      fn([relay](bool ok) {
        if (!ok) relay->cancel = true;
        std::lock_guard<std::mutex> lock(relay->mu);
        relay->written = true;
        relay->cv.notify_all();
      });
    });
    std::unique_lock<std::mutex> lock(relay->mu);
    relay->cv.wait(lock, [&] { return relay->written || relay->cancel.load(); });
  };
  // The head, as Forward finds it: for a few seconds during a failover.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  Result<std::unique_ptr<http::ClientStream>> stream = Status::Unavailable("no head found");
  for (;;) {
    const std::string head = link_->FindHead();
    std::string host;
    uint16_t port = 0;
    if (!head.empty() && SplitAddress(head, &host, &port)) {
      stream = peers_->OpenStream(host, port, "GET", req->target, headers, std::chrono::seconds(5),
                                  &relay->cancel);
      if (stream.ok()) break;
    }
    if (!head.empty()) link_->ForgetHead(head);
    if (std::chrono::steady_clock::now() > deadline || relay->cancel.load()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!stream.ok()) {
    const std::string why = stream.status().message();
    asio::post(io_,
               [res, why] { res->SendError(503, "the head did not answer (" + why + "); retry"); });
    return;
  }
  http::ClientStream& s = **stream;
  const std::string type = s.header("content-type");
  if (s.status() != 200) {
    std::string body;
    Status st = s.ReadAll(&body);
    const int status = s.status();
    asio::post(io_, [res, status, type, body = std::move(body), st] {
      if (st.ok()) {
        res->Send(status, type, body);
      } else {
        res->SendError(503, "the head's answer broke off (" + st.message() + "); retry");
      }
    });
    return;
  }
  on_io([res, type](std::function<void(bool)> done) {
    res->BeginChunked(200, type);
    done(!res->closed());
  });
  std::string buf(64 * 1024, '\0');
  while (!relay->cancel.load()) {
    Result<size_t> n = s.Read(buf.data(), buf.size());
    if (!n.ok() || *n == 0) {
      if (!n.ok() && !relay->cancel.load()) {
        std::string line = "--- the head stopped answering (" + n.status().message() + ") ---\n";
        on_io([res, line](std::function<void(bool)> done) {
          res->WriteChunk(line, [done](bool ok) { done(ok); });
        });
      }
      break;
    }
    on_io([res, chunk = buf.substr(0, *n)](std::function<void(bool)> done) {
      res->WriteChunk(chunk, [done](bool ok) { done(ok); });
    });
  }
  if (!relay->cancel.load()) asio::post(io_, [res] { res->EndChunked(); });
}

}  // namespace traintl
