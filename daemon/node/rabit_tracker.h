// RabitTracker: the tracker of XGBoost 1.7's rabit collective, so that traintld runs it for
// an xgboost job without Python. It speaks the protocol of xgboost's own tracker
// (python-package/xgboost/tracker.py, 1.7.4) on one TCP listener:
//
//   - every connection opens with the magic 0xff99 (echoed back), then the worker's rank
//     (-1: none yet), world_size (-1: unknown), task_id and a command: "start", "recover",
//     "print" (one message follows) or "shutdown". Integers are native-endian int32,
//     strings an int32 length and the bytes;
//   - start/recover gets a rank, its parent, the world size, its tree neighbours and ring
//     prev/next (RabitLinkMap), then the good-set/bad-set negotiation: the worker names its
//     links that still work, the tracker answers which peers to connect to (those already
//     listening: host, port, rank) and how many will connect to it, until the worker
//     reports no failed connect and sends its own listening port;
//   - workers whose rank is not known yet are assigned ranks as one batch, once as many are
//     pending as ranks are left, sorted by host (or by task id; RabitTrackerOptions);
//   - the tracker is done once every rank has sent "shutdown".
//
// One deliberate difference: traintl sets DMLC_TASK_ID to a worker's traintl world rank,
// and the data sharding relies on XGBoost's rank being that same rank. So a task id that is
// a decimal integer in [0, world size) gets exactly that rank, at once; only other task ids
// go through the batch assignment. A rank asked for by two task ids is an error (the second
// worker is dropped).
//
// Unlike the reference, a misbehaving client never stops the tracker: a wrong magic,
// garbage, a connection closed mid-handshake, one silent past io_timeout, an out-of-range
// rank, a duplicate shutdown, and every state on which the reference asserts, are logged
// and that one connection is dropped. So is one that reads nothing while the tracker has
// 64 KiB for it, one whose negotiation takes over 64 rounds or 4 io_timeouts, a start that
// names another world size than num_workers, a start whose rank field names a rank a worker
// already holds (XGBoost's workers start with rank -1 and their task id, which keeps naming
// the rank; a recover may), and a shutdown of a rank that never got its links. Prints are
// cut at 4 KiB. The protocol has no credential: these rules keep a stray or hostile client
// on the node from stalling the tracker or growing the daemon, not from disturbing the job
// it connects to.
//
// Headers are read from all connections at once; the commands are handled in the order
// their headers completed, every complete one before the next negotiation begins, and the
// negotiations one at a time, as the reference's accept loop does. At most one connection
// per rank waits for its negotiation: a later start or recover for the rank replaces it.
// Smaller differences, none visible to a well-behaved worker: sets (tree neighbours, peers
// to connect to) are sent in ascending order rather than Python's set order; a pending
// worker that disconnects leaves the batch; a start that carries a rank takes it out of the
// batch's ranks; a rank's new listening port replaces its old one.
//
// A worker past its negotiation waits on its peers, not on the tracker: Stop() makes the
// workers still talking to the tracker fail, not those.
//
// Thread-safety: the protocol runs on the tracker's own thread; every public method may be
// called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/result.h"
#include "common/thread_annotations.h"

namespace traintl {

// The topology the tracker hands out to `num_workers` workers (the reference's
// get_link_map): a binary tree over the ranks and a ring that shares most of its edges with
// the tree, relabelled so that the ring is 0, 1, ..., n-1.
struct RabitLinkMap {
  std::vector<std::vector<int>> tree;     // tree[r]: r's tree neighbours, its parent first
  std::vector<int> parent;                // parent[r]; -1 for the root, rank 0
  std::vector<std::pair<int, int>> ring;  // ring[r]: {previous, next}
};

// The reference's get_link_map for `num_workers` >= 1, including the order in which
// Python iterates a set of children, so that the same world size gets the same topology.
RabitLinkMap ComputeRabitLinkMap(int num_workers);

struct RabitTrackerOptions {
  // How pending workers (no rank, task id not a rank) are ordered for the batch
  // assignment: by peer address or by task id; a stable sort either way.
  enum class SortBy { kHost, kTask };

  // The address to bind, an IPv4 or IPv6 literal; only it is bound. Default: 127.0.0.1.
  std::string host = "127.0.0.1";
  // The port to listen on; 0: any free port (see port()). Default: 0.
  int port = 0;
  // The number of workers (the job's world size). A "start" that names another world size
  // is dropped (the reference lets the first one set it). Must be >= 1. Default: 1.
  int num_workers = 1;
  // A client that leaves the tracker waiting this long for its next message (mid-header or
  // mid-negotiation) is dropped. Must be > 0. Default: 30 s.
  std::chrono::milliseconds io_timeout{30000};
  // Default: SortBy::kHost (the reference's default).
  SortBy sort_by = SortBy::kHost;
  // Most bytes held in all connections' input buffers together (each holds at most
  // 4 MiB). Past it, the connection holding the most is dropped: anyone who can reach the
  // tracker's port (it takes no credential: XGBoost's protocol has none) could otherwise
  // hold 4 MiB in each of its 4096 connections. A well-behaved worker holds a few bytes.
  // Must be > 0. Default: 256 MiB.
  size_t max_buffered_total = 256u << 20;
  // Receives each worker "print" message, surrounding whitespace stripped and cut at 4 KiB,
  // on the tracker's thread, which it must not block for long. Default: empty: LOG_INFO.
  std::function<void(const std::string&)> on_print;
  // Receives, on the tracker's thread, why a worker whose header was whole was dropped
  // for a protocol error (a rank asked for twice, another world size, no rank left, a
  // shutdown out of turn), so that the job's log can say it. Default: empty.
  std::function<void(const std::string&)> on_error;
};

class RabitTracker {
 public:
  // Binds and listens on options.host:options.port and starts the tracker's thread.
  static Result<std::unique_ptr<RabitTracker>> Start(RabitTrackerOptions options);

  // Calls Stop().
  ~RabitTracker();

  RabitTracker(const RabitTracker&) = delete;
  RabitTracker& operator=(const RabitTracker&) = delete;

  // The port listened on (the chosen one when options.port was 0).
  int port() const { return port_; }

  // True once every rank has sent "shutdown". The listener is closed by then.
  bool finished() const TRAINTL_EXCLUDES(mu_);

  // Blocks until finished(), Stop(), or `timeout`; returns finished().
  bool WaitFinished(std::chrono::milliseconds timeout) TRAINTL_EXCLUDES(mu_);

  // Closes the listener and every connection (workers still talking to the tracker then
  // fail) and joins the thread; returns promptly whatever the clients do. Idempotent.
  void Stop() TRAINTL_EXCLUDES(mu_);

 private:
  class Loop;  // the connections and the protocol state, on the tracker's thread only

  RabitTracker(int port, int wake_fd, std::unique_ptr<Loop> loop);
  void Run() TRAINTL_EXCLUDES(mu_);

  // Constant after construction.
  const int port_;
  const int wake_fd_;                 // an eventfd: Stop() writes it to end the thread's poll
  const std::unique_ptr<Loop> loop_;  // owns the listener; used by the tracker's thread only

  std::mutex stop_mu_;  // serializes Stop()
  std::thread thread_ TRAINTL_GUARDED_BY(stop_mu_);

  mutable std::mutex mu_;
  std::condition_variable cv_;  // signalled when the thread ends
  bool finished_ TRAINTL_GUARDED_BY(mu_) = false;
  bool ended_ TRAINTL_GUARDED_BY(mu_) = false;  // the thread is done (finished or stopped)
};

}  // namespace traintl
