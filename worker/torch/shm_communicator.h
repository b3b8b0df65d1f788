// Collectives among the ranks of one node through a shared memory segment.
//
// ShmSegment is the mapping: the node's first rank creates it as a memfd (no name in
// /dev/shm, so nothing can leak: the memory is freed when the last rank holding it exits,
// however it exits), and the other ranks open it through /proc/<pid>/fd/<fd> of that rank,
// which the kernel allows only to processes of the same user.
//
// ShmCommunicator runs the collectives over it. A collective is cut into chunks of at most
// `chunk_bytes` per rank, so that each chunk's working set stays in cache. An allreduce of
// one chunk: every rank copies its chunk into its own slot; barrier; rank r reduces the
// r-th slice of the chunk over all slots (in local-rank order: slot 0 + slot 1 + ...) into
// the shared result area; barrier; every rank copies the whole result out. Every rank
// reads the same result bytes, so results are bit-identical across ranks, and the order of
// the summation is fixed, so they are deterministic from run to run.
//
// Barriers spin briefly, then sleep on a futex in the segment. A waiting rank notices a
// dead peer (its pidfd becomes readable), a peer's abort (ShmCommunicator::Abort, e.g.
// when the node's leader failed its inter-node step) and the timeout within
// kLivenessPeriod, and fails the collective with a Status; it never spins forever.
//
// The hierarchical (multi-node) step is a hook: the node's leader runs it on each chunk's
// node-local result while the others wait, then everyone copies out the final value.
//
// Thread-safety: a ShmCommunicator is used by one thread at a time (the group's
// collective thread); Abort() may be called from any thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/status.h"

namespace traintl {
namespace torch {
namespace detail {

enum class ShmDtype { kFloat32, kFloat64, kBFloat16, kFloat16, kInt32, kInt64, kUInt8 };
enum class ShmOp { kSum, kProduct, kMin, kMax };

size_t ShmDtypeSize(ShmDtype dtype);
const char* ShmDtypeName(ShmDtype dtype);

// A shared mapping of a memfd. Move-only; unmaps (and closes the fd, if kept) on
// destruction.
class ShmSegment {
 public:
  // Creates a zero-filled segment of `bytes` and keeps its fd open (fd()), so that peers
  // can open it through /proc/self/fd.
  static Result<ShmSegment> Create(size_t bytes);
  // Maps the segment that process `pid` holds as fd `fd`.
  static Result<ShmSegment> Open(pid_t pid, int fd, size_t bytes);

  ShmSegment() = default;
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  // The memfd, or -1 for an opened (not created) segment.
  int fd() const { return fd_; }

 private:
  void Reset();

  void* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
};

struct ShmOptions {
  // This rank's index among the node's ranks, and their number. Defaults: 0 of 1.
  int local_rank = 0;
  int local_size = 1;
  // The node's ranks' process ids, by local rank, to notice a dead peer. Ranks whose pid is
  // 0 are not watched (tests that share one process). Default: empty (none watched).
  std::vector<pid_t> peer_pids;
  // Bytes per rank per step of a collective; the segment holds local_size + 1 of these.
  // Default: 256 KiB (fits each core's L2 with room for the source and destination).
  size_t chunk_bytes = 256u << 10;
  // How long one barrier may wait for the slowest peer. Default: 300 s.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

// Called on the node's leader (local rank 0) with a chunk of the node's result (in place,
// `count` elements). Returns a failure to abort the collective on every rank of the node.
using ShmNodeStep = std::function<Status(void* chunk, size_t count)>;

class ShmCommunicator {
 public:
  // How often a sleeping barrier checks its peers' liveness, aborts and the timeout.
  static constexpr std::chrono::milliseconds kLivenessPeriod{20};

  // The segment size the options need.
  static size_t SegmentBytes(int local_size, size_t chunk_bytes);

  // `segment` must be SegmentBytes(options) large, zero-filled when created, and shared by
  // the node's ranks, each with its own local_rank; it must outlive the communicator.
  ShmCommunicator(void* segment, ShmOptions options);
  ~ShmCommunicator();
  ShmCommunicator(const ShmCommunicator&) = delete;
  ShmCommunicator& operator=(const ShmCommunicator&) = delete;

  int local_rank() const { return options_.local_rank; }
  int local_size() const { return options_.local_size; }

  // Reduces `count` elements at `data` across the node in place. When `divisor` is not 1
  // (an average), every rank divides the final sums by it as it copies them out (floating
  // types only). `node_step`, when set, runs on the leader for each chunk between the
  // node's reduction and the copy out (the inter-node allreduce).
  Status Allreduce(void* data, size_t count, ShmDtype dtype, ShmOp op, double divisor = 1,
                   const ShmNodeStep& node_step = nullptr);
  // Copies `bytes` at `data` of local rank `root` into every other rank's `data`. With
  // root -1 (the source is on another node) `node_step` (required then) fills the chunk.
  Status Broadcast(void* data, size_t bytes, int root, const ShmNodeStep& node_step = nullptr);
  // Every rank's `bytes` at `in`, concatenated in local-rank order at `out`
  // (local_size * bytes).
  Status Allgather(const void* in, size_t bytes, void* out);
  // Returns once every rank of the node has called Barrier(); `node_step`, when set, runs
  // on the leader in between (with a null chunk).
  Status Barrier(const ShmNodeStep& node_step = nullptr);

  // Fails the collectives in progress and all later ones on every rank of the node.
  void Abort(const std::string& reason);

 private:
  struct Header;

  // Starts a collective: publishes its description for CheckSameCollective().
  void Begin(uint64_t descriptor);
  // After the collective's first Sync(): fails unless every rank began the same one.
  Status CheckSameCollective();
  // The leader runs `node_step`; then everyone syncs.
  Status RunNodeStep(const ShmNodeStep& node_step, void* chunk, size_t count);
  // Arrives at the next barrier and waits for every peer to arrive there too.
  Status Sync();
  Status WaitAll(uint64_t target);
  Status CheckPeers(uint64_t target);
  Status Failed(const std::string& what);
  uint8_t* Slot(int rank) const;
  uint8_t* ResultArea() const;

  // Constant after construction.
  ShmOptions options_;
  Header* header_;
  uint8_t* data_;
  std::vector<int> pidfds_;  // by local rank; -1 where not watched

  // Used by the one collective thread.
  uint64_t seq_ = 0;          // barriers passed
  uint64_t collectives_ = 0;  // collectives begun
};

}  // namespace detail
}  // namespace torch
}  // namespace traintl
