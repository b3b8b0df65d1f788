#include "worker/torch/shm_communicator.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace traintl {
namespace torch {
namespace detail {
namespace {

constexpr int kMaxLocalRanks = 64;
constexpr size_t kCacheLine = 64;

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

long FutexWait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::milliseconds wait) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(wait.count() / 1000);
  ts.tv_nsec = static_cast<long>((wait.count() % 1000) * 1000000);
  // Not FUTEX_PRIVATE_FLAG: the word is shared between processes.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr,
                 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// How long a barrier spins before it sleeps on the futex: ranks on their own cores meet
// within microseconds to a millisecond (the slower one finishing its backward), and a
// futex wake costs a scheduler round trip. After kPureSpin the spin yields the core
// between looks, so a peer that shares it is not starved. TRAINTL_SHM_SPIN_US overrides
// the budget (benchmarks): 1 ms measured 3 % faster than 50 us with 2 ranks on 2 cores.
constexpr std::chrono::microseconds kPureSpin{20};
std::chrono::microseconds SpinBudget() {
  static const std::chrono::microseconds budget = [] {
    const char* v = std::getenv("TRAINTL_SHM_SPIN_US");
    if (v != nullptr && *v != '\0') return std::chrono::microseconds(std::atol(v));
    return std::chrono::microseconds(1000);
  }();
  return budget;
}

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// ---- Element types and reductions.

float Bf16ToFloat(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round to nearest even, as c10::BFloat16.
uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

struct Bf16 {
  using Storage = uint16_t;
  using Acc = float;
  static Acc Load(Storage s) { return Bf16ToFloat(s); }
  static Storage Store(Acc a) { return FloatToBf16(a); }
};
struct Fp16 {
  using Storage = _Float16;
  using Acc = float;
  static Acc Load(Storage s) { return static_cast<float>(s); }
  static Storage Store(Acc a) { return static_cast<_Float16>(a); }
};
template <typename T>
struct Native {
  using Storage = T;
  using Acc = T;
  static Acc Load(Storage s) { return s; }
  static Storage Store(Acc a) { return a; }
};

template <typename Acc>
Acc Apply(ShmOp op, Acc a, Acc b) {
  switch (op) {
    case ShmOp::kSum:
      return a + b;
    case ShmOp::kProduct:
      return a * b;
    case ShmOp::kMin:
      return std::min(a, b);
    case ShmOp::kMax:
      return std::max(a, b);
  }
  return a;
}

// out[i] = op(in[0][i], in[1][i], ...), applied in input order, i in [0, n). The op is a
// template parameter so that each inner loop is a plain vectorizable one.
template <typename Acc, typename F>
void CombineInto(Acc* __restrict acc, const Acc* __restrict x, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) acc[i] = f(acc[i], x[i]);
}
template <typename Acc, typename F>
void CombineTwo(Acc* __restrict out, const Acc* __restrict a, const Acc* __restrict b, size_t n,
                F f) {
  for (size_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
}

template <typename Acc, typename F>
void ReduceNative(Acc* out, const std::vector<const Acc*>& in, size_t n, F f) {
  if (in.size() == 1) {
    std::memcpy(out, in[0], n * sizeof(Acc));
    return;
  }
  CombineTwo(out, in[0], in[1], n, f);
  for (size_t k = 2; k < in.size(); ++k) CombineInto(out, in[k], n, f);
}

// Narrow types accumulate in float over blocks that stay in L1, and round once.
template <typename Traits, typename F>
void ReduceWidened(typename Traits::Storage* out,
                   const std::vector<const typename Traits::Storage*>& in, size_t n, F f) {
  using Acc = typename Traits::Acc;
  constexpr size_t kBlock = 1024;
  Acc acc[kBlock];
  Acc x[kBlock];
  for (size_t base = 0; base < n; base += kBlock) {
    const size_t m = std::min(kBlock, n - base);
    for (size_t i = 0; i < m; ++i) acc[i] = Traits::Load(in[0][base + i]);
    for (size_t k = 1; k < in.size(); ++k) {
      for (size_t i = 0; i < m; ++i) x[i] = Traits::Load(in[k][base + i]);
      CombineInto(acc, x, m, f);
    }
    for (size_t i = 0; i < m; ++i) out[base + i] = Traits::Store(acc[i]);
  }
}

template <typename Traits, typename F>
void ReduceTyped(void* out, const std::vector<const uint8_t*>& in, size_t n, F f) {
  using S = typename Traits::Storage;
  std::vector<const S*> typed;
  typed.reserve(in.size());
  for (const uint8_t* p : in) typed.push_back(reinterpret_cast<const S*>(p));
  if constexpr (std::is_same_v<typename Traits::Acc, S>) {
    ReduceNative(static_cast<S*>(out), typed, n, f);
  } else {
    ReduceWidened<Traits>(static_cast<S*>(out), typed, n, f);
  }
}

template <typename Traits>
void ReduceOp(void* out, const std::vector<const uint8_t*>& in, size_t n, ShmOp op) {
  using Acc = typename Traits::Acc;
  switch (op) {
    case ShmOp::kSum:
      return ReduceTyped<Traits>(out, in, n, [](Acc a, Acc b) { return a + b; });
    case ShmOp::kProduct:
      return ReduceTyped<Traits>(out, in, n, [](Acc a, Acc b) { return a * b; });
    case ShmOp::kMin:
      return ReduceTyped<Traits>(out, in, n, [](Acc a, Acc b) { return std::min(a, b); });
    case ShmOp::kMax:
      return ReduceTyped<Traits>(out, in, n, [](Acc a, Acc b) { return std::max(a, b); });
  }
}

void Reduce(ShmDtype dtype, void* out, const std::vector<const uint8_t*>& in, size_t n, ShmOp op) {
  switch (dtype) {
    case ShmDtype::kFloat32:
      return ReduceOp<Native<float>>(out, in, n, op);
    case ShmDtype::kFloat64:
      return ReduceOp<Native<double>>(out, in, n, op);
    case ShmDtype::kBFloat16:
      return ReduceOp<Bf16>(out, in, n, op);
    case ShmDtype::kFloat16:
      return ReduceOp<Fp16>(out, in, n, op);
    case ShmDtype::kInt32:
      return ReduceOp<Native<int32_t>>(out, in, n, op);
    case ShmDtype::kInt64:
      return ReduceOp<Native<int64_t>>(out, in, n, op);
    case ShmDtype::kUInt8:
      return ReduceOp<Native<uint8_t>>(out, in, n, op);
  }
}

// dst = src / divisor, as torch's div_ by an integer scalar computes it for each type.
template <typename Traits, typename Scalar>
void DivideTyped(void* dst, const void* src, size_t n, Scalar divisor) {
  using S = typename Traits::Storage;
  auto* d = static_cast<S*>(dst);
  const auto* s = static_cast<const S*>(src);
  for (size_t i = 0; i < n; ++i) {
    d[i] = Traits::Store(static_cast<typename Traits::Acc>(Traits::Load(s[i]) / divisor));
  }
}

void CopyOut(ShmDtype dtype, void* dst, const void* src, size_t n, double divisor) {
  if (divisor == 1) {
    std::memcpy(dst, src, n * ShmDtypeSize(dtype));
    return;
  }
  switch (dtype) {
    case ShmDtype::kFloat32:
      return DivideTyped<Native<float>>(dst, src, n, static_cast<float>(divisor));
    case ShmDtype::kFloat64:
      return DivideTyped<Native<double>>(dst, src, n, divisor);
    case ShmDtype::kBFloat16:
      return DivideTyped<Bf16>(dst, src, n, static_cast<float>(divisor));
    case ShmDtype::kFloat16:
      return DivideTyped<Fp16>(dst, src, n, static_cast<float>(divisor));
    default:
      std::abort();  // the caller allows averages of floating types only
  }
}

// A collective's identity, compared across ranks at its first barrier: ranks that called
// different collectives (or the same one with different sizes) fail instead of mixing.
uint64_t Describe(uint64_t kind, uint64_t size, uint64_t a, uint64_t b) {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t v : {kind, size, a, b}) h = (h ^ v) * 1099511628211ull;
  return h | 1;  // never 0, the value of "not yet described"
}

}  // namespace

struct alignas(kCacheLine) PaddedCounter {
  std::atomic<uint64_t> value;
  char pad[kCacheLine - sizeof(std::atomic<uint64_t>)];
};

struct ShmCommunicator::Header {
  std::atomic<uint32_t> wake;      // futex word: bumped when a rank arrives and one sleeps
  std::atomic<uint32_t> sleepers;  // ranks inside a futex wait
  std::atomic<uint32_t> aborted;   // 0, 1 while the reason is written, 2 once it is
  char reason[256];
  alignas(kCacheLine) PaddedCounter arrived[kMaxLocalRanks];  // barriers passed, per rank
  // The current collective's Describe() per rank, alternating between two rows by the
  // collective's parity: a rank is at most one collective ahead of the slowest.
  alignas(kCacheLine) PaddedCounter descriptor[2][kMaxLocalRanks];
};

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

size_t ShmDtypeSize(ShmDtype dtype) {
  switch (dtype) {
    case ShmDtype::kFloat32:
    case ShmDtype::kInt32:
      return 4;
    case ShmDtype::kFloat64:
    case ShmDtype::kInt64:
      return 8;
    case ShmDtype::kBFloat16:
    case ShmDtype::kFloat16:
      return 2;
    case ShmDtype::kUInt8:
      return 1;
  }
  return 1;
}

const char* ShmDtypeName(ShmDtype dtype) {
  switch (dtype) {
    case ShmDtype::kFloat32:
      return "float32";
    case ShmDtype::kFloat64:
      return "float64";
    case ShmDtype::kBFloat16:
      return "bfloat16";
    case ShmDtype::kFloat16:
      return "float16";
    case ShmDtype::kInt32:
      return "int32";
    case ShmDtype::kInt64:
      return "int64";
    case ShmDtype::kUInt8:
      return "uint8";
  }
  return "?";
}

// ---- ShmSegment

Result<ShmSegment> ShmSegment::Create(size_t bytes) {
  const int fd = memfd_create("traintl-collectives", MFD_CLOEXEC);
  if (fd < 0) return Status::Unavailable(Errno("memfd_create"));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    Status s = Status::ResourceExhausted(Errno("sizing the shared segment"));
    close(fd);
    return s;
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    Status s = Status::ResourceExhausted(Errno("mapping the shared segment"));
    close(fd);
    return s;
  }
  ShmSegment seg;
  seg.data_ = data;
  seg.size_ = bytes;
  seg.fd_ = fd;
  return seg;
}

Result<ShmSegment> ShmSegment::Open(pid_t pid, int fd, size_t bytes) {
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int own = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (own < 0) return Status::Unavailable(Errno("opening the node's shared segment " + path));
  struct stat st {};
  if (fstat(own, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    close(own);
    return Status::FailedPrecondition(path + " is not the segment of " + std::to_string(bytes) +
                                      " bytes that was announced");
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, own, 0);
  close(own);  // the mapping keeps the memory
  if (data == MAP_FAILED) return Status::ResourceExhausted(Errno("mapping " + path));
  ShmSegment seg;
  seg.data_ = data;
  seg.size_ = bytes;
  return seg;
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept { *this = std::move(other); }

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    Reset();
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(fd_, other.fd_);
  }
  return *this;
}

ShmSegment::~ShmSegment() { Reset(); }

void ShmSegment::Reset() {
  if (data_ != nullptr) munmap(data_, size_);
  if (fd_ >= 0) close(fd_);
  data_ = nullptr;
  size_ = 0;
  fd_ = -1;
}

// ---- ShmCommunicator

namespace {
// Room for the Header, page-aligned so that the data areas start on a page.
constexpr size_t kHeaderBytes = 16384;
size_t HeaderBytes() { return kHeaderBytes; }
}  // namespace

size_t ShmCommunicator::SegmentBytes(int local_size, size_t chunk_bytes) {
  return HeaderBytes() + (static_cast<size_t>(local_size) + 1) * RoundUp(chunk_bytes, kCacheLine);
}

ShmCommunicator::ShmCommunicator(void* segment, ShmOptions options)
    : options_(std::move(options)),
      header_(static_cast<Header*>(segment)),
      data_(static_cast<uint8_t*>(segment) + HeaderBytes()) {
  static_assert(sizeof(Header) <= kHeaderBytes);
  if (options_.local_size < 1 || options_.local_size > kMaxLocalRanks || options_.local_rank < 0 ||
      options_.local_rank >= options_.local_size) {
    std::abort();  // the group checks these before it builds a communicator
  }
  options_.chunk_bytes = RoundUp(std::max<size_t>(options_.chunk_bytes, kCacheLine), kCacheLine);
  pidfds_.assign(static_cast<size_t>(options_.local_size), -1);
  for (size_t q = 0; q < options_.peer_pids.size() && q < pidfds_.size(); ++q) {
    const pid_t pid = options_.peer_pids[q];
    if (pid <= 0 || static_cast<int>(q) == options_.local_rank) continue;
    pidfds_[q] = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  }
}

ShmCommunicator::~ShmCommunicator() {
  for (int fd : pidfds_) {
    if (fd >= 0) close(fd);
  }
}

uint8_t* ShmCommunicator::Slot(int rank) const {
  return data_ + static_cast<size_t>(rank) * options_.chunk_bytes;
}

uint8_t* ShmCommunicator::ResultArea() const { return Slot(options_.local_size); }

void ShmCommunicator::Abort(const std::string& reason) {
  uint32_t expected = 0;
  if (header_->aborted.compare_exchange_strong(expected, 1)) {
    std::snprintf(header_->reason, sizeof header_->reason, "%s", reason.c_str());
    header_->aborted.store(2);
  }
  header_->wake.fetch_add(1);
  FutexWakeAll(&header_->wake);
}

Status ShmCommunicator::Failed(const std::string& what) {
  std::string reason = what;
  // A peer's Abort() publishes its reason between two stores (1, then 2): a rank that saw
  // the 1 waits for the reason, briefly, since a peer killed in between never writes it.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(10);
  while (header_->aborted.load() == 1 && std::chrono::steady_clock::now() < give_up) {
    sched_yield();
  }
  if (header_->aborted.load() == 2) reason = header_->reason;
  return Status::Unavailable("shared-memory collective of local rank " +
                             std::to_string(options_.local_rank) + " failed: " + reason);
}

Status ShmCommunicator::Sync() {
  if (header_->aborted.load() != 0) return Failed("aborted by a peer");
  ++seq_;
  header_->arrived[options_.local_rank].value.store(seq_);
  if (header_->sleepers.load() > 0) {
    header_->wake.fetch_add(1);
    FutexWakeAll(&header_->wake);
  }
  return WaitAll(seq_);
}

Status ShmCommunicator::WaitAll(uint64_t target) {
  auto all_arrived = [&] {
    for (int q = 0; q < options_.local_size; ++q) {
      if (header_->arrived[q].value.load() < target) return false;
    }
    return true;
  };
  const auto start = std::chrono::steady_clock::now();
  const auto spin_until = start + SpinBudget();
  const auto yield_after = start + std::min(SpinBudget(), kPureSpin);
  for (unsigned i = 0;; ++i) {
    if (all_arrived()) return Status::Ok();
    if (header_->aborted.load() != 0) return Failed("aborted by a peer");
    CpuRelax();
    if ((i & 63) == 63) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= spin_until) break;
      // Past the first microseconds, give the core to whoever else wants it (a peer rank
      // sharing this core) between looks: free when nobody does.
      if (now >= yield_after) sched_yield();
    }
  }
  const auto deadline = start + options_.timeout;
  for (;;) {
    const uint32_t seen = header_->wake.load();
    header_->sleepers.fetch_add(1);
    if (!all_arrived() && header_->aborted.load() == 0) {
      FutexWait(&header_->wake, seen, kLivenessPeriod);
    }
    header_->sleepers.fetch_sub(1);
    if (all_arrived()) return Status::Ok();
    if (header_->aborted.load() != 0) return Failed("aborted by a peer");
    TRAINTL_RETURN_IF_ERROR(CheckPeers(target));
    if (std::chrono::steady_clock::now() >= deadline) {
      const std::string why =
          "a peer did not arrive within " + std::to_string(options_.timeout.count()) + " ms";
      Abort("local rank " + std::to_string(options_.local_rank) + ": " + why);
      return Failed(why);
    }
  }
}

Status ShmCommunicator::CheckPeers(uint64_t target) {
  for (int q = 0; q < options_.local_size; ++q) {
    if (pidfds_[q] < 0 || header_->arrived[q].value.load() >= target) continue;
    pollfd p{pidfds_[q], POLLIN, 0};
    if (poll(&p, 1, 0) > 0) {
      const std::string why = "local rank " + std::to_string(q) + " (pid " +
                              std::to_string(options_.peer_pids[q]) + ") exited";
      Abort(why);
      return Failed(why);
    }
  }
  return Status::Ok();
}

void ShmCommunicator::Begin(uint64_t descriptor) {
  ++collectives_;
  header_->descriptor[collectives_ & 1][options_.local_rank].value.store(descriptor);
}

Status ShmCommunicator::CheckSameCollective() {
  const auto& row = header_->descriptor[collectives_ & 1];
  const uint64_t mine = row[options_.local_rank].value.load();
  for (int q = 0; q < options_.local_size; ++q) {
    if (row[q].value.load() != mine) {
      const std::string why = "local ranks " + std::to_string(options_.local_rank) + " and " +
                              std::to_string(q) +
                              " called different collectives (or sizes, types, ops, roots)";
      Abort(why);
      return Failed(why);
    }
  }
  return Status::Ok();
}

Status ShmCommunicator::RunNodeStep(const ShmNodeStep& node_step, void* chunk, size_t count) {
  if (options_.local_rank == 0) {
    Status s = node_step(chunk, count);
    if (!s.ok()) {
      Abort("the node's inter-node step failed: " + s.message());
      return Failed(s.message());
    }
  }
  return Sync();
}

Status ShmCommunicator::Allreduce(void* data, size_t count, ShmDtype dtype, ShmOp op,
                                  double divisor, const ShmNodeStep& node_step) {
  const size_t elem = ShmDtypeSize(dtype);
  const size_t per_chunk = options_.chunk_bytes / elem;
  const int me = options_.local_rank, n_ranks = options_.local_size;
  Begin(Describe(1, count, static_cast<uint64_t>(dtype), static_cast<uint64_t>(op)));
  auto* bytes = static_cast<uint8_t*>(data);
  std::vector<const uint8_t*> inputs(static_cast<size_t>(n_ranks));
  // At least one round, even for no elements: it checks that every rank agrees.
  const size_t rounds = std::max<size_t>(1, (count + per_chunk - 1) / per_chunk);
  for (size_t k = 0; k < rounds; ++k) {
    const size_t off = k * per_chunk;
    const size_t n = std::min(per_chunk, count - off);
    std::memcpy(Slot(me), bytes + off * elem, n * elem);
    TRAINTL_RETURN_IF_ERROR(Sync());
    if (off == 0) TRAINTL_RETURN_IF_ERROR(CheckSameCollective());
    // This rank's slice of the chunk, cache-line aligned.
    const size_t align = kCacheLine / elem;
    const size_t slice = RoundUp((n + n_ranks - 1) / n_ranks, align);
    const size_t lo = std::min(n, slice * me), hi = std::min(n, lo + slice);
    if (hi > lo) {
      for (int q = 0; q < n_ranks; ++q) inputs[q] = Slot(q) + lo * elem;
      Reduce(dtype, ResultArea() + lo * elem, inputs, hi - lo, op);
    }
    TRAINTL_RETURN_IF_ERROR(Sync());
    if (node_step) TRAINTL_RETURN_IF_ERROR(RunNodeStep(node_step, ResultArea(), n));
    CopyOut(dtype, bytes + off * elem, ResultArea(), n, divisor);
  }
  return Status::Ok();
}

// Before its first Sync() a collective writes only its own slot: a slower peer may still be
// copying the previous collective's result out of the result area.
Status ShmCommunicator::Broadcast(void* data, size_t bytes, int root,
                                  const ShmNodeStep& node_step) {
  const int me = options_.local_rank;
  if (root < 0 && !node_step) std::abort();  // the group passes a step for remote roots
  Begin(Describe(2, bytes, static_cast<uint64_t>(root + 1), 0));
  auto* p = static_cast<uint8_t*>(data);
  // The root's slot, or for a root on another node the leader's, which its step fills.
  uint8_t* buffer = Slot(root >= 0 ? root : 0);
  const size_t chunk = options_.chunk_bytes;
  for (size_t off = 0; off < bytes; off += chunk) {
    const size_t n = std::min(chunk, bytes - off);
    if (me == root) std::memcpy(buffer, p + off, n);
    TRAINTL_RETURN_IF_ERROR(Sync());
    if (off == 0) TRAINTL_RETURN_IF_ERROR(CheckSameCollective());
    if (node_step) TRAINTL_RETURN_IF_ERROR(RunNodeStep(node_step, buffer, n));
    if (me != root) std::memcpy(p + off, buffer, n);
    TRAINTL_RETURN_IF_ERROR(Sync());
  }
  return Status::Ok();
}

Status ShmCommunicator::Allgather(const void* in, size_t bytes, void* out) {
  const int me = options_.local_rank;
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  Begin(Describe(3, bytes, 0, 0));
  const size_t chunk = options_.chunk_bytes;
  for (size_t off = 0; off < bytes; off += chunk) {
    const size_t n = std::min(chunk, bytes - off);
    std::memcpy(Slot(me), src + off, n);
    TRAINTL_RETURN_IF_ERROR(Sync());
    if (off == 0) TRAINTL_RETURN_IF_ERROR(CheckSameCollective());
    for (int q = 0; q < options_.local_size; ++q) {
      std::memcpy(dst + static_cast<size_t>(q) * bytes + off, Slot(q), n);
    }
    TRAINTL_RETURN_IF_ERROR(Sync());
  }
  return Status::Ok();
}

Status ShmCommunicator::Barrier(const ShmNodeStep& node_step) {
  Begin(Describe(4, 0, 0, 0));
  TRAINTL_RETURN_IF_ERROR(Sync());
  TRAINTL_RETURN_IF_ERROR(CheckSameCollective());
  if (node_step) TRAINTL_RETURN_IF_ERROR(RunNodeStep(node_step, nullptr, 0));
  return Status::Ok();
}

}  // namespace detail
}  // namespace torch
}  // namespace traintl
