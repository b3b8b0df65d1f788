// AgentChannel: traintl-worker's end of the socketpair to its node agent (fd 3), speaking
// the newline-delimited JSON protocol of docs/WORKER_PROTOCOL.md through its one codec
// (proto/worker_events.h).
//
// A reader thread handles the agent's messages: "ack" wakes the report waiting for it,
// "stop" raises the stop flag, "regroup" records the latest generation announced. End of file on
// the channel means the agent is gone, and the reader ends the whole process at once (no worker
// outlives its agent).
//
// Thread-safety: every method may be called from any thread; messages are written whole
// (one line each) under a mutex.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "proto/worker_events.h"

namespace traintl {
namespace worker {

class AgentChannel {
 public:
  // Exit status of the process when the agent closes the channel.
  static constexpr int kAgentGoneExitCode = 1;

  // Takes ownership of `fd` (a connected stream socket). The object must live until the
  // process exits (the reader thread is detached and uses it): allocate it and never free it.
  explicit AgentChannel(int fd);
  AgentChannel(const AgentChannel&) = delete;
  AgentChannel& operator=(const AgentChannel&) = delete;

  // Starts the reader thread. Call once, after the process environment is set up.
  void Start();

  // Sends one event as a line.
  Status Send(const events::WorkerEvent& event);

  // Blocks until the agent acknowledged report `seq`.
  void WaitForAck(int64_t seq);
  // For a held report (hold_reports): blocks until it is acknowledged, the agent asks the
  // worker to stop (the head's decision was to end the job: it will not ack), or `limit`
  // passed (a head that failed over forgot what it held). True when acknowledged.
  bool WaitForHeldAck(int64_t seq, std::chrono::milliseconds limit);

  bool stop_requested() const { return stop_requested_.load(std::memory_order_acquire); }
  // The flag behind stop_requested(), for waits that poll one (DatasetService).
  const std::atomic<bool>* stop_flag() const { return &stop_requested_; }
  // Peer recovery: blocks until the agent announced a regroup of generation >=
  // `min_generation` (returns the latest announced), the agent asked the worker to stop
  // (-1), or `limit` passed (0).
  int WaitForRegroup(int min_generation, std::chrono::milliseconds limit);
  // The latest regroup announced (generation 0: none yet).
  events::Regroup LatestRegroup();

 private:
  void ReadLoop();
  void HandleLine(const std::string& line);

  const int fd_;
  std::mutex write_mu_;  // serializes writes to fd_ (one whole line each)
  std::mutex ack_mu_;
  std::condition_variable ack_cv_;
  std::set<int64_t> acked_ TRAINTL_GUARDED_BY(ack_mu_);
  events::Regroup regroup_ TRAINTL_GUARDED_BY(ack_mu_);  // the latest announced
  std::atomic<bool> stop_requested_{false};
  std::thread reader_;
};

}  // namespace worker
}  // namespace traintl
