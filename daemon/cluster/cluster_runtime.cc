#include "daemon/cluster/cluster_runtime.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <functional>
#include <future>
#include <set>

#include "common/crypto.h"
#include "common/file_util.h"
#include "common/json_depth.h"
#include "common/logging.h"
#include "daemon/consensus/raft_node.h"
#include "daemon/http/client.h"
#include "daemon/node/plan_json.h"
#include "daemon/state/commands.h"

namespace traintl {

namespace asio = boost::asio;
using nlohmann::json;
using ResponderPtr = std::shared_ptr<http::Responder>;
using SteadyClock = std::chrono::steady_clock;

namespace {

constexpr char kForwardedHeader[] = "X-Traintl-Forwarded";

bool SplitAddress(const std::string& address, std::string* host, uint16_t* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  *host = address.substr(0, colon);
  try {
    int p = std::stoi(address.substr(colon + 1));
    if (p <= 0 || p > 65535) return false;
    *port = static_cast<uint16_t>(p);
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

// Pause between tries of a request the peer refused unread (every connection busy).
constexpr std::chrono::milliseconds kRefusedRetryDelay{50};

// Fetch, tried again while the peer refuses the connection before reading the request
// (http::RefusedUnread: it was not processed, so a write may be resent too), within
// `timeout` in all. A busy peer is not a lost peer: a heartbeat or a launch must not fail
// for a moment of congestion.
Result<http::ClientResponse> FetchUnlessBusy(const std::string& host, uint16_t port,
                                             const std::string& method, const std::string& target,
                                             const std::string& body,
                                             const std::map<std::string, std::string>& headers,
                                             std::chrono::milliseconds timeout,
                                             const http::ClientTls* tls) {
  const auto deadline = SteadyClock::now() + timeout;
  for (;;) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
    auto r = http::Fetch(host, port, method, target, body, headers,
                         std::max(left, std::chrono::milliseconds(1)), tls);
    if (!r.ok() || !http::RefusedUnread(*r) ||
        SteadyClock::now() + kRefusedRetryDelay >= deadline) {
      return r;
    }
    std::this_thread::sleep_for(kRefusedRetryDelay);
  }
}

Result<http::ClientResponse> Call(const std::string& address, const std::string& method,
                                  const std::string& target, const std::string& body,
                                  std::map<std::string, std::string> headers,
                                  std::chrono::milliseconds timeout, const http::ClientTls* tls) {
  std::string host;
  uint16_t port = 0;
  if (!SplitAddress(address, &host, &port))
    return Status::InvalidArgument("bad address " + address);
  if (!body.empty()) headers.emplace("Content-Type", "application/json");
  return FetchUnlessBusy(host, port, method, target, body, headers, timeout, tls);
}

}  // namespace

uint64_t RaftIdForNode(const std::string& node_id) {
  // Node ids are "node-" + 8 random hex digits; anything else is hashed.
  uint64_t v = 0;
  const std::string hex = Sha256Hex(node_id).substr(0, 12);
  for (char c : hex) v = v * 16 + static_cast<uint64_t>(std::isdigit(c) ? c - '0' : c - 'a' + 10);
  return v + 2;
}

ClusterRuntime::ClusterRuntime(asio::io_context& io, ClusterOptions options, JobManager* jobs,
                               Agent* agent, BlobStore* blobs, StateStore* store, RaftNode* raft)
    : io_(io),
      options_(std::move(options)),
      jobs_(jobs),
      agent_(agent),
      blobs_(blobs),
      store_(store),
      raft_(raft) {}

ClusterRuntime::~ClusterRuntime() { Stop(); }

void ClusterRuntime::SetKnown(std::vector<std::string> voters) {
  std::sort(voters.begin(), voters.end());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (voters == known_) return;
    known_ = voters;
  }
  if (!options_.peers_file.empty()) {
    Status st = WriteFileAtomic(options_.peers_file, json(voters).dump() + "\n", 0644);
    if (!st.ok()) LOG_WARN << st.message();
  }
}

void ClusterRuntime::Start() {
  if (!options_.peers_file.empty()) {
    if (auto text = ReadFile(options_.peers_file); text.ok()) {
      json j = ParseJsonBounded(*text);
      std::lock_guard<std::mutex> lock(mu_);
      if (j.is_array())
        for (const auto& v : j)
          if (v.is_string()) known_.push_back(v.get<std::string>());
    }
  }
  for (size_t i = 0; i < options_.http_threads; ++i)
    threads_.emplace_back([this] { HttpThreadMain(); });
  threads_.emplace_back([this] { HeartbeatMain(); });
  threads_.emplace_back([this] { SenderMain(); });
}

void ClusterRuntime::Stop() {
  if (stopping_.exchange(true)) return;
  cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

void ClusterRuntime::SetHead(bool head) {
  is_head_ = head;
  if (head)
    SetHeadAddress(options_.self.api_address);
  else
    SetHeadAddress("");
}

std::string ClusterRuntime::head_address() const {
  std::lock_guard<std::mutex> lock(mu_);
  return head_address_;
}

void ClusterRuntime::SetHeadAddress(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  if (address != head_address_ && !address.empty() && address != options_.self.api_address)
    LOG_INFO << "the head is at " << address;
  head_address_ = address;
}

std::map<std::string, std::string> ClusterRuntime::AuthHeaders() const {
  return {{"Authorization", "Bearer " + options_.token}};
}

void ClusterRuntime::RunOnHttpThread(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    http_work_.push_back(std::move(fn));
  }
  cv_.notify_all();
}

void ClusterRuntime::HttpThreadMain() {
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !http_work_.empty(); });
      if (stopping_) return;
      fn = std::move(http_work_.front());
      http_work_.pop_front();
    }
    fn();
  }
}

// ---- head side: RemoteNodes ----

void ClusterRuntime::Launch(const std::string& api_address, json plan,
                            std::function<void(Result<int>)> done) {
  plan["blob_source"] = options_.self.api_address;
  auto* io = &io_;
  const auto headers = AuthHeaders();
  const int planned_port = plan.value("master_port", 0);
  RunOnHttpThread([io, api_address, headers, body = plan.dump(), done, planned_port, tls = Tls()] {
    auto r = Call(api_address, "POST", "/v1/internal/launch", body, headers,
                  std::chrono::seconds(30), tls);
    Result<int> port = Status::Unavailable("no answer");
    if (!r.ok()) {
      port = r.status();
    } else if (r->status != 200) {
      json b = ParseJsonBounded(r->body);
      port = Status::Unavailable(b.is_object() ? b.value("error", r->body) : r->body);
    } else {
      json b = ParseJsonBounded(r->body);
      const json* p = b.is_object() && b.contains("master_port") ? &b["master_port"] : nullptr;
      if (p != nullptr && p->is_number_integer() && p->get<int>() > 0 && p->get<int>() < 65536) {
        port = p->get<int>();
      } else if (planned_port > 0) {
        port = planned_port;  // an older agent: it used the head's port
      } else {
        port = Status::Unavailable("the node did not say its rendezvous port (an older version?)");
      }
    }
    asio::post(*io, [done, port] { done(port); });
  });
}

void ClusterRuntime::Stop(const std::string& api_address, const std::string& job_id, int attempt) {
  const auto headers = AuthHeaders();
  const std::string body = json{{"job_id", job_id}, {"attempt", attempt}}.dump();
  RunOnHttpThread([api_address, headers, body, tls = Tls()] {
    auto r =
        Call(api_address, "POST", "/v1/internal/stop", body, headers, std::chrono::seconds(3), tls);
    if (!r.ok() || r->status != 200)
      LOG_WARN << "could not ask " << api_address << " to stop workers";
  });
}

// ---- forwarding ----

bool ClusterRuntime::Forward(const http::Request& req, const ResponderPtr& res,
                             const http::Handler& local) {
  if (is_head_) return false;
  const bool write = req.method != "GET" && req.method != "HEAD";
  const bool logs = req.path.size() > 5 && req.path.compare(req.path.size() - 5, 5, "/logs") == 0;
  // Logs live on the node that ran the rank; a follower's replica knows the job.
  if (options_.server && logs) return false;
  if (!req.header(kForwardedHeader).empty()) {
    if (options_.server && !write) return false;
    res->SendError(503, "this node is not the head and cannot forward again; retry");
    return true;
  }
  if (options_.server && !write && head_address().empty()) return false;
  auto copy = std::make_shared<http::Request>(req);
  std::map<std::string, std::string> headers = {{kForwardedHeader, "1"}};
  if (!req.header("authorization").empty()) headers["Authorization"] = req.header("authorization");
  if (!req.header("content-type").empty()) headers["Content-Type"] = req.header("content-type");
  auto* io = &io_;
  const bool voter = options_.server;
  RunOnHttpThread([this, io, headers, copy, res, local, voter, write] {
    // During a failover the head moves: look for the new one for a few seconds. A write
    // is only retried when it was never sent, so it cannot be applied twice.
    const auto deadline = SteadyClock::now() + std::chrono::seconds(5);
    Result<http::ClientResponse> r = Status::Unavailable("no head found");
    bool sent = false;
    for (;;) {
      std::string head = head_address();
      if (head.empty()) {
        head = Discover(Candidates());
        if (!head.empty() && !is_head_) SetHeadAddress(head);
      }
      if (!head.empty()) {
        std::string host;
        uint16_t port = 0;
        if (SplitAddress(head, &host, &port)) {
          sent = true;
          r = FetchUnlessBusy(host, port, copy->method, copy->target, copy->body, headers,
                              std::chrono::seconds(30), Tls());
          if (r.ok()) break;
        }
        std::lock_guard<std::mutex> lock(mu_);
        if (head_address_ == head) head_address_.clear();
      }
      if ((write && sent) || SteadyClock::now() > deadline || stopping_) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    asio::post(*io, [r = std::move(r), copy, res, local, voter, write]() {
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

std::vector<std::string> ClusterRuntime::Candidates() const {
  std::vector<std::string> candidates = options_.join;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& k : known_)
    if (std::find(candidates.begin(), candidates.end(), k) == candidates.end())
      candidates.push_back(k);
  return candidates;
}

// ---- worker events to the head ----

void ClusterRuntime::EnqueueHello(const std::string& job_id, int attempt, int rank) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(
        {{"type", "hello"}, {"job_id", job_id}, {"attempt", attempt}, {"rank", rank}});
  }
  cv_.notify_all();
}

void ClusterRuntime::EnqueueReport(const std::string& job_id, int attempt, int rank, int seq,
                                   const json& metrics, const std::string& checkpoint) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back({{"type", "report"},
                       {"job_id", job_id},
                       {"attempt", attempt},
                       {"rank", rank},
                       {"seq", seq},
                       {"metrics", metrics},
                       {"checkpoint", checkpoint}});
  }
  cv_.notify_all();
}

void ClusterRuntime::EnqueueExit(const WorkerExit& e, const std::string& log_tail) {
  json ev = {{"type", "exit"},
             {"job_id", e.job_id},
             {"attempt", e.attempt},
             {"rank", e.rank},
             {"exit_code", nullptr},
             {"signal", nullptr},
             {"done_seen", e.done_seen},
             {"done_ok", e.done_ok},
             {"done_error", e.done_error},
             {"retryable", e.retryable},
             {"stopped_by_agent", e.stopped_by_agent},
             {"log_tail", log_tail}};
  if (e.exit_code) ev["exit_code"] = *e.exit_code;
  if (e.signal) ev["signal"] = *e.signal;
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(ev));
  }
  cv_.notify_all();
}

void ClusterRuntime::SenderMain() {
  while (!stopping_) {
    std::vector<json> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(200),
                   [this] { return stopping_ || !events_.empty(); });
      if (stopping_) return;
      if (fenced_) events_.clear();  // their attempts are being stopped; the head moved on
      for (size_t i = 0; i < events_.size() && i < 64; ++i) batch.push_back(events_[i]);
    }
    if (batch.empty()) continue;
    const std::string head = head_address();
    if (head.empty() || is_head_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    json body = {{"node_id", options_.self.node_id}, {"events", batch}};
    auto r = Call(head, "POST", "/v1/internal/events", body.dump(), AuthHeaders(),
                  std::chrono::seconds(5), Tls());
    if (!r.ok() || r->status != 200) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < batch.size() && !events_.empty(); ++i) events_.pop_front();
    }
    // The head has taken the reports (and their checkpoint files): the ranks may go on.
    for (const auto& ev : batch) {
      if (ev["type"] != "report") continue;
      asio::post(io_, [this, ev] {
        agent_->Ack(ev["job_id"].get<std::string>(), ev["attempt"].get<int>(),
                    ev["rank"].get<int>(), ev["seq"].get<int>());
      });
    }
  }
}

// ---- heartbeats, discovery, fencing ----

std::vector<std::pair<std::string, int>> ClusterRuntime::LiveAttemptsFromIo() {
  auto promise = std::make_shared<std::promise<std::vector<std::pair<std::string, int>>>>();
  auto future = promise->get_future();
  asio::post(io_, [this, promise] { promise->set_value(agent_->LiveAttempts()); });
  if (future.wait_for(std::chrono::seconds(2)) != std::future_status::ready) return {};
  return future.get();
}

std::string ClusterRuntime::Discover(const std::vector<std::string>& given) {
  std::vector<std::string> candidates;
  // A voter knows the Raft leader and, from its replica, that leader's API address.
  if (raft_ != nullptr && options_.server) {
    const LeaderInfo leader = raft_->Leader();
    if (leader.id != 0) {
      if (auto api = store_->GetMeta("voter_api:" + std::to_string(leader.id)))
        candidates.push_back(*api);
    }
  }
  candidates.insert(candidates.end(), given.begin(), given.end());
  for (const auto& address : candidates) {
    if (address == options_.self.api_address) continue;
    auto r = Call(address, "GET", "/healthz", "", {}, std::chrono::milliseconds(500), Tls());
    if (!r.ok() || r->status != 200) continue;
    json b = ParseJsonBounded(r->body);
    if (b.is_object() && b.value("role", "") == "head") return address;
  }
  return "";
}

bool ClusterRuntime::HeartbeatOnce(const std::string& head) {
  NodeStatus s = options_.self;
  s.running = LiveAttemptsFromIo();
  auto r = Call(head, "POST", "/v1/internal/heartbeat", NodeStatusToJson(s).dump(), AuthHeaders(),
                std::chrono::seconds(2), Tls());
  if (!r.ok() || r->status != 200) return false;
  json b = ParseJsonBounded(r->body);
  if (!b.is_object()) return false;
  std::vector<std::string> voters;
  for (const auto& v : b.value("voters", json::array()))
    if (v.is_string()) voters.push_back(v.get<std::string>());
  if (!voters.empty()) SetKnown(std::move(voters));
  for (const auto& st : b.value("stop", json::array())) {
    if (!st.is_object()) continue;
    const std::string job = st.value("job_id", "");
    const int attempt = st.value("attempt", 0);
    LOG_WARN << "the head does not run job " << job << " attempt " << attempt
             << "; stopping its workers here";
    asio::post(io_, [this, job, attempt] { agent_->Stop(job, attempt); });
  }
  return true;
}

void ClusterRuntime::SyncBlobs(const std::string& head) {
  std::set<std::string> wanted;
  // Hashes only: reading every active job's row each second held the store lock long
  // enough to slow the voter's applies down.
  for (const auto& sha : store_->ActiveLibraryHashes())
    if (!blobs_->Has(sha)) wanted.insert(sha);
  for (const auto& sha : wanted) {
    auto r =
        Call(head, "GET", "/v1/blobs/" + sha, "", AuthHeaders(), std::chrono::seconds(60), Tls());
    if (!r.ok() || r->status != 200) continue;
    Status st = blobs_->Put(sha, r->body);  // verifies the hash
    if (!st.ok()) LOG_WARN << "library " << sha << " from the head: " << st.message();
  }
}

void ClusterRuntime::HeartbeatMain() {
  const auto fence_after = std::chrono::milliseconds(
      static_cast<int64_t>(options_.loss_timeout.count() * options_.fence_fraction));
  auto last_ok = SteadyClock::now();
  auto last_blob_sync = SteadyClock::time_point{};
  bool joined = !(options_.server && !options_.join.empty());
  while (!stopping_) {
    const auto started = SteadyClock::now();
    if (is_head_) {
      last_ok = started;
      // Remember the voters, to find the next head should this node step down.
      auto promise = std::make_shared<std::promise<std::vector<std::string>>>();
      auto future = promise->get_future();
      asio::post(io_, [this, promise] { promise->set_value(jobs_->registry().VoterAddresses()); });
      if (future.wait_for(std::chrono::seconds(1)) == std::future_status::ready)
        SetKnown(future.get());
      std::lock_guard<std::mutex> lock(mu_);
      fenced_ = false;
    } else {
      std::string head = head_address();
      if (head.empty()) {
        head = Discover(Candidates());
        if (!head.empty() && !is_head_) SetHeadAddress(head);
      }
      if (!head.empty() && !joined) {
        json body = {{"node_id", options_.self.node_id},
                     {"raft_id", options_.self.raft_id},
                     {"raft_address", raft_ != nullptr ? raft_->address() : ""}};
        auto r = Call(head, "POST", "/v1/internal/join", body.dump(), AuthHeaders(),
                      std::chrono::seconds(10), Tls());
        if (r.ok() && r->status == 200) {
          joined = true;
          LOG_INFO << "joined the cluster as a voter (raft id " << options_.self.raft_id << ")";
        } else {
          LOG_WARN << "join via " << head
                   << " failed: " << (r.ok() ? r->body : r.status().message());
        }
      }
      if (!head.empty() && joined) {
        if (HeartbeatOnce(head)) {
          last_ok = SteadyClock::now();
          std::lock_guard<std::mutex> lock(mu_);
          if (fenced_) LOG_INFO << "the head answers again";
          fenced_ = false;
        } else if (!is_head_) {
          SetHeadAddress("");
        }
      }
      if (SteadyClock::now() - last_ok > fence_after) {
        bool first = false;
        {
          std::lock_guard<std::mutex> lock(mu_);
          first = !fenced_;
          fenced_ = true;
        }
        if (first)
          LOG_WARN << "no head for " << fence_after.count() << " ms; stopping every worker here";
        asio::post(io_, [this] {
          for (const auto& [job, attempt] : agent_->LiveAttempts()) agent_->Stop(job, attempt);
        });
      }
      if (options_.server && !head.empty() && joined &&
          SteadyClock::now() - last_blob_sync > std::chrono::seconds(1)) {
        last_blob_sync = SteadyClock::now();
        SyncBlobs(head);
      }
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_until(lock, started + options_.heartbeat_interval,
                   [this] { return stopping_.load(); });
  }
}

// ---- endpoints ----

void ClusterRuntime::RegisterRoutes(http::Router& router) {
  router.Add("POST", "/v1/internal/heartbeat", [this](const http::Request& req, ResponderPtr res) {
    if (!jobs_->leader()) {
      res->SendError(503, "not the head");
      return;
    }
    NodeStatus s;
    json body = ParseJsonBounded(req.body);
    if (!NodeStatusFromJson(body, &s)) {
      res->SendError(400, "malformed heartbeat");
      return;
    }
    res->SendJson(200, jobs_->OnHeartbeat(std::move(s)));
  });

  router.Add("POST", "/v1/internal/join", [this](const http::Request& req, ResponderPtr res) {
    if (!jobs_->leader() || raft_ == nullptr) {
      res->SendError(503, "not the head");
      return;
    }
    json body = ParseJsonBounded(req.body);
    uint64_t id = 0;
    std::string address;
    try {
      id = body.at("raft_id").get<uint64_t>();
      address = body.at("raft_address").get<std::string>();
    } catch (const std::exception&) {
      res->SendError(400, "join needs raft_id and raft_address");
      return;
    }
    if (id <= 1 || address.empty()) {
      res->SendError(400, "bad raft_id or raft_address");
      return;
    }
    LOG_INFO << "adding voter " << id << " at " << address;
    auto* io = &io_;
    raft_->AddVoter(id, address, [io, res, id](Status st) {
      asio::post(*io, [res, st, id] {
        if (st.ok()) {
          res->SendJson(200, {{"raft_id", id}});
        } else {
          res->SendError(503, "could not add the voter: " + st.message());
        }
      });
    });
  });

  http::RouteOptions big;
  big.max_body_bytes = 64u << 20;
  router.Add(
      "POST", "/v1/internal/events",
      [this](const http::Request& req, ResponderPtr res) {
        if (!jobs_->leader()) {
          res->SendError(503, "not the head");
          return;
        }
        json body = ParseJsonBounded(req.body);
        if (!body.is_object() || !body.contains("events") || !body["events"].is_array()) {
          res->SendError(400, "malformed events");
          return;
        }
        for (const auto& ev : body["events"]) {
          try {
            const std::string type = ev.at("type").get<std::string>();
            const std::string job = ev.at("job_id").get<std::string>();
            const int attempt = ev.at("attempt").get<int>();
            const int rank = ev.at("rank").get<int>();
            if (type == "hello") {
              jobs_->OnWorkerHello(job, attempt, rank);
            } else if (type == "report") {
              jobs_->OnWorkerReport(job, attempt, rank, ev.at("seq").get<int>(), ev.at("metrics"),
                                    ev.at("checkpoint").get<std::string>());
            } else if (type == "exit") {
              WorkerExit e;
              e.job_id = job;
              e.attempt = attempt;
              e.rank = rank;
              if (!ev.at("exit_code").is_null()) e.exit_code = ev["exit_code"].get<int>();
              if (!ev.at("signal").is_null()) e.signal = ev["signal"].get<int>();
              e.done_seen = ev.at("done_seen").get<bool>();
              e.done_ok = ev.at("done_ok").get<bool>();
              e.done_error = ev.at("done_error").get<std::string>();
              e.retryable = ev.at("retryable").get<bool>();
              e.stopped_by_agent = ev.at("stopped_by_agent").get<bool>();
              jobs_->OnRemoteWorkerExit(e, ev.at("log_tail").get<std::string>());
            }
          } catch (const std::exception& e) {
            LOG_WARN << "malformed worker event from " << body.value("node_id", "?") << ": "
                     << e.what();
          }
        }
        res->SendJson(200, {{"ok", true}});
      },
      big);

  router.Add("POST", "/v1/internal/launch", [this](const http::Request& req, ResponderPtr res) {
    json body = ParseJsonBounded(req.body);
    if (!body.is_object()) {
      res->SendError(400, "malformed plan");
      return;
    }
    auto plan = NodeAttemptPlanFromJson(body);
    if (!plan.ok()) {
      res->SendError(400, plan.status().message());
      return;
    }
    auto launch = [this, res](NodeAttemptPlan p) {
      if (!p.library_sha256.empty()) {
        auto path = blobs_->PathOf(p.library_sha256);
        if (!path.ok()) {
          res->SendError(500, "library " + p.library_sha256 + ": " + path.status().message());
          return;
        }
        p.library_path = *path;
      }
      LOG_INFO << "job " << p.job_id << ": starting " << p.world_ranks.size()
               << " rank(s) of attempt " << p.attempt << " for the head";
      Result<int> port = agent_->Launch(p);
      if (!port.ok()) {
        res->SendError(500, port.status().message());
        return;
      }
      res->SendJson(200, {{"ok", true}, {"master_port", *port}});
    };
    if (plan->library_sha256.empty() || blobs_->Has(plan->library_sha256)) {
      launch(std::move(*plan));
      return;
    }
    // Fetch the library by hash from the head (verified by BlobStore::Put), then launch.
    const std::string source = body.value("blob_source", "");
    auto* io = &io_;
    auto* blobs = blobs_;
    const auto headers = AuthHeaders();
    auto p = std::make_shared<NodeAttemptPlan>(std::move(*plan));
    RunOnHttpThread([io, blobs, source, headers, p, res, launch, tls = Tls()] {
      auto r = Call(source, "GET", "/v1/blobs/" + p->library_sha256, "", headers,
                    std::chrono::seconds(60), tls);
      Status st = Status::Ok();
      if (!r.ok())
        st = r.status();
      else if (r->status != 200)
        st = Status::NotFound("the head has no blob " + p->library_sha256);
      else
        st = blobs->Put(p->library_sha256, r->body);
      asio::post(*io, [st, p, res, launch] {
        if (!st.ok()) {
          res->SendError(500, "cannot fetch the training library: " + st.message());
          return;
        }
        launch(*p);
      });
    });
  });

  router.Add("POST", "/v1/internal/stop", [this](const http::Request& req, ResponderPtr res) {
    json body = ParseJsonBounded(req.body);
    if (!body.is_object() || !body.contains("job_id") || !body["job_id"].is_string() ||
        !body.contains("attempt") || !body["attempt"].is_number_integer()) {
      res->SendError(400, "stop needs job_id and attempt");
      return;
    }
    agent_->Stop(body["job_id"].get<std::string>(), body["attempt"].get<int>());
    res->SendJson(200, {{"ok", true}});
  });

  router.Add("GET", "/v1/blobs/{sha}", [this](const http::Request& req, ResponderPtr res) {
    auto path = blobs_->PathOf(req.params.at("sha"));
    if (!path.ok()) {
      res->SendError(path.status().code() == Status::Code::kInvalidArgument ? 400 : 404,
                     path.status().message());
      return;
    }
    auto data = ReadFile(*path);
    if (!data.ok()) {
      res->SendError(500, data.status().message());
      return;
    }
    res->Send(200, "application/octet-stream", std::move(*data));
  });
}

}  // namespace traintl
