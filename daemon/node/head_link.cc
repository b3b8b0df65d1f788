#include "daemon/node/head_link.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <future>
#include <memory>
#include <set>

#include "common/file_util.h"
#include "common/json_depth.h"
#include "common/logging.h"
#include "daemon/consensus/raft_node.h"

namespace traintl {

namespace asio = boost::asio;
using nlohmann::json;

HeadLink::HeadLink(asio::io_context& io, HeadLinkOptions options, Agent* agent, BlobStore* blobs,
                   StateStore* store, RaftNode* raft, const PeerCalls* peers,
                   VoterAddresses voter_addresses, const Clock* clock)
    : io_(io),
      options_(std::move(options)),
      agent_(agent),
      blobs_(blobs),
      store_(store),
      raft_(raft),
      peers_(peers),
      voter_addresses_(std::move(voter_addresses)),
      clock_(clock),
      lease_(options_.lease, clock) {}

HeadLink::~HeadLink() { Stop(); }

void HeadLink::Start() {
  if (!options_.peers_file.empty()) {
    if (auto text = ReadFile(options_.peers_file); text.ok()) {
      json j = ParseJsonBounded(*text);
      std::lock_guard<std::mutex> lock(mu_);
      if (j.is_array())
        for (const auto& v : j)
          if (v.is_string()) known_.push_back(v.get<std::string>());
    }
  }
  threads_.emplace_back([this] { HeartbeatMain(); });
  threads_.emplace_back([this] { SenderMain(); });
}

void HeadLink::Stop() {
  if (stopping_.exchange(true)) return;
  cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

// ---- the head's address ----

void HeadLink::SetHead(bool head) {
  is_head_ = head;
  SetHeadAddress(head ? options_.self.api_address : "");
}

std::string HeadLink::head_address() const {
  std::lock_guard<std::mutex> lock(mu_);
  return head_address_;
}

void HeadLink::SetHeadAddress(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  if (address != head_address_ && !address.empty() && address != options_.self.api_address)
    LOG_INFO << "the head is at " << address;
  head_address_ = address;
}

std::string HeadLink::FindHead() {
  std::string head = head_address();
  if (head.empty()) {
    head = Discover(Candidates());
    if (!head.empty() && !is_head_) SetHeadAddress(head);
  }
  return head;
}

void HeadLink::ForgetHead(const std::string& head) {
  std::lock_guard<std::mutex> lock(mu_);
  if (head_address_ == head) head_address_.clear();
}

void HeadLink::SetKnown(std::vector<std::string> voters) {
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

std::vector<std::string> HeadLink::Candidates() const {
  std::vector<std::string> candidates = options_.join;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& k : known_)
    if (std::find(candidates.begin(), candidates.end(), k) == candidates.end())
      candidates.push_back(k);
  return candidates;
}

std::string HeadLink::Discover(const std::vector<std::string>& given) {
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
    auto r = peers_->Call(address, "GET", "/healthz", "", std::chrono::milliseconds(500),
                          PeerCalls::Auth::kAnonymous);
    if (!r.ok() || r->status != 200) continue;
    json b = ParseJsonBounded(r->body);
    if (b.is_object() && b.value("role", "") == "head") return address;
  }
  return "";
}

// ---- worker events to the head ----

void HeadLink::Enqueue(json event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.Push(event);
  }
  cv_.notify_all();
}

void HeadLink::EnqueueHello(const std::string& job_id, int attempt, int rank) {
  Enqueue({{"type", "hello"}, {"job_id", job_id}, {"attempt", attempt}, {"rank", rank}});
}

void HeadLink::EnqueueReport(const std::string& job_id, int attempt, int rank,
                             const events::Report& report) {
  json event = {{"type", "report"},
                {"job_id", job_id},
                {"attempt", attempt},
                {"rank", rank},
                {"seq", report.seq},
                {"metrics", report.metrics},
                {"checkpoint", report.checkpoint}};
  if (report.held) event["held"] = true;
  Enqueue(std::move(event));
}

void HeadLink::EnqueueProgress(const std::string& job_id, int attempt, int rank,
                               const events::Progress& progress) {
  Enqueue({{"type", "progress"},
           {"job_id", job_id},
           {"attempt", attempt},
           {"rank", rank},
           {"progress", events::ProgressJson(progress)}});
}

void HeadLink::EnqueueExit(const WorkerExit& e, const std::string& log_tail) {
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
  if (e.pid != 0) {
    ev["pid"] = e.pid;
    ev["launch"] = e.launch;
  }
  if (e.generation >= 0) ev["generation"] = e.generation;
  if (e.command_exit_code) ev["command_exit_code"] = *e.command_exit_code;
  if (e.command_signal) ev["command_signal"] = *e.command_signal;
  Enqueue(std::move(ev));
}

void HeadLink::SenderMain() {
  while (!stopping_) {
    std::optional<EventOutbox::Batch> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(200),
                   [this] { return stopping_ || !events_.empty(); });
      if (stopping_) return;
      // Their attempts are being stopped; the head moved on (their exits stay queued).
      if (lease_.fenced()) events_.Clear();
      batch = events_.Next();
    }
    if (!batch) continue;
    const std::string head = head_address();
    if (head.empty() || is_head_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    // partial: this node takes a 503 with "applied" (the head took that many, not the rest).
    const std::string body = "{\"node_id\":" + json(options_.self.node_id).dump() +
                             ",\"partial\":true,\"events\":" + batch->events_json + "}";
    auto r = peers_->Call(head, "POST", "/v1/internal/events", body, std::chrono::seconds(5));
    if (r.ok() && (r->status == 400 || r->status == 413)) {
      // Malformed or too large: find the event the head refuses and drop it, so that it
      // does not hold up every other event of this node (EventOutbox).
      bool dropped = false;
      std::string what;
      {
        std::lock_guard<std::mutex> lock(mu_);
        dropped = events_.Refused(*batch, &what);
      }
      if (dropped) {
        LOG_WARN << "dropping a worker event the head refuses (" << what << ", " << r->status
                 << "): " << r->body.substr(0, 200);
      }
      continue;
    }
    if (r.ok() && r->status == 503) {
      // The head took the events before one it could not take now: those leave the queue.
      const json answer = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
      const auto applied = answer.is_object() ? answer.find("applied") : answer.end();
      if (applied != answer.end() && applied->is_number_unsigned() &&
          applied->get<uint64_t>() > 0 && applied->get<uint64_t>() < batch->count) {
        std::vector<EventOutbox::Ack> acks;
        {
          std::lock_guard<std::mutex> lock(mu_);
          acks = events_.DeliveredFirst(*batch, applied->get<size_t>());
        }
        PostAcks(acks);
      }
    }
    if (!r.ok() || r->status != 200) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.Delivered(*batch);
    }
    PostAcks(batch->acks);
  }
}

void HeadLink::PostAcks(const std::vector<EventOutbox::Ack>& acks) {
  // The head has taken the reports (and their checkpoint files): the ranks may go on.
  for (const EventOutbox::Ack& ack : acks) {
    asio::post(io_, [this, ack] { agent_->Ack(ack.job_id, ack.attempt, ack.rank, ack.seq); });
  }
}

// ---- heartbeats, joining, fencing ----

std::vector<std::pair<std::string, int>> HeadLink::LiveAttemptsFromIo() {
  auto promise = std::make_shared<std::promise<std::vector<std::pair<std::string, int>>>>();
  auto future = promise->get_future();
  asio::post(io_, [this, promise] { promise->set_value(agent_->LiveAttempts()); });
  // Not an empty list on a timeout: the head would take it for "no workers run here".
  if (future.wait_for(kLiveAttemptsWait) == std::future_status::ready) last_running_ = future.get();
  return last_running_;
}

bool HeadLink::Join(const std::string& head) {
  json body = {{"node_id", options_.self.node_id},
               {"raft_id", options_.self.raft_id},
               {"raft_address", raft_ != nullptr ? raft_->address() : ""}};
  auto r = peers_->Call(head, "POST", "/v1/internal/join", body.dump(), std::chrono::seconds(10));
  if (r.ok() && r->status == 200) {
    LOG_INFO << "joined the cluster as a voter (raft id " << options_.self.raft_id << ")";
    return true;
  }
  if (r.ok() && (r->status == 401 || r->status == 403)) {
    LOG_WARN << "join via " << head << " refused: this daemon's cluster credential is not the "
             << "head's (every node needs the same --token-file, and --cluster-secret-file if "
             << "one is used)";
  } else {
    LOG_WARN << "join via " << head << " failed: " << (r.ok() ? r->body : r.status().message());
  }
  return false;
}

bool HeadLink::HeartbeatOnce(const std::string& head) {
  NodeStatus s = options_.self;
  s.running = LiveAttemptsFromIo();
  auto r = peers_->Call(head, "POST", "/v1/internal/heartbeat", NodeStatusToJson(s).dump(),
                        std::chrono::seconds(2));
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
    // Final only when the head says so (an older head does not: not final).
    const auto final_field = st.find("final");
    const bool final =
        final_field != st.end() && final_field->is_boolean() && final_field->get<bool>();
    LOG_WARN << "the head does not run job " << job << " attempt " << attempt
             << (final ? "" : " here") << "; stopping its workers here";
    asio::post(
        io_, [this, job, attempt, final] { agent_->Stop(job, attempt, /*urgent=*/false, final); });
  }
  return true;
}

void HeadLink::SyncBlobs(const std::string& head) {
  std::set<std::string> wanted;
  // Hashes only: reading every active job's row each second held the store lock long
  // enough to slow the voter's applies down.
  for (const auto& sha : store_->ActiveLibraryHashes())
    if (!blobs_->Has(sha)) wanted.insert(sha);
  for (const auto& sha : wanted) {
    auto data = peers_->GetBlob(head, sha);
    if (!data.ok()) continue;
    Status st = blobs_->Put(sha, *data);  // verifies the hash
    if (!st.ok()) LOG_WARN << "library " << sha << " from the head: " << st.message();
  }
}

void HeadLink::RememberVotersAsHead() {
  // Remember the voters, to find the next head should this node step down.
  auto promise = std::make_shared<std::promise<std::vector<std::string>>>();
  auto future = promise->get_future();
  asio::post(io_, [this, promise] { promise->set_value(voter_addresses_()); });
  if (future.wait_for(std::chrono::seconds(1)) == std::future_status::ready) SetKnown(future.get());
}

void HeadLink::HeartbeatAsAgent(bool* joined) {
  const std::string head = FindHead();
  if (!head.empty() && !*joined) *joined = Join(head);
  if (!head.empty() && *joined) {
    if (HeartbeatOnce(head)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (lease_.OnHeadAnswered()) LOG_INFO << "the head answers again";
    } else if (!is_head_) {
      SetHeadAddress("");
    }
  }
  HeadLease::Fence fence;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fence = lease_.CheckFence();
  }
  if (fence.fence) {
    if (fence.first) {
      LOG_WARN << "no head for " << lease_.fence_after().count()
               << " ms; stopping every worker here";
    }
    asio::post(io_, [this] {
      for (const auto& [job, attempt] : agent_->LiveAttempts())
        agent_->Stop(job, attempt, /*urgent=*/false, /*final=*/false);
    });
  }
  if (options_.server && !head.empty() && *joined) {
    bool sync = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      sync = lease_.TakeBlobSync();
    }
    if (sync) SyncBlobs(head);
  }
}

void HeadLink::HeartbeatMain() {
  {
    // The silence counts from now, as if a head had just answered.
    std::lock_guard<std::mutex> lock(mu_);
    lease_.OnHeadAnswered();
  }
  bool joined = !(options_.server && !options_.join.empty());
  while (!stopping_) {
    const auto started = clock_->Now();
    if (is_head_) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        lease_.OnHeadAnswered();
      }
      RememberVotersAsHead();
    } else {
      HeartbeatAsAgent(&joined);
      // Periodic work of the node, on its io thread, head or none (the head's tick does it
      // on the head's node).
      asio::post(io_, [this] { agent_->SweepTrackers(); });
    }
    // The wait itself is on real time; only its length comes from the clock.
    std::unique_lock<std::mutex> lock(mu_);
    const auto wait = lease_.NextHeartbeat(started) - clock_->Now();
    cv_.wait_for(lock, wait, [this] { return stopping_.load(); });
  }
}

}  // namespace traintl
