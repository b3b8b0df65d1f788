#include "daemon/node/rabit_tracker.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <set>
#include <sstream>
#include <system_error>

#include "common/logging.h"

namespace traintl {

namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr int32_t kMagic = 0xff99;
// Limits that keep a garbage client from making the tracker allocate without bound. A
// print message is a line of training progress; task ids and commands are short.
constexpr int32_t kMaxString = 1 << 20;
constexpr size_t kMaxBuffered = 4 << 20;
// A connection holding more than this counts the tracker's buffers (FitsBufferBudget).
constexpr size_t kCountBufferedAbove = 64 << 10;
constexpr int kMaxWorldSize = 1 << 16;
// What the tracker has sent a connection and the peer has not read yet. A negotiation
// round is a few dozen bytes per peer to connect to; a client that reads nothing while it
// keeps negotiating would otherwise grow the daemon's memory without bound.
constexpr size_t kMaxUnsent = 64 << 10;
// Rounds of the good-set negotiation one worker may take (each after a failed connect to a
// peer), and how long its whole negotiation may take, in io_timeouts: the negotiations run
// one at a time, so one that never ends would hold up every other worker.
constexpr int kMaxNegotiationRounds = 64;
constexpr int kNegotiationTimeouts = 4;
// A print is a line of training progress (XGBoost's evaluation lines): longer ones are cut.
constexpr size_t kMaxPrintBytes = 4096;
constexpr size_t kMaxConnections = 4096;
constexpr int kListenBacklog = 256;
// After accept(2) fails for want of descriptors the listener stays readable; polling it
// again at once would spin.
constexpr std::chrono::milliseconds kAcceptPause{100};

// The reference's _get_neighbor: the heap-ordered binary tree, parent first.
std::vector<int> TreeNeighbours(int rank, int n) {
  std::vector<int> out;
  const int r = rank + 1;
  if (r > 1) out.push_back(r / 2 - 1);
  if (r * 2 - 1 < n) out.push_back(r * 2 - 1);
  if (r * 2 < n) out.push_back(r * 2);
  return out;
}

// The reference's find_share_ring: `rank`, then the ring through each child's subtree,
// the last child's reversed. The reference iterates the children as a Python set; for
// the two ints c and c + 1 (the most a node has) CPython's 8-slot table yields them by
// slot, c & 7, so c + 1 comes first when it lands on slot 0.
void ShareRing(const std::vector<std::vector<int>>& tree, const std::vector<int>& parent, int rank,
               std::vector<int>* out) {
  std::vector<int> children;
  for (int v : tree[rank]) {
    if (v != parent[rank]) children.push_back(v);
  }
  std::stable_sort(children.begin(), children.end(),
                   [](int a, int b) { return (a & 7) < (b & 7); });
  out->push_back(rank);
  for (size_t i = 0; i < children.size(); ++i) {
    std::vector<int> sub;
    ShareRing(tree, parent, children[i], &sub);
    if (i + 1 == children.size()) std::reverse(sub.begin(), sub.end());
    out->insert(out->end(), sub.begin(), sub.end());
  }
}

// A task id that names a rank: decimal digits only, value in [0, n).
bool TaskIdRank(const std::string& task_id, int n, int* rank) {
  if (task_id.empty() || task_id.size() > 9) return false;
  int value = 0;
  for (char ch : task_id) {
    if (ch < '0' || ch > '9') return false;
    value = value * 10 + (ch - '0');
  }
  if (value >= n) return false;
  *rank = value;
  return true;
}

std::string Strip(const std::string& s) {
  const char* kSpace = " \t\r\n\v\f";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(kSpace) - begin + 1);
}

// The numeric address of a peer. An IPv4 peer of a dual-stack listener is written as
// plain IPv4: workers are told this address to connect to each other, and their own
// listeners may be IPv4 only.
std::string PeerHost(const sockaddr_storage& addr) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
  } else if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
      inet_ntop(AF_INET, &in6->sin6_addr.s6_addr[12], buf, sizeof(buf));
    } else {
      inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
    }
  }
  return buf;
}

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

std::string RankList(const std::set<int>& ranks) {
  std::ostringstream os;
  os << "{";
  for (int r : ranks) os << (r == *ranks.begin() ? "" : ", ") << r;
  os << "}";
  return os.str();
}

}  // namespace

RabitLinkMap ComputeRabitLinkMap(int num_workers) {
  const int n = std::max(num_workers, 1);
  std::vector<std::vector<int>> tree(n);
  std::vector<int> parent(n);
  for (int r = 0; r < n; ++r) {
    tree[r] = TreeNeighbours(r, n);
    parent[r] = (r + 1) / 2 - 1;
  }
  std::vector<int> ring;  // the ring, from rank 0
  ShareRing(tree, parent, 0, &ring);
  // get_link_map relabels the nodes in ring order, so that the ring becomes 0, 1, ...
  std::vector<int> relabel(n);
  for (int k = 0; k < n; ++k) relabel[ring[k]] = k;

  RabitLinkMap map;
  map.tree.resize(n);
  map.parent.resize(n);
  map.ring.resize(n);
  for (int old = 0; old < n; ++old) {
    const int r = relabel[old];
    for (int v : tree[old]) map.tree[r].push_back(relabel[v]);
    map.parent[r] = parent[old] < 0 ? -1 : relabel[parent[old]];
    map.ring[r] = {(r + n - 1) % n, (r + 1) % n};
  }
  return map;
}

// Every connection and the protocol state. Headers are parsed on all connections as their
// bytes come; the complete ones queue up in ready_ and are handled one at a time, each
// negotiation to its end before the next command, as the reference's accept loop does.
//
// Thread-safety: not thread-safe; used by the tracker's thread only.
class RabitTracker::Loop {
 public:
  Loop(RabitTrackerOptions options, int listen_fd, int wake_fd)
      : options_(std::move(options)),
        wake_fd_(wake_fd),
        listen_fd_(listen_fd),
        num_workers_(options_.num_workers) {}
  ~Loop() { CloseAll(); }

  // Serves until every rank has shut down (true) or wake_fd_ is signalled (false); closes
  // the listener and every connection before it returns.
  bool Run();

 private:
  enum class Stage {
    kHeader,       // reading magic, rank, world size, task id, command (, message)
    kReady,        // header complete, queued in ready_
    kPending,      // start without a rank: waits for the batch assignment
    kQueued,       // has a rank, waits in negotiate_ for its turn
    kNegotiating,  // the one connection in the link negotiation
    kClosing,      // done: closed once its output is sent
  };
  enum class Step { kGoodSet, kErrors, kPort };  // what the negotiation waits for

  struct Conn {
    uint64_t id = 0;
    int fd = -1;
    std::string host;
    Stage stage = Stage::kHeader;
    bool dead = false;  // dropped; erased by Sweep()
    bool eof = false;   // the peer closed its side or reading failed
    std::string in;     // received; parsed up to in_pos
    size_t in_pos = 0;  // parsing takes from here, ReadFrom drops what is before it
    std::string out;    // not sent yet
    // When waiting for the peer's next bytes ends (io_timeout); max() while it is the
    // peer that waits for the tracker.
    SteadyClock::time_point deadline = SteadyClock::time_point::max();

    // The header.
    int header_field = 0;  // the next one: magic, rank, world size, task id, cmd, message
    int32_t rank = -1;
    int32_t world_size = -1;
    std::string task_id;
    std::string cmd;
    std::string message;

    // The negotiation.
    int assigned = -1;
    Step step = Step::kGoodSet;
    std::set<int> links;       // tree neighbours, ring prev and next
    std::vector<int> connect;  // peers this one was told to connect to
    int to_accept = 0;         // peers that will connect to this one
    int rounds = 0;            // good-set rounds so far
    SteadyClock::time_point negotiation_deadline = SteadyClock::time_point::max();
  };

  // A worker listening for peers that have still to connect to it (wait_conn).
  struct Listening {
    std::string host;
    int port = 0;
    int wait_accept = 0;
  };

  Conn* Find(uint64_t id);
  std::string Describe(const Conn& c) const;
  void Drop(Conn* c, LogLevel level, const std::string& why);
  // Whether all connections' buffers together are within max_buffered_total; when not,
  // drops the connection holding the most. False when that was `c`.
  bool FitsBufferBudget(Conn* c);
  void CloseWhenSent(Conn* c);
  void Sweep();
  void CloseAll();

  void AcceptAll();
  void ReadFrom(Conn* c);
  void Flush(Conn* c);
  void Send(Conn* c, int32_t v);
  void Send(Conn* c, const std::string& s);
  // Unparsed bytes of `c`.
  static size_t Available(const Conn& c) { return c.in.size() - c.in_pos; }
  bool TakeInt(Conn* c, int32_t* v);
  // False when the string has not fully arrived, or is malformed (then `c` is dropped).
  bool TakeString(Conn* c, std::string* s);
  void Progress(Conn* c);
  void ParseHeader(Conn* c);
  void HeaderDone(Conn* c);

  // Handles queued commands while no negotiation is under way.
  void Advance();
  void HandleCommand(Conn* c);
  void HandleShutdown(Conn* c);
  // The rank `c` gets at once; -1: it waits for the batch; -2: `c` was dropped.
  int DecideRank(Conn* c);
  void MaybeAssignBatch();
  // Puts `c` (its rank assigned) in line for its negotiation.
  void Queue(Conn* c);
  void BeginNegotiation(Conn* c);
  void Negotiate(Conn* c);
  bool Finished() const { return static_cast<int>(shutdown_.size()) == num_workers_; }

  // Constant after construction.
  const RabitTrackerOptions options_;
  const int wake_fd_;  // not owned

  int listen_fd_;                   // owned; -1 once closed
  std::map<uint64_t, Conn> conns_;  // by id, which follows the accept order
  uint64_t next_id_ = 1;
  SteadyClock::time_point accept_paused_until_{};

  // The reference's accept_workers state.
  const int num_workers_;  // the job's world size (options_.num_workers)
  bool started_ = false;   // the first start fixed the world size and link map
  RabitLinkMap map_;
  std::deque<int> todo_;                // ranks not assigned yet, ascending
  std::map<std::string, int> job_map_;  // task id -> rank
  std::set<int> shutdown_;              // ranks that sent shutdown
  std::set<int> negotiated_;            // ranks whose negotiation completed
  std::map<int, Listening> wait_conn_;  // by rank
  std::vector<uint64_t> pending_;       // waiting for the batch assignment
  std::deque<uint64_t> negotiate_;      // ranked, waiting for their negotiation
  std::deque<uint64_t> ready_;          // complete headers, in completion order
  uint64_t active_ = 0;                 // the negotiating connection; 0: none
  bool all_started_logged_ = false;
};

RabitTracker::Loop::Conn* RabitTracker::Loop::Find(uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second.dead) return nullptr;
  return &it->second;
}

std::string RabitTracker::Loop::Describe(const Conn& c) const {
  std::ostringstream os;
  os << "connection " << c.id << " from " << c.host;
  if (c.header_field > 3) os << " (task " << c.task_id;
  if (c.assigned >= 0) {
    os << ", rank " << c.assigned;
  } else if (c.header_field > 3 && c.rank >= 0) {
    os << ", rank " << c.rank;
  }
  if (c.header_field > 3) os << ")";
  return os.str();
}

bool RabitTracker::Loop::FitsBufferBudget(Conn* c) {
  size_t total = 0;
  Conn* largest = c;
  for (auto& [id, other] : conns_) {
    if (other.dead) continue;
    total += other.in.size();
    if (other.in.size() > largest->in.size()) largest = &other;
  }
  if (total <= options_.max_buffered_total) return true;
  Drop(largest, LogLevel::kWarning,
       "held the most bytes (" + std::to_string(largest->in.size()) +
           ") when all connections together held more than " +
           std::to_string(options_.max_buffered_total));
  return largest != c;
}

void RabitTracker::Loop::Drop(Conn* c, LogLevel level, const std::string& why) {
  if (c->dead) return;
  if (level >= GetLogLevel()) {
    LogMessage(level).stream() << "rabit tracker: dropped " << Describe(*c) << ": " << why;
  }
  // A protocol error of a worker (a rank asked for twice, another world size): the job's
  // own log says why its collective failed. Not what a stray client's garbage causes.
  if (level >= LogLevel::kError && c->header_field > 4 && options_.on_error) {
    try {
      options_.on_error("the XGBoost tracker dropped " + Describe(*c) + ": " + why);
    } catch (const std::exception& e) {
      LOG_ERROR << "rabit tracker: on_error threw: " << e.what();
    }
  }
  c->dead = true;
  ::close(c->fd);
  c->fd = -1;
  pending_.erase(std::remove(pending_.begin(), pending_.end(), c->id), pending_.end());
  if (active_ == c->id) active_ = 0;
}

void RabitTracker::Loop::CloseWhenSent(Conn* c) {
  c->stage = Stage::kClosing;
  c->deadline = SteadyClock::now() + options_.io_timeout;
  Flush(c);
}

void RabitTracker::Loop::Sweep() {
  for (auto it = conns_.begin(); it != conns_.end();) {
    Conn& c = it->second;
    if (!c.dead && c.stage == Stage::kClosing && c.out.empty()) {
      ::close(c.fd);
      c.dead = true;
    }
    it = c.dead ? conns_.erase(it) : std::next(it);
  }
}

void RabitTracker::Loop::CloseAll() {
  for (auto& [id, c] : conns_) {
    if (!c.dead) ::close(c.fd);
  }
  conns_.clear();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
}

void RabitTracker::Loop::AcceptAll() {
  while (true) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        LOG_WARN << "rabit tracker: " << Errno("accept");
        accept_paused_until_ = SteadyClock::now() + kAcceptPause;
      }
      return;
    }
    if (conns_.size() >= kMaxConnections) {
      LOG_WARN << "rabit tracker: refused a connection from " << PeerHost(addr) << ": "
               << conns_.size() << " connections are open already";
      ::close(fd);
      continue;
    }
    // The tracker's messages are a few small writes each waiting for an answer.
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const uint64_t id = next_id_++;
    Conn& c = conns_[id];
    c.id = id;
    c.fd = fd;
    c.host = PeerHost(addr);
    c.deadline = SteadyClock::now() + options_.io_timeout;
    LOG_DEBUG << "rabit tracker: " << Describe(c) << " accepted";
  }
}

void RabitTracker::Loop::ReadFrom(Conn* c) {
  // Parsing only moves in_pos: what it took goes here, once per read, not per field.
  if (c->in_pos > 0) {
    c->in.erase(0, c->in_pos);
    c->in_pos = 0;
  }
  char buf[64 * 1024];
  while (!c->eof) {
    const ssize_t n = ::recv(c->fd, buf, sizeof(buf), 0);
    if (n > 0) {
      c->in.append(buf, static_cast<size_t>(n));
      if (c->in.size() > kMaxBuffered) {
        Drop(c, LogLevel::kWarning,
             "sent more than " + std::to_string(kMaxBuffered) +
                 " bytes the protocol has no place for");
        return;
      }
      // Counted only when this one holds much (never for a well-behaved worker).
      if (c->in.size() > kCountBufferedAbove && !FitsBufferBudget(c)) return;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n < 0) LOG_DEBUG << "rabit tracker: " << Describe(*c) << ": " << Errno("recv");
    c->eof = true;
  }
}

void RabitTracker::Loop::Flush(Conn* c) {
  while (!c->dead && !c->out.empty()) {
    const ssize_t n = ::send(c->fd, c->out.data(), c->out.size(), MSG_NOSIGNAL);
    if (n >= 0) {
      c->out.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    Drop(c, LogLevel::kWarning, Errno("send"));
  }
  if (!c->dead && c->out.size() > kMaxUnsent) {
    Drop(c, LogLevel::kWarning,
         "does not read what the tracker sends (" + std::to_string(c->out.size()) +
             " bytes unsent)");
  }
}

void RabitTracker::Loop::Send(Conn* c, int32_t v) {
  c->out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

void RabitTracker::Loop::Send(Conn* c, const std::string& s) {
  Send(c, static_cast<int32_t>(s.size()));
  c->out.append(s);
}

bool RabitTracker::Loop::TakeInt(Conn* c, int32_t* v) {
  if (Available(*c) < sizeof(*v)) return false;
  std::memcpy(v, c->in.data() + c->in_pos, sizeof(*v));
  c->in_pos += sizeof(*v);
  return true;
}

bool RabitTracker::Loop::TakeString(Conn* c, std::string* s) {
  int32_t len = 0;
  if (Available(*c) < sizeof(len)) return false;
  std::memcpy(&len, c->in.data() + c->in_pos, sizeof(len));
  if (len < 0 || len > kMaxString) {
    Drop(c, LogLevel::kWarning, "a string of length " + std::to_string(len));
    return false;
  }
  if (Available(*c) < sizeof(len) + static_cast<size_t>(len)) return false;
  s->assign(c->in, c->in_pos + sizeof(len), static_cast<size_t>(len));
  c->in_pos += sizeof(len) + static_cast<size_t>(len);
  return true;
}

// What the arrival of bytes, or of the end of the stream, means in the connection's stage.
void RabitTracker::Loop::Progress(Conn* c) {
  switch (c->stage) {
    case Stage::kHeader:
      ParseHeader(c);
      if (c->dead) return;
      if (c->stage == Stage::kHeader) {
        if (c->eof) {
          Drop(c, LogLevel::kWarning,
               "closed mid-handshake (at header field " + std::to_string(c->header_field) + ")");
        }
        return;
      }
      [[fallthrough]];
    case Stage::kReady:
      // A print or a shutdown is complete with its header; a start still needs the peer.
      if (c->eof && c->cmd != "print" && c->cmd != "shutdown") {
        Drop(c, LogLevel::kWarning, "closed before it was given a rank");
      }
      return;
    case Stage::kPending:
    case Stage::kQueued:
      // Bytes stay buffered for the negotiation, as they would in the reference's socket.
      if (c->eof) Drop(c, LogLevel::kWarning, "closed before its links were negotiated");
      return;
    case Stage::kNegotiating:
      Negotiate(c);
      return;
    case Stage::kClosing:
      c->in.clear();
      c->in_pos = 0;
      return;
  }
}

void RabitTracker::Loop::ParseHeader(Conn* c) {
  while (!c->dead && c->stage == Stage::kHeader) {
    switch (c->header_field) {
      case 0: {
        int32_t magic = 0;
        if (!TakeInt(c, &magic)) return;
        if (magic != kMagic) {
          std::ostringstream os;
          os << "invalid magic number 0x" << std::hex << static_cast<uint32_t>(magic);
          Drop(c, LogLevel::kWarning, os.str());
          return;
        }
        Send(c, kMagic);
        Flush(c);
        break;
      }
      case 1:
        if (!TakeInt(c, &c->rank)) return;
        break;
      case 2:
        if (!TakeInt(c, &c->world_size)) return;
        break;
      case 3:
        if (!TakeString(c, &c->task_id)) return;
        break;
      case 4:
        if (!TakeString(c, &c->cmd)) return;
        if (c->cmd != "start" && c->cmd != "recover" && c->cmd != "print" && c->cmd != "shutdown") {
          Drop(c, LogLevel::kError, "unknown command \"" + c->cmd.substr(0, 64) + "\"");
          return;
        }
        if (c->cmd != "print") HeaderDone(c);  // else its message follows
        break;
      case 5:
        if (!TakeString(c, &c->message)) return;
        HeaderDone(c);
        break;
    }
    ++c->header_field;
  }
}

void RabitTracker::Loop::HeaderDone(Conn* c) {
  c->stage = Stage::kReady;
  c->deadline = SteadyClock::time_point::max();
  ready_.push_back(c->id);
  LOG_DEBUG << "rabit tracker: " << Describe(*c) << " sent " << c->cmd;
}

void RabitTracker::Loop::Advance() {
  // Every complete header is handled before the next negotiation begins, so that a later
  // connection for a rank replaces one still waiting (Queue) instead of each taking its
  // turn (a silent one holds the line for io_timeout).
  while (active_ == 0) {
    if (!ready_.empty()) {
      Conn* c = Find(ready_.front());
      ready_.pop_front();
      if (c != nullptr) HandleCommand(c);
    } else if (!negotiate_.empty()) {
      Conn* c = Find(negotiate_.front());
      negotiate_.pop_front();
      if (c != nullptr) BeginNegotiation(c);
    } else {
      return;
    }
  }
}

void RabitTracker::Loop::HandleCommand(Conn* c) {
  if (c->cmd == "print") {
    std::string message = Strip(c->message);
    if (message.size() > kMaxPrintBytes) {
      message.resize(kMaxPrintBytes);
      message += "... (cut at " + std::to_string(kMaxPrintBytes) + " bytes)";
    }
    if (options_.on_print) {
      try {
        options_.on_print(message);
      } catch (const std::exception& e) {
        LOG_ERROR << "rabit tracker: on_print threw: " << e.what();
      }
    } else {
      LOG_INFO << "rabit: " << message;
    }
    CloseWhenSent(c);
    return;
  }
  if (c->cmd == "shutdown") {
    HandleShutdown(c);
    return;
  }
  // start or recover.
  if (c->eof) {
    Drop(c, LogLevel::kWarning, "closed before it was given a rank");
    return;
  }
  // The job's world size is the plan's: a start that says another (the reference lets the
  // first start set it) would leave the real workers without ranks, or the tracker never
  // done.
  if (c->world_size != -1 && c->world_size != num_workers_) {
    Drop(c, LogLevel::kError,
         "world size " + std::to_string(c->world_size) + " differs from the job's " +
             std::to_string(num_workers_));
    return;
  }
  if (!started_) {
    if (c->cmd != "start") {
      Drop(c, LogLevel::kError, "recover before any worker started");
      return;
    }
    map_ = ComputeRabitLinkMap(num_workers_);
    for (int r = 0; r < num_workers_; ++r) todo_.push_back(r);
    started_ = true;
  }
  if (c->cmd == "recover" && c->rank < 0) {
    Drop(c, LogLevel::kError, "recover without a rank");
    return;
  }

  const int rank = DecideRank(c);
  if (rank == -2) return;
  if (rank == -1) {
    if (todo_.empty()) {
      Drop(c, LogLevel::kError,
           "no rank is left to assign: all " + std::to_string(num_workers_) + " are taken");
      return;
    }
    c->stage = Stage::kPending;
    pending_.push_back(c->id);
  } else {
    c->assigned = rank;
    Queue(c);
  }
  MaybeAssignBatch();
  if (todo_.empty() && !all_started_logged_) {
    all_started_logged_ = true;
    LOG_INFO << "rabit tracker: all " << num_workers_ << " workers have their ranks";
  }
}

void RabitTracker::Loop::HandleShutdown(Conn* c) {
  if (c->rank < 0 || c->rank >= num_workers_) {
    Drop(c, LogLevel::kError,
         "shutdown of rank " + std::to_string(c->rank) + ", not in [0, " +
             std::to_string(num_workers_) + ")");
    return;
  }
  if (shutdown_.count(c->rank) != 0) {
    Drop(c, LogLevel::kError, "rank " + std::to_string(c->rank) + " sent shutdown twice");
    return;
  }
  if (negotiated_.count(c->rank) == 0) {
    // Else anyone reaching the port could end the tracker before the workers start.
    Drop(c, LogLevel::kError,
         "shutdown of rank " + std::to_string(c->rank) + ", which never got its links");
    return;
  }
  auto waiting = wait_conn_.find(c->rank);
  if (waiting != wait_conn_.end()) {
    Drop(c, LogLevel::kError,
         "rank " + std::to_string(c->rank) + " sent shutdown while " +
             std::to_string(waiting->second.wait_accept) + " peers have still to connect to it");
    return;
  }
  shutdown_.insert(c->rank);
  LOG_DEBUG << "rabit tracker: rank " << c->rank << " shut down (" << shutdown_.size() << " of "
            << num_workers_ << ")";
  CloseWhenSent(c);
}

int RabitTracker::Loop::DecideRank(Conn* c) {
  if (c->rank >= 0) {
    if (c->rank >= num_workers_) {
      Drop(c, LogLevel::kError,
           "rank " + std::to_string(c->rank) + " is not in [0, " + std::to_string(num_workers_) +
               ")");
      return -2;
    }
    if (c->cmd == "start" && negotiated_.count(c->rank) != 0) {
      // A worker that lost its links says recover; a start for a rank that has them
      // would take the rank (and its listening port) from the worker that holds it.
      Drop(c, LogLevel::kError,
           "start for rank " + std::to_string(c->rank) + ", which a worker holds already");
      return -2;
    }
    // Unlike the reference, the batch assignment cannot hand this rank out again.
    todo_.erase(std::remove(todo_.begin(), todo_.end(), c->rank), todo_.end());
    return c->rank;
  }
  if (c->task_id == "NULL") return -1;
  auto known = job_map_.find(c->task_id);
  if (known != job_map_.end()) return known->second;
  int rank = -1;
  if (!TaskIdRank(c->task_id, num_workers_, &rank)) return -1;
  auto todo = std::find(todo_.begin(), todo_.end(), rank);
  if (todo == todo_.end()) {
    std::string holder = "a worker without a task id";
    for (const auto& [task, r] : job_map_) {
      if (r == rank) holder = "task " + task;
    }
    Drop(c, LogLevel::kError,
         "task id " + c->task_id + " asks for rank " + std::to_string(rank) +
             ", which is assigned to " + holder + " already");
    return -2;
  }
  todo_.erase(todo);
  job_map_[c->task_id] = rank;
  return rank;
}

void RabitTracker::Loop::MaybeAssignBatch() {
  if (pending_.empty() || pending_.size() < todo_.size()) return;
  std::vector<Conn*> batch;
  for (uint64_t id : pending_) batch.push_back(Find(id));
  pending_.clear();
  const bool by_task = options_.sort_by == RabitTrackerOptions::SortBy::kTask;
  std::stable_sort(batch.begin(), batch.end(), [by_task](const Conn* a, const Conn* b) {
    return by_task ? a->task_id < b->task_id : a->host < b->host;
  });
  for (Conn* c : batch) {
    if (todo_.empty()) {
      // Only when explicit ranks took the last ones while this batch filled up.
      Drop(c, LogLevel::kError,
           "no rank is left to assign: all " + std::to_string(num_workers_) + " are taken");
      continue;
    }
    c->assigned = todo_.front();
    todo_.pop_front();
    if (c->task_id != "NULL") job_map_[c->task_id] = c->assigned;
    Queue(c);
  }
}

void RabitTracker::Loop::Queue(Conn* c) {
  // One waits per rank: the latest start or recover for it (a worker that retries has
  // given up on its earlier connection), so that no number of connections for a rank can
  // make the others wait for their turn for long.
  for (uint64_t id : negotiate_) {
    Conn* q = Find(id);
    if (q != nullptr && q->assigned == c->assigned) {
      Drop(q, LogLevel::kWarning,
           "superseded by a later connection for rank " + std::to_string(c->assigned));
    }
  }
  c->stage = Stage::kQueued;
  negotiate_.push_back(c->id);
}

void RabitTracker::Loop::BeginNegotiation(Conn* c) {
  const int rank = c->assigned;
  active_ = c->id;
  c->stage = Stage::kNegotiating;
  c->step = Step::kGoodSet;
  c->links = std::set<int>(map_.tree[rank].begin(), map_.tree[rank].end());
  Send(c, rank);
  Send(c, map_.parent[rank]);
  Send(c, num_workers_);
  Send(c, static_cast<int32_t>(c->links.size()));
  for (int r : c->links) Send(c, r);
  for (int r : {map_.ring[rank].first, map_.ring[rank].second}) {
    if (r != -1 && r != rank) {
      c->links.insert(r);
      Send(c, r);
    } else {
      Send(c, -1);
    }
  }
  c->deadline = SteadyClock::now() + options_.io_timeout;
  c->negotiation_deadline = SteadyClock::now() + kNegotiationTimeouts * options_.io_timeout;
  LOG_DEBUG << "rabit tracker: " << Describe(*c) << " gets rank " << rank;
  Flush(c);
  Negotiate(c);
}

void RabitTracker::Loop::Negotiate(Conn* c) {
  while (!c->dead && c->stage == Stage::kNegotiating) {
    if (c->step == Step::kGoodSet) {
      int32_t ngood = 0;
      if (Available(*c) < sizeof(ngood)) break;
      std::memcpy(&ngood, c->in.data() + c->in_pos, sizeof(ngood));
      if (ngood < 0 || ngood > num_workers_) {
        Drop(c, LogLevel::kError, "reports " + std::to_string(ngood) + " good links");
        return;
      }
      if (Available(*c) < sizeof(ngood) * (1 + static_cast<size_t>(ngood))) break;
      TakeInt(c, &ngood);
      std::set<int> good;
      for (int i = 0; i < ngood; ++i) {
        int32_t r = 0;
        TakeInt(c, &r);
        good.insert(r);
      }
      std::set<int> bad;
      for (int r : c->links) {
        if (good.count(r) == 0) bad.insert(r);
      }
      if (good.size() + bad.size() != c->links.size()) {
        Drop(c, LogLevel::kError,
             "reports good links " + RankList(good) + ", not a subset of its links " +
                 RankList(c->links));
        return;
      }
      c->connect.clear();
      for (int r : bad) {
        if (wait_conn_.count(r) != 0) c->connect.push_back(r);
      }
      c->to_accept = static_cast<int>(bad.size() - c->connect.size());
      Send(c, static_cast<int32_t>(c->connect.size()));
      Send(c, c->to_accept);
      for (int r : c->connect) {
        const Listening& peer = wait_conn_[r];
        Send(c, peer.host);
        Send(c, peer.port);
        Send(c, r);
      }
      c->step = Step::kErrors;
    } else if (c->step == Step::kErrors) {
      int32_t errors = 0;
      if (!TakeInt(c, &errors)) break;
      if (errors != 0) {
        if (++c->rounds >= kMaxNegotiationRounds) {
          Drop(c, LogLevel::kError,
               "failed to connect to its peers " + std::to_string(c->rounds) + " times");
          return;
        }
        LOG_DEBUG << "rabit tracker: " << Describe(*c) << " failed " << errors
                  << " connects; negotiating again";
      }
      c->step = errors != 0 ? Step::kGoodSet : Step::kPort;
    } else {
      int32_t port = 0;
      if (!TakeInt(c, &port)) break;
      if (port <= 0 || port > 65535) {
        Drop(c, LogLevel::kError, "listens on port " + std::to_string(port));
        return;
      }
      for (int r : c->connect) {
        auto it = wait_conn_.find(r);
        if (it != wait_conn_.end() && --it->second.wait_accept <= 0) wait_conn_.erase(it);
      }
      // The reference leaves an earlier registration of this rank in place when nobody
      // is to connect to it; a stale port is of no use to anyone.
      wait_conn_.erase(c->assigned);
      if (c->to_accept > 0) wait_conn_[c->assigned] = Listening{c->host, port, c->to_accept};
      negotiated_.insert(c->assigned);
      LOG_DEBUG << "rabit tracker: " << Describe(*c) << " listens on port " << port
                << ", connected to " << c->connect.size() << " peers, awaits " << c->to_accept;
      active_ = 0;
      CloseWhenSent(c);
      return;
    }
    c->deadline = std::min(SteadyClock::now() + options_.io_timeout, c->negotiation_deadline);
    Flush(c);
  }
  if (!c->dead && c->stage == Stage::kNegotiating && c->eof) {
    Drop(c, LogLevel::kWarning, "closed mid-negotiation");
  }
}

bool RabitTracker::Loop::Run() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;  // ids[i] for fds[i + 2]
  while (true) {
    Advance();
    Sweep();
    if (Finished()) {
      LOG_INFO << "rabit tracker: all " << num_workers_ << " workers shut down";
      CloseAll();
      return true;
    }

    const SteadyClock::time_point now = SteadyClock::now();
    fds.clear();
    ids.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    const bool accepting = now >= accept_paused_until_;
    fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
    SteadyClock::time_point wake =
        accepting ? SteadyClock::time_point::max() : accept_paused_until_;
    for (auto& [id, c] : conns_) {
      short events = c.eof ? 0 : POLLIN;
      if (!c.out.empty()) events |= POLLOUT;
      // A closed peer's POLLHUP would be reported at once on every round: nothing more is
      // to come from it, so it is not polled (its deadline still counts).
      fds.push_back({events != 0 ? c.fd : -1, events, 0});
      ids.push_back(id);
      wake = std::min(wake, c.deadline);
    }
    int timeout_ms = -1;
    if (wake != SteadyClock::time_point::max()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(wake - now).count();
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left, 0, 60 * 60 * 1000));
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0) {
      if (errno == EINTR) continue;
      LOG_ERROR << "rabit tracker: " << Errno("poll") << "; stopping";
      CloseAll();
      return false;
    }
    if (fds[0].revents != 0) {
      CloseAll();
      return false;
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      const short revents = fds[i + 2].revents;
      Conn* c = Find(ids[i]);
      if (c == nullptr || revents == 0) continue;
      if (revents & POLLOUT) Flush(c);
      if (c->dead) continue;
      if (revents & (POLLIN | POLLHUP | POLLERR)) {
        ReadFrom(c);
        if (!c->dead) Progress(c);
      }
    }
    if (fds[1].revents != 0) AcceptAll();

    const SteadyClock::time_point after = SteadyClock::now();
    for (auto& [id, c] : conns_) {
      if (c.dead || c.deadline > after) continue;
      if (c.stage == Stage::kClosing) {
        c.dead = true;  // its peer does not read what is left; nothing more is due
        ::close(c.fd);
        continue;
      }
      Drop(&c, LogLevel::kWarning,
           c.negotiation_deadline <= after
               ? "its negotiation took more than " +
                     std::to_string(kNegotiationTimeouts * options_.io_timeout.count()) + " ms"
               : "silent for " + std::to_string(options_.io_timeout.count()) + " ms mid-handshake");
    }
  }
}

Result<std::unique_ptr<RabitTracker>> RabitTracker::Start(RabitTrackerOptions options) {
  if (options.num_workers < 1 || options.num_workers > kMaxWorldSize) {
    return Status::InvalidArgument("rabit tracker: num_workers must be in [1, " +
                                   std::to_string(kMaxWorldSize) + "], not " +
                                   std::to_string(options.num_workers));
  }
  if (options.io_timeout.count() <= 0) {
    return Status::InvalidArgument("rabit tracker: io_timeout must be positive");
  }
  if (options.max_buffered_total == 0) {
    return Status::InvalidArgument("rabit tracker: max_buffered_total must be positive");
  }
  if (options.port < 0 || options.port > 65535) {
    return Status::InvalidArgument("rabit tracker: port " + std::to_string(options.port) +
                                   " is not in [0, 65535]");
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* ai = nullptr;
  const int gai =
      ::getaddrinfo(options.host.c_str(), std::to_string(options.port).c_str(), &hints, &ai);
  if (gai != 0 || ai == nullptr) {
    return Status::InvalidArgument("rabit tracker: host \"" + options.host +
                                   "\" is not an IP address: " + ::gai_strerror(gai));
  }
  const int fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ::freeaddrinfo(ai);
    return Status::Unavailable("rabit tracker: " + Errno("socket"));
  }
  const int one = 1;
  // A fixed port can be taken again at once after a previous tracker's connections.
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool listening =
      ::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, kListenBacklog) == 0;
  const int listen_errno = errno;
  ::freeaddrinfo(ai);
  if (!listening) {
    Status st =
        Status::Unavailable("rabit tracker: cannot listen on " + options.host + " port " +
                            std::to_string(options.port) + ": " + std::strerror(listen_errno));
    ::close(fd);
    return st;
  }
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    Status st = Status::Internal("rabit tracker: " + Errno("getsockname"));
    ::close(fd);
    return st;
  }
  const int port =
      ntohs(local.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&local)->sin6_port
                                        : reinterpret_cast<const sockaddr_in*>(&local)->sin_port);
  const int wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    Status st = Status::ResourceExhausted("rabit tracker: " + Errno("eventfd"));
    ::close(fd);
    return st;
  }
  const int num_workers = options.num_workers;
  const std::string host = options.host;
  auto loop = std::make_unique<Loop>(std::move(options), fd, wake_fd);
  std::unique_ptr<RabitTracker> tracker(new RabitTracker(port, wake_fd, std::move(loop)));
  {
    std::lock_guard<std::mutex> lock(tracker->stop_mu_);
    try {
      tracker->thread_ = std::thread([t = tracker.get()] { t->Run(); });
    } catch (const std::system_error& e) {
      return Status::ResourceExhausted(std::string("rabit tracker: no thread: ") + e.what());
    }
  }
  LOG_INFO << "rabit tracker: listening on " << host << " port " << port << " for " << num_workers
           << " workers";
  return tracker;
}

RabitTracker::RabitTracker(int port, int wake_fd, std::unique_ptr<Loop> loop)
    : port_(port), wake_fd_(wake_fd), loop_(std::move(loop)) {}

RabitTracker::~RabitTracker() {
  Stop();
  ::close(wake_fd_);
}

void RabitTracker::Run() {
  const bool finished = loop_->Run();
  std::lock_guard<std::mutex> lock(mu_);
  finished_ = finished;
  ended_ = true;
  cv_.notify_all();
}

bool RabitTracker::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

bool RabitTracker::WaitFinished(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return ended_; });
  return finished_;
}

void RabitTracker::Stop() {
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  while (::write(wake_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
  thread_.join();
}

}  // namespace traintl
