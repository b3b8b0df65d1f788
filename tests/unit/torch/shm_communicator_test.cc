// Tests of the shared-memory collectives (no LibTorch): each rank is a forked process on a
// segment mapped before the fork (or opened through /proc/<pid>/fd as the runtime does);
// the ranks write what they got into a second shared area the test reads.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "worker/torch/shm_communicator.h"

namespace {

using traintl::Status;
using traintl::torch::detail::ShmCommunicator;
using traintl::torch::detail::ShmDtype;
using traintl::torch::detail::ShmOp;
using traintl::torch::detail::ShmOptions;
using traintl::torch::detail::ShmSegment;

// An anonymous shared mapping, inherited by forked ranks.
struct SharedArea {
  explicit SharedArea(size_t bytes) : size(bytes) {
    data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(data != MAP_FAILED);
  }
  ~SharedArea() { munmap(data, size); }
  template <typename T>
  T* as(size_t byte_offset = 0) const {
    return reinterpret_cast<T*>(static_cast<char*>(data) + byte_offset);
  }
  void* data;
  size_t size;
};

struct RankResult {
  int ok = 0;  // 1 when the collective returned Ok
  char message[512] = {0};
};

struct Fixture {
  Fixture(int ranks, size_t chunk, size_t out_bytes_per_rank,
          std::chrono::milliseconds timeout = std::chrono::seconds(20))
      : n(ranks),
        chunk_bytes(chunk),
        timeout(timeout),
        segment(ShmCommunicator::SegmentBytes(ranks, chunk)),
        results(sizeof(RankResult) * ranks),
        out(out_bytes_per_rank * ranks + 64),
        out_bytes(out_bytes_per_rank) {}

  // Runs body(comm, my output area) in `n` forked ranks; `pids_watched` makes the ranks
  // watch each other's pids. Returns the ranks' exit statuses.
  std::vector<int> Run(const std::function<Status(ShmCommunicator&, int rank, void* out)>& body,
                       bool pids_watched = true,
                       const std::function<void(int rank)>& before = nullptr) {
    std::vector<pid_t> pids(n, 0);
    // Children learn their peers' pids from a shared table filled before they start.
    SharedArea table(sizeof(pid_t) * n + sizeof(int));
    auto* go = table.as<volatile int>(sizeof(pid_t) * n);
    for (int r = 0; r < n; ++r) {
      const pid_t pid = fork();
      REQUIRE(pid >= 0);
      if (pid == 0) {
        while (*go == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (before) before(r);
        ShmOptions o;
        o.local_rank = r;
        o.local_size = n;
        o.chunk_bytes = chunk_bytes;
        o.timeout = timeout;
        if (pids_watched) o.peer_pids.assign(table.as<pid_t>(), table.as<pid_t>() + n);
        ShmCommunicator comm(segment.data, o);
        Status s = body(comm, r, out.as<char>(out_bytes * r));
        RankResult* res = results.as<RankResult>() + r;
        res->ok = s.ok() ? 1 : 0;
        std::snprintf(res->message, sizeof res->message, "%s", s.message().c_str());
        _exit(0);
      }
      pids[r] = pid;
      table.as<pid_t>()[r] = pid;
    }
    *go = 1;
    std::vector<int> statuses;
    for (pid_t p : pids) {
      int st = 0;
      waitpid(p, &st, 0);
      statuses.push_back(st);
    }
    return statuses;
  }

  const RankResult& result(int r) const { return results.as<RankResult>()[r]; }
  template <typename T>
  const T* output(int r) const {
    return out.as<T>(out_bytes * r);
  }

  int n;
  size_t chunk_bytes;
  std::chrono::milliseconds timeout;
  SharedArea segment;
  SharedArea results;
  SharedArea out;
  size_t out_bytes;
};

// The value rank r contributes at index i: distinct per rank and index, with fractions
// that make the summation order visible in the last bits.
float Value(int r, size_t i) { return static_cast<float>(std::sin(0.37 * i + r) * (r + 1.5)); }

uint16_t Bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float FromBf16(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

TEST_CASE("shm allreduce: float32 sums across chunks are bit-identical to local-rank order") {
  const int n = 3;
  const size_t count = 10007;  // not a multiple of the chunk or of the slices
  Fixture f(n, 4096, count * sizeof(float));
  auto statuses = f.Run([&](ShmCommunicator& comm, int r, void* out) {
    auto* data = static_cast<float*>(out);
    for (size_t i = 0; i < count; ++i) data[i] = Value(r, i);
    return comm.Allreduce(data, count, ShmDtype::kFloat32, ShmOp::kSum);
  });
  for (int r = 0; r < n; ++r) {
    REQUIRE(statuses[r] == 0);
    INFO(f.result(r).message);
    REQUIRE(f.result(r).ok == 1);
  }
  for (size_t i = 0; i < count; ++i) {
    const float expected = (Value(0, i) + Value(1, i)) + Value(2, i);
    for (int r = 0; r < n; ++r) {
      float got = f.output<float>(r)[i];
      REQUIRE(std::memcmp(&got, &expected, sizeof got) == 0);
    }
  }
}

TEST_CASE("shm allreduce: every dtype and op, averages divided once") {
  const int n = 2;
  const size_t count = 300;
  struct Case {
    ShmDtype dtype;
    ShmOp op;
    double divisor;
  };
  const std::vector<Case> cases = {
      {ShmDtype::kFloat64, ShmOp::kSum, 1},     {ShmDtype::kFloat32, ShmOp::kSum, 2},
      {ShmDtype::kFloat32, ShmOp::kMax, 1},     {ShmDtype::kFloat32, ShmOp::kMin, 1},
      {ShmDtype::kFloat64, ShmOp::kProduct, 1}, {ShmDtype::kInt64, ShmOp::kSum, 1},
      {ShmDtype::kInt32, ShmOp::kMax, 1},       {ShmDtype::kUInt8, ShmOp::kSum, 1},
      {ShmDtype::kBFloat16, ShmOp::kSum, 1},    {ShmDtype::kBFloat16, ShmOp::kSum, 2},
      {ShmDtype::kFloat16, ShmOp::kSum, 1},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(traintl::torch::detail::ShmDtypeName(c.dtype)
                    << " op " << static_cast<int>(c.op) << " divisor " << c.divisor) {
      const size_t elem = traintl::torch::detail::ShmDtypeSize(c.dtype);
      Fixture f(n, 256, count * elem);
      auto fill = [&](int r, size_t i, void* data) {
        const float v = Value(r, i);
        switch (c.dtype) {
          case ShmDtype::kFloat32:
            static_cast<float*>(data)[i] = v;
            break;
          case ShmDtype::kFloat64:
            static_cast<double*>(data)[i] = v;
            break;
          case ShmDtype::kInt32:
            static_cast<int32_t*>(data)[i] = static_cast<int32_t>(v * 1000);
            break;
          case ShmDtype::kInt64:
            static_cast<int64_t*>(data)[i] = static_cast<int64_t>(v * 1e6) * 1000003;
            break;
          case ShmDtype::kUInt8:
            static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(i * (r + 3));
            break;
          case ShmDtype::kBFloat16:
            static_cast<uint16_t*>(data)[i] = Bf16(v);
            break;
          case ShmDtype::kFloat16:
            static_cast<_Float16*>(data)[i] = static_cast<_Float16>(v);
            break;
        }
      };
      auto statuses = f.Run([&](ShmCommunicator& comm, int r, void* out) {
        for (size_t i = 0; i < count; ++i) fill(r, i, out);
        return comm.Allreduce(out, count, c.dtype, c.op, c.divisor);
      });
      for (int r = 0; r < n; ++r) {
        REQUIRE(statuses[r] == 0);
        INFO(f.result(r).message);
        REQUIRE(f.result(r).ok == 1);
        REQUIRE(std::memcmp(f.output<char>(0), f.output<char>(r), count * elem) == 0);
      }
      std::vector<char> a(count * elem), b(count * elem);
      for (size_t i = 0; i < count; ++i) {
        fill(0, i, a.data());
        fill(1, i, b.data());
      }
      for (size_t i = 0; i < count; ++i) {
        switch (c.dtype) {
          case ShmDtype::kFloat32: {
            const float x = reinterpret_cast<float*>(a.data())[i];
            const float y = reinterpret_cast<float*>(b.data())[i];
            float want = c.op == ShmOp::kSum   ? x + y
                         : c.op == ShmOp::kMax ? std::max(x, y)
                                               : std::min(x, y);
            want /= static_cast<float>(c.divisor);
            REQUIRE(f.output<float>(0)[i] == want);
            break;
          }
          case ShmDtype::kFloat64: {
            const double x = reinterpret_cast<double*>(a.data())[i];
            const double y = reinterpret_cast<double*>(b.data())[i];
            REQUIRE(f.output<double>(0)[i] == (c.op == ShmOp::kSum ? x + y : x * y));
            break;
          }
          case ShmDtype::kInt64:
            REQUIRE(f.output<int64_t>(0)[i] == reinterpret_cast<int64_t*>(a.data())[i] +
                                                   reinterpret_cast<int64_t*>(b.data())[i]);
            break;
          case ShmDtype::kInt32:
            REQUIRE(f.output<int32_t>(0)[i] == std::max(reinterpret_cast<int32_t*>(a.data())[i],
                                                        reinterpret_cast<int32_t*>(b.data())[i]));
            break;
          case ShmDtype::kUInt8:
            REQUIRE(f.output<uint8_t>(0)[i] ==
                    static_cast<uint8_t>(reinterpret_cast<uint8_t*>(a.data())[i] +
                                         reinterpret_cast<uint8_t*>(b.data())[i]));
            break;
          case ShmDtype::kBFloat16: {
            // Widened to float, summed, divided, rounded once (as torch's bf16 add and div_).
            const float x = FromBf16(reinterpret_cast<uint16_t*>(a.data())[i]);
            const float y = FromBf16(reinterpret_cast<uint16_t*>(b.data())[i]);
            const uint16_t sum = Bf16(x + y);
            const uint16_t want =
                c.divisor == 1 ? sum : Bf16(FromBf16(sum) / static_cast<float>(c.divisor));
            REQUIRE(f.output<uint16_t>(0)[i] == want);
            break;
          }
          case ShmDtype::kFloat16: {
            const float x = static_cast<float>(reinterpret_cast<_Float16*>(a.data())[i]);
            const float y = static_cast<float>(reinterpret_cast<_Float16*>(b.data())[i]);
            const _Float16 want = static_cast<_Float16>(x + y);
            REQUIRE(std::memcmp(&f.output<_Float16>(0)[i], &want, 2) == 0);
            break;
          }
        }
      }
    }
  }
}

TEST_CASE("shm broadcast, allgather and barrier over several chunks") {
  const int n = 3;
  const size_t bytes = 5000;  // 1.2 chunks of 4096
  Fixture f(n, 4096, bytes * (n + 1));
  auto statuses = f.Run([&](ShmCommunicator& comm, int r, void* out) {
    auto* p = static_cast<uint8_t*>(out);
    for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(i * 7 + r);
    TRAINTL_RETURN_IF_ERROR(comm.Broadcast(p, bytes, /*root=*/1));
    std::vector<uint8_t> mine(bytes);
    for (size_t i = 0; i < bytes; ++i) mine[i] = static_cast<uint8_t>(i + 31 * r);
    TRAINTL_RETURN_IF_ERROR(comm.Barrier());
    TRAINTL_RETURN_IF_ERROR(comm.Allgather(mine.data(), bytes, p + bytes));
    return comm.Barrier();
  });
  for (int r = 0; r < n; ++r) {
    REQUIRE(statuses[r] == 0);
    INFO(f.result(r).message);
    REQUIRE(f.result(r).ok == 1);
    const uint8_t* p = f.output<uint8_t>(r);
    for (size_t i = 0; i < bytes; ++i) REQUIRE(p[i] == static_cast<uint8_t>(i * 7 + 1));
    for (int q = 0; q < n; ++q) {
      for (size_t i = 0; i < bytes; ++i) {
        REQUIRE(p[bytes * (q + 1) + i] == static_cast<uint8_t>(i + 31 * q));
      }
    }
  }
}

TEST_CASE("shm node step: the leader's step runs between the node's reduction and the copy out") {
  const int n = 2;
  const size_t count = 3000;
  Fixture f(n, 1024, count * sizeof(double) + 8);
  auto statuses = f.Run([&](ShmCommunicator& comm, int r, void* out) {
    auto* d = static_cast<double*>(out);
    for (size_t i = 0; i < count; ++i) d[i] = static_cast<double>(i + r);
    // What another node's leader would add: 1000 per element.
    auto step = [](void* chunk, size_t m) {
      for (size_t i = 0; i < m; ++i) static_cast<double*>(chunk)[i] += 1000;
      return Status::Ok();
    };
    TRAINTL_RETURN_IF_ERROR(
        comm.Allreduce(d, count, ShmDtype::kFloat64, ShmOp::kSum, /*divisor=*/4, step));
    // A broadcast whose root is on another node: the step fills the chunk.
    auto* bytes = reinterpret_cast<uint8_t*>(d + count);
    auto fill = [](void* chunk, size_t m) {
      std::memset(chunk, 0x5a, m);
      return Status::Ok();
    };
    return comm.Broadcast(bytes, 8, /*root=*/-1, fill);
  });
  for (int r = 0; r < n; ++r) {
    REQUIRE(statuses[r] == 0);
    INFO(f.result(r).message);
    REQUIRE(f.result(r).ok == 1);
    const double* d = f.output<double>(r);
    for (size_t i = 0; i < count; ++i) REQUIRE(d[i] == (2.0 * i + 1 + 1000) / 4);
    const auto* b = reinterpret_cast<const uint8_t*>(d + count);
    for (int i = 0; i < 8; ++i) REQUIRE(b[i] == 0x5a);
  }
}

TEST_CASE("shm: a failing leader step fails every rank of the node with its reason") {
  Fixture f(3, 1024, 64);
  f.Run([&](ShmCommunicator& comm, int, void* out) {
    auto step = [](void*, size_t) { return Status::Unavailable("peer node lost"); };
    return comm.Allreduce(out, 4, ShmDtype::kFloat32, ShmOp::kSum, 1, step);
  });
  for (int r = 0; r < 3; ++r) {
    CHECK(f.result(r).ok == 0);
    CHECK(std::string(f.result(r).message).find("peer node lost") != std::string::npos);
  }
}

TEST_CASE("shm: a peer that dies mid-collective fails the others by its pid, not the timeout") {
  Fixture f(3, 4096, 64, std::chrono::seconds(60));
  auto statuses = f.Run([&](ShmCommunicator& comm, int r, void* out) {
    TRAINTL_RETURN_IF_ERROR(comm.Barrier());
    if (r == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      kill(getpid(), SIGKILL);
    }
    return comm.Allreduce(out, 4, ShmDtype::kFloat32, ShmOp::kSum);
  });
  CHECK(WIFSIGNALED(statuses[2]));
  for (int r = 0; r < 2; ++r) {
    INFO(f.result(r).message);
    CHECK(f.result(r).ok == 0);
    CHECK(std::string(f.result(r).message).find("local rank 2") != std::string::npos);
    CHECK(std::string(f.result(r).message).find("exited") != std::string::npos);
  }
}

TEST_CASE("shm: a silent peer fails the others after the timeout, and ranks that disagree fail") {
  SECTION("timeout") {
    Fixture f(2, 4096, 64, std::chrono::milliseconds(300));
    f.Run([&](ShmCommunicator& comm, int r, void* out) {
      if (r == 1) {
        std::this_thread::sleep_for(std::chrono::seconds(2));
        return Status::Ok();
      }
      return comm.Allreduce(out, 4, ShmDtype::kFloat32, ShmOp::kSum);
    });
    CHECK(f.result(0).ok == 0);
    CHECK(std::string(f.result(0).message).find("did not arrive within 300 ms") !=
          std::string::npos);
  }
  SECTION("different sizes") {
    Fixture f(2, 4096, 64);
    f.Run([&](ShmCommunicator& comm, int r, void* out) {
      return comm.Allreduce(out, r == 0 ? 4 : 5, ShmDtype::kFloat32, ShmOp::kSum);
    });
    for (int r = 0; r < 2; ++r) {
      CHECK(f.result(r).ok == 0);
      CHECK(std::string(f.result(r).message).find("different collectives") != std::string::npos);
    }
  }
}

TEST_CASE("shm segment: a memfd other processes open through /proc, never a /dev/shm name") {
  auto count_dev_shm = [] {
    int entries = 0;
    if (DIR* d = opendir("/dev/shm")) {
      while (readdir(d) != nullptr) ++entries;
      closedir(d);
    }
    return entries;
  };
  const int before = count_dev_shm();
  auto created = ShmSegment::Create(8192);
  REQUIRE(created.ok());
  ShmSegment seg = std::move(created).value();
  REQUIRE(seg.fd() >= 0);
  CHECK(count_dev_shm() == before);
  const pid_t parent = getpid();
  const int fd = seg.fd();
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto opened = ShmSegment::Open(parent, fd, 8192);
    if (!opened.ok()) _exit(2);
    static_cast<char*>(opened->data())[100] = 'x';
    auto wrong = ShmSegment::Open(parent, fd, 4096);  // a size that was not announced
    _exit(wrong.ok() ? 3 : 0);
  }
  int st = 0;
  waitpid(child, &st, 0);
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  CHECK(static_cast<char*>(seg.data())[100] == 'x');
  CHECK_FALSE(ShmSegment::Open(parent, 999, 8192).ok());
}
