// The rendezvous key-value store of a job's ranks: rank 0 runs a StoreServer at
// master_addr:master_port, every rank (rank 0 included) talks to it through a StoreClient.
// traintl::torch wraps the client as the c10d::Store that ProcessGroupGloo/NCCL rendezvous
// through.
//
// Why not c10d::TCPStore: LibTorch 1.13's TCPStore server listens on every interface and
// offers no way to choose; this one binds only the address it is given (loopback for a
// single-host job). Like TCPStore it has no authentication: master_addr must be on a
// network that only the cluster's nodes can reach.
//
// Wire format (one request, one response, on a TCP connection): numbers are big-endian.
//   request:  u8 op, u32 key count, keys (u32 length + bytes each), u32 value length +
//             bytes, u32 second value length + bytes, i64 argument
//   response: u8 status (0 ok, 1 timeout, 2 bad request), u32 length + bytes, i64 number
// A connection's requests are served in order; blocking requests (get, wait) block only
// their own connection.
//
// Thread-safety: StoreServer and StoreClient are thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace traintl {
namespace torch {
namespace detail {

using Bytes = std::vector<uint8_t>;

class StoreServer {
 public:
  // Listens on host:port (port 0: a free port, see port()). Fails when the address cannot
  // be bound, e.g. when host is not an address of this machine or the port is taken.
  static Result<std::unique_ptr<StoreServer>> Start(const std::string& host, int port);

  // Stops serving: closes every connection (clients then fail) and joins the threads.
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const { return port_; }

 private:
  StoreServer(int listen_fd, int port);
  void AcceptLoop();
  void Serve(int fd);

  const int listen_fd_;
  const int port_;
  int stop_pipe_[2] = {-1, -1};  // the accept loop's wake-up on shutdown
  std::thread accept_thread_;

  std::mutex mu_;
  std::condition_variable changed_;  // a key was set or added, or stopping_
  std::map<std::string, Bytes> data_ TRAINTL_GUARDED_BY(mu_);
  bool stopping_ TRAINTL_GUARDED_BY(mu_) = false;
  std::vector<int> connections_ TRAINTL_GUARDED_BY(mu_);
  std::vector<std::thread> workers_ TRAINTL_GUARDED_BY(mu_);
};

class StoreClient {
 public:
  // Connects to host:port, retrying until `timeout` passes while nobody listens yet (rank
  // 0 may start later than the others).
  static Result<std::unique_ptr<StoreClient>> Connect(const std::string& host, int port,
                                                      std::chrono::milliseconds timeout);
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  Status Set(const std::string& key, const Bytes& value);
  // Waits up to `timeout` (0: forever) for the key to exist.
  Result<Bytes> Get(const std::string& key, std::chrono::milliseconds timeout);
  // Adds `delta` to the integer at key (absent: 0) and returns the sum.
  Result<int64_t> Add(const std::string& key, int64_t delta);
  // Sets `desired` when the current value is `expected` (absent counts as an empty
  // `expected`); returns the value after the call (or `expected` when absent and not set).
  Result<Bytes> CompareSet(const std::string& key, const Bytes& expected, const Bytes& desired);
  // True when the key existed.
  Result<bool> Delete(const std::string& key);
  // True when every key exists.
  Result<bool> Check(const std::vector<std::string>& keys);
  Result<int64_t> NumKeys();
  // Waits up to `timeout` (0: forever) for every key to exist.
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  enum class Op : uint8_t { kSet = 1, kGet, kAdd, kCompareSet, kDelete, kCheck, kNumKeys, kWait };
  struct Response {
    uint8_t status = 0;
    Bytes value;
    int64_t number = 0;
  };

 private:
  explicit StoreClient(int fd) : fd_(fd) {}
  Result<Response> Call(Op op, const std::vector<std::string>& keys, const Bytes& value,
                        const Bytes& value2, int64_t arg);

  std::mutex mu_;                   // one request in flight per connection
  int fd_ TRAINTL_GUARDED_BY(mu_);  // used under mu_ (Call); closed by the destructor
};

}  // namespace detail
}  // namespace torch
}  // namespace traintl
