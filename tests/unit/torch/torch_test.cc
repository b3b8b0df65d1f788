// Tests of traintl::torch. Multi-rank behaviour runs in torch_test_rank processes (one per
// rank, rendezvous through a FileStore in a temp dir); the sampler runs in-process.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <traintl/torch.h>
#include <traintl/torch_recovery.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "worker/torch/store.h"

extern char** environ;

namespace {

namespace tt = traintl::torch;

// A hung rank is a failure, not a stuck test run; generous for a loaded 2-core machine.
constexpr std::chrono::seconds kWatchdog{120};

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern =
        std::string(base != nullptr && *base ? base : "/tmp") + "/traintl-torch-test-XXXXXX";
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() { (void)traintl::RemoveAll(path_); }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct Proc {
  pid_t pid = -1;
  std::string log;
};

Proc Spawn(const std::vector<std::string>& args, const std::string& log) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  Proc p;
  p.log = log;
  const int rc = posix_spawn(&p.pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  REQUIRE(rc == 0);
  return p;
}

// Exit code, 128 + signal when killed by one, or -1 when the watchdog had to kill it.
int Wait(const Proc& p, std::chrono::seconds limit = kWatchdog) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(p.pid, &status, WNOHANG);
    if (r == p.pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(p.pid, SIGKILL);
      waitpid(p.pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -2;
}

std::string Log(const Proc& p) { return traintl::TailFile(p.log, 4000); }

// Runs `world` ranks of torch_test_rank in `mode`; returns their exit codes.
std::vector<int> RunRanks(const TempDir& dir, const std::string& mode, int world,
                          const std::vector<std::string>& extra,
                          std::vector<Proc>* procs_out = nullptr) {
  std::vector<Proc> procs;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> args = {TRAINTL_TORCH_TEST_RANK,
                                     mode,
                                     "--rank",
                                     std::to_string(r),
                                     "--world",
                                     std::to_string(world),
                                     "--store",
                                     dir / (mode + ".store"),
                                     "--out",
                                     dir / (mode + ".rank" + std::to_string(r))};
    args.insert(args.end(), extra.begin(), extra.end());
    procs.push_back(Spawn(args, dir / (mode + ".log" + std::to_string(r))));
  }
  std::vector<int> codes;
  for (const auto& p : procs) codes.push_back(Wait(p));
  for (size_t r = 0; r < procs.size(); ++r) {
    if (codes[r] != 0)
      UNSCOPED_INFO("rank " << r << " exit " << codes[r] << ":\n" << Log(procs[r]));
  }
  if (procs_out != nullptr) *procs_out = procs;
  return codes;
}

std::vector<float> ReadFloats(const std::string& path) {
  auto data = traintl::ReadFile(path);
  REQUIRE(data.ok());
  REQUIRE(data->size() % sizeof(float) == 0);
  std::vector<float> out(data->size() / sizeof(float));
  std::memcpy(out.data(), data->data(), data->size());
  return out;
}

}  // namespace

TEST_CASE("ddp: two ranks stay bit-identical and match one process on both batches") {
  // A tiny bucket cap splits the model into several buckets (one per parameter).
  const std::string bucket = GENERATE(std::string("26214400"), std::string("200"));
  // reload: torch::load into the prepared model (how a job resumes) keeps the hooks working.
  const std::string reload = GENERATE(std::string("0"), std::string("1"));
  INFO("bucket_cap_bytes " << bucket << " reload " << reload);
  TempDir dir;
  const std::vector<std::string> extra = {"--steps",        "6",    "--global-batch", "16",
                                          "--bucket-bytes", bucket, "--reload",       reload};
  REQUIRE((RunRanks(dir, "ddp", 2, extra) == std::vector<int>{0, 0}));
  TempDir single_dir;
  REQUIRE((RunRanks(single_dir, "ddp", 1, extra) == std::vector<int>{0}));

  auto r0 = traintl::ReadFile(dir / "ddp.rank0");
  auto r1 = traintl::ReadFile(dir / "ddp.rank1");
  REQUIRE(r0.ok());
  REQUIRE(r1.ok());
  REQUIRE(!r0->empty());
  CHECK(*r0 == *r1);  // bit-identical

  const auto a = ReadFloats(dir / "ddp.rank0");
  const auto ref = ReadFloats(single_dir / "ddp.rank0");
  REQUIRE(a.size() == ref.size());
  float max_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) max_diff = std::max(max_diff, std::abs(a[i] - ref[i]));
  INFO("max |ddp - single| = " << max_diff);
  CHECK(max_diff <= 1e-6f);
  // And training did something: the reference moved away from rank 1's own initialization.
  CHECK(max_diff < 1.0f);
}

TEST_CASE("ddp: parameters without gradients (on some or all ranks) do not hang") {
  TempDir dir;
  REQUIRE((RunRanks(dir, "unused", 2, {"--steps", "4"}) == std::vector<int>{0, 0}));
  auto r0 = traintl::ReadFile(dir / "unused.rank0");
  auto r1 = traintl::ReadFile(dir / "unused.rank1");
  REQUIRE(r0.ok());
  REQUIRE(r1.ok());
  CHECK(*r0 == *r1);
}

TEST_CASE("process group: allreduce, broadcast and barrier across three ranks") {
  TempDir dir;
  CHECK((RunRanks(dir, "collectives", 3, {}) == std::vector<int>{0, 0, 0}));
}

TEST_CASE("process group: a peer killed mid-allreduce fails the other rank, not hangs") {
  TempDir dir;
  std::vector<Proc> procs;
  const auto codes = RunRanks(dir, "die", 2, {"--timeout-ms", "3000"}, &procs);
  INFO("rank 0 log:\n" << Log(procs[0]));
  CHECK(codes[0] == 3);  // CollectiveError, not the watchdog (-1)
  CHECK(codes[1] == 128 + SIGKILL);
  CHECK(Log(procs[0]).find("CollectiveError") != std::string::npos);
}

TEST_CASE("process group: a silent peer fails the other rank after the timeout") {
  TempDir dir;
  std::vector<Proc> procs;
  for (int r = 0; r < 2; ++r) {
    procs.push_back(Spawn({TRAINTL_TORCH_TEST_RANK, "hang", "--rank", std::to_string(r), "--world",
                           "2", "--store", dir / "hang.store", "--timeout-ms", "3000"},
                          dir / ("hang.log" + std::to_string(r))));
  }
  const int code0 = Wait(procs[0]);
  kill(procs[1].pid, SIGKILL);
  Wait(procs[1]);
  INFO("rank 0 log:\n" << Log(procs[0]));
  CHECK(code0 == 3);
}

TEST_CASE("process group over shared memory: three ranks on one node") {
  // Collectives run on the caller's thread by default on one node; "1" puts them on the
  // group's thread (the mode of multi-node groups).
  const std::string async = GENERATE(std::string(""), std::string("1"));
  INFO("TRAINTL_SHM_ASYNC=" << async);
  TempDir dir;
  setenv("TRAINTL_SHM_ASYNC", async.c_str(), 1);
  const auto codes = RunRanks(dir, "collectives", 3, {"--ranks-per-node", "3", "--backend", "shm"});
  unsetenv("TRAINTL_SHM_ASYNC");
  CHECK((codes == std::vector<int>{0, 0, 0}));
}

TEST_CASE("process group hierarchical: shared memory in each node and Gloo between leaders") {
  // Four ranks two to a node, and three ranks on nodes of two and one.
  const int world = GENERATE(4, 3);
  TempDir dir;
  CHECK((RunRanks(dir, "collectives", world, {"--ranks-per-node", "2", "--backend", "shm+gloo"}) ==
         std::vector<int>(world, 0)));
}

TEST_CASE("process group over shared memory: TRAINTL_SHM_COLLECTIVES=0 keeps flat Gloo") {
  TempDir dir;
  setenv("TRAINTL_SHM_COLLECTIVES", "0", 1);
  const auto codes =
      RunRanks(dir, "collectives", 2, {"--ranks-per-node", "2", "--backend", "gloo"});
  unsetenv("TRAINTL_SHM_COLLECTIVES");
  CHECK((codes == std::vector<int>{0, 0}));
}

TEST_CASE("ddp over shared memory: ranks bit-identical, matching one process and the Gloo path") {
  const std::string bucket = GENERATE(std::string("26214400"), std::string("200"));
  const int per_node = GENERATE(2, 1);  // of the four-rank run
  INFO("bucket_cap_bytes " << bucket << " ranks per node " << per_node);
  const std::vector<std::string> extra = {"--steps",        "6",    "--global-batch",   "16",
                                          "--bucket-bytes", bucket, "--ranks-per-node", "2",
                                          "--backend",      "shm"};
  TempDir dir;
  REQUIRE((RunRanks(dir, "ddp", 2, extra) == std::vector<int>{0, 0}));
  // Four ranks, two per node: hierarchical; or one per node: flat Gloo.
  TempDir four;
  REQUIRE((RunRanks(four, "ddp", 4,
                    {"--steps", "6", "--global-batch", "16", "--bucket-bytes", bucket,
                     "--ranks-per-node", per_node == 1 ? "1" : "2", "--backend",
                     per_node == 1 ? "gloo" : "shm+gloo"}) == std::vector<int>{0, 0, 0, 0}));
  TempDir single_dir;
  REQUIRE((RunRanks(single_dir, "ddp", 1, {"--steps", "6", "--global-batch", "16"}) ==
           std::vector<int>{0}));
  auto r0 = traintl::ReadFile(dir / "ddp.rank0");
  auto r1 = traintl::ReadFile(dir / "ddp.rank1");
  REQUIRE(r0.ok());
  REQUIRE(r1.ok());
  REQUIRE(!r0->empty());
  CHECK(*r0 == *r1);  // bit-identical across ranks
  for (int r = 1; r < 4; ++r) {
    auto other = traintl::ReadFile(four / ("ddp.rank" + std::to_string(r)));
    REQUIRE(other.ok());
    CHECK(*other == *traintl::ReadFile(four / "ddp.rank0"));
  }
  const auto ref = ReadFloats(single_dir / "ddp.rank0");
  for (const auto* d : {&dir, &four}) {
    const auto got = ReadFloats(*d / "ddp.rank0");
    REQUIRE(got.size() == ref.size());
    float max_diff = 0;
    for (size_t i = 0; i < got.size(); ++i)
      max_diff = std::max(max_diff, std::abs(got[i] - ref[i]));
    INFO("max |ddp - single| = " << max_diff);
    CHECK(max_diff <= 1e-6f);
  }
}

TEST_CASE("process group over shared memory: a killed or silent peer fails the others") {
  const std::string mode = GENERATE(std::string("die"), std::string("hang"));
  INFO(mode);
  TempDir dir;
  std::vector<Proc> procs;
  for (int r = 0; r < 2; ++r) {
    procs.push_back(
        Spawn({TRAINTL_TORCH_TEST_RANK, mode, "--rank", std::to_string(r), "--world", "2",
               "--store", dir / "s.store", "--timeout-ms", "3000", "--ranks-per-node", "2"},
              dir / ("s.log" + std::to_string(r))));
  }
  const int code0 = Wait(procs[0]);
  kill(procs[1].pid, SIGKILL);
  Wait(procs[1]);
  INFO("rank 0 log:\n" << Log(procs[0]));
  CHECK(code0 == 3);
  // A dead peer is noticed by its pid (at once), not by the 3 s timeout.
  CHECK(Log(procs[0]).find(mode == "die" ? "exited" : "did not arrive within 3000 ms") !=
        std::string::npos);
}

TEST_CASE("sampler: disjoint, equal-size shards padded to cover every sample") {
  for (int64_t n : {0, 1, 7, 10, 11, 64}) {
    for (int world : {1, 2, 3, 4}) {
      INFO("n=" << n << " world=" << world);
      std::vector<int64_t> all;
      size_t size = 0;
      for (int r = 0; r < world; ++r) {
        const auto shard = tt::detail::ShardIndices(n, r, world, /*shuffle=*/true, 7, 0, false);
        if (r == 0) size = shard.size();
        CHECK(shard.size() == size);
        all.insert(all.end(), shard.begin(), shard.end());
      }
      CHECK(size == static_cast<size_t>((n + world - 1) / world));
      std::set<int64_t> distinct(all.begin(), all.end());
      CHECK(distinct.size() == static_cast<size_t>(n));  // every sample, padding repeats
      if (n > 0) {
        CHECK(*distinct.begin() == 0);
        CHECK(*distinct.rbegin() == n - 1);
      }
      CHECK(all.size() - distinct.size() == size * world - static_cast<size_t>(n));

      // drop_last: truncated instead of padded, so no sample appears twice.
      std::vector<int64_t> kept;
      for (int r = 0; r < world; ++r) {
        const auto shard = tt::detail::ShardIndices(n, r, world, true, 7, 0, /*drop_last=*/true);
        CHECK(shard.size() == static_cast<size_t>(n / world));
        kept.insert(kept.end(), shard.begin(), shard.end());
      }
      CHECK(std::set<int64_t>(kept.begin(), kept.end()).size() == kept.size());
    }
  }
}

TEST_CASE("sampler: unshuffled shards interleave like DistributedSampler") {
  CHECK((tt::detail::ShardIndices(5, 0, 2, false, 0, 0, false) == std::vector<int64_t>{0, 2, 4}));
  CHECK((tt::detail::ShardIndices(5, 1, 2, false, 0, 0, false) == std::vector<int64_t>{1, 3, 0}));
  CHECK((tt::detail::ShardIndices(5, 1, 2, false, 0, 0, true) == std::vector<int64_t>{1, 3}));
  CHECK((tt::detail::ShardIndices(2, 3, 4, false, 0, 0, false) == std::vector<int64_t>{1}));
}

TEST_CASE("sampler: the same shards as torch.utils.data.DistributedSampler") {
  // Expected values printed by Debian's python3-torch 1.13:
  //   s = DistributedSampler(range(n), num_replicas=w, rank=r, shuffle=True, seed=seed,
  //                          drop_last=dl); s.set_epoch(epoch); list(s)
  using V = std::vector<int64_t>;
  const V a = tt::detail::ShardIndices(23, 1, 2, true, 5, 2, false);
  const V b = tt::detail::ShardIndices(10, 0, 3, true, 0, 0, false);
  const V c = tt::detail::ShardIndices(10, 2, 3, true, 7, 1, true);
  CHECK(a == V({15, 9, 20, 14, 12, 18, 0, 3, 8, 4, 19, 10}));
  CHECK(b == V({4, 5, 0, 2}));
  CHECK(c == V({0, 6, 8}));
}

TEST_CASE("sampler: shuffles are deterministic per epoch and differ between epochs") {
  const auto e0 = tt::detail::ShardIndices(100, 1, 2, true, 3, 0, false);
  CHECK(e0 == tt::detail::ShardIndices(100, 1, 2, true, 3, 0, false));
  const auto e1 = tt::detail::ShardIndices(100, 1, 2, true, 3, 1, false);
  CHECK(e0 != e1);
  CHECK(std::set<int64_t>(e0.begin(), e0.end()).size() == e0.size());
  CHECK(e0 != tt::detail::ShardIndices(100, 1, 2, true, 4, 0, false));  // seed matters
  CHECK(e0 != tt::detail::ShardIndices(100, 1, 2, false, 3, 0, false));
}

namespace {

// Sample i is the tensor {i, -i} with target i.
struct RangeDataset {
  int64_t n;
  torch::data::Example<> get(size_t i) {
    const auto v = static_cast<float>(i);
    return {torch::tensor({v, -v}), torch::tensor(static_cast<int64_t>(i))};
  }
  size_t size() const { return static_cast<size_t>(n); }
};

struct TorchStyleDataset : torch::data::datasets::Dataset<TorchStyleDataset> {
  torch::data::Example<> get(size_t i) override {
    return {torch::full({3}, static_cast<float>(i)), torch::tensor(static_cast<int64_t>(i))};
  }
  torch::optional<size_t> size() const override { return 10; }
};

std::vector<int64_t> Targets(tt::DistributedDataLoader<RangeDataset>& loader,
                             std::vector<int64_t>* batch_sizes = nullptr) {
  std::vector<int64_t> out;
  for (auto& batch : loader) {
    REQUIRE(batch.data.dim() == 2);
    REQUIRE(batch.data.size(1) == 2);
    REQUIRE(batch.target.size(0) == batch.data.size(0));
    REQUIRE(batch.data.device() == torch::Device(torch::kCPU));
    CHECK(torch::equal(batch.data.select(1, 0), batch.target.to(torch::kFloat)));
    if (batch_sizes != nullptr) batch_sizes->push_back(batch.data.size(0));
    for (int64_t i = 0; i < batch.target.size(0); ++i)
      out.push_back(batch.target[i].item<int64_t>());
  }
  return out;
}

}  // namespace

TEST_CASE("data loader: batches of this rank's shard, stacked, in sampler order") {
  const tt::DataLoaderOptions options{.batch_size = 4, .shuffle = true, .seed = 5};
  std::set<int64_t> seen;
  for (int rank = 0; rank < 2; ++rank) {
    tt::DistributedDataLoader<RangeDataset> loader(RangeDataset{11}, options, rank, 2, torch::kCPU);
    loader.set_epoch(2);
    std::vector<int64_t> sizes;
    const auto targets = Targets(loader, &sizes);
    CHECK(targets == loader.indices());
    CHECK((sizes == std::vector<int64_t>{4, 2}));  // 6 samples per rank, the last batch short
    CHECK(loader.size() == 2);
    CHECK(Targets(loader) == targets);  // re-iterable, same epoch, same order
    seen.insert(targets.begin(), targets.end());
  }
  CHECK(seen.size() == 11);
}

TEST_CASE("data loader: drop_last, epochs, worker threads and torch datasets") {
  tt::DistributedDataLoader<RangeDataset> loader(
      RangeDataset{23}, {.batch_size = 5, .shuffle = true, .seed = 1, .drop_last = true}, 1, 2,
      torch::kCPU);
  std::vector<int64_t> sizes;
  const auto epoch0 = Targets(loader, &sizes);
  CHECK((sizes == std::vector<int64_t>{5, 5}));  // 11 samples: the short batch is dropped
  loader.set_epoch(1);
  CHECK(Targets(loader) != epoch0);

  for (int workers : {1, 3}) {
    INFO("num_workers " << workers);
    tt::DistributedDataLoader<RangeDataset> threaded(
        RangeDataset{23},
        {.batch_size = 5, .shuffle = true, .seed = 1, .drop_last = true, .num_workers = workers}, 1,
        2, torch::kCPU);
    CHECK(Targets(threaded) == epoch0);
    // Leaving an epoch early stops its threads.
    for (auto& batch : threaded) {
      CHECK(batch.data.size(0) == 5);
      break;
    }
  }

  struct Unlabelled {
    torch::data::Example<> get(size_t i) {
      return {torch::full({2}, static_cast<float>(i)), torch::Tensor()};
    }
    size_t size() const { return 5; }
  };
  tt::DistributedDataLoader<Unlabelled> unlabelled(Unlabelled{}, {.batch_size = 5}, 0, 1,
                                                   torch::kCPU);
  for (auto& batch : unlabelled) {
    CHECK(batch.data.size(0) == 5);
    CHECK_FALSE(batch.target.defined());
  }

  tt::DistributedDataLoader<RangeDataset> empty(RangeDataset{0}, {}, 0, 2, torch::kCPU);
  CHECK(empty.begin() == empty.end());

  // A torch::data dataset works through prepare_data_loader (one rank outside a worker).
  auto torch_loader = tt::prepare_data_loader(TorchStyleDataset(), {.batch_size = 4});
  int64_t rows = 0;
  for (auto& batch : torch_loader) {
    CHECK(batch.data.size(1) == 3);
    rows += batch.data.size(0);
  }
  CHECK(rows == 10);
}

TEST_CASE("prepare_model outside a worker is single-rank and keeps the holder type") {
  torch::nn::Linear linear(3, 2);
  torch::nn::Linear same = tt::prepare_model(linear);
  CHECK(same.ptr() == linear.ptr());
  auto shared = std::make_shared<torch::nn::LinearImpl>(3, 2);
  std::shared_ptr<torch::nn::LinearImpl> same_shared = tt::prepare_model(shared);
  CHECK(same_shared == shared);
  CHECK(tt::get_device() == torch::Device(torch::kCPU));
}

namespace {

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  close(fd);
  return ntohs(addr.sin_port);
}

std::string DigitsCsv() {
  const char* env = std::getenv("TRAINTL_DIGITS_CSV");
  return env != nullptr ? env : "/tmp/traintl-digits/digits.csv";
}

}  // namespace

TEST_CASE("digits example: two ranks from the worker context reach 95% and resume") {
  const std::string csv = DigitsCsv();
  if (!traintl::PathExists(csv)) {
    WARN("skipped: no " << csv
                        << " (examples/digits/fetch_data.sh /tmp/traintl-digits, or "
                           "set TRAINTL_DIGITS_CSV)");
    return;
  }
  TempDir dir;
  auto run_attempt = [&](int attempt, int epochs, const std::string& checkpoint) {
    const int port = FreeLoopbackPort();
    std::vector<Proc> procs;
    for (int r = 0; r < 2; ++r) {
      const std::string out = dir / ("a" + std::to_string(attempt) + "_rank" + std::to_string(r));
      REQUIRE(traintl::MakeDirs(out).ok());
      nlohmann::json ctx = {
          {"job_id", "test"},
          {"job_name", "digits"},
          {"attempt", attempt},
          {"world_rank", r},
          {"world_size", 2},
          {"local_rank", r},
          {"local_world_size", 2},
          {"node_rank", 0},
          {"master_addr", "127.0.0.1"},
          {"master_port", port},
          {"collective_timeout_s", 60},
          {"use_gpu", false},
          {"trial_dir", dir.path()},
          {"datasets", {{"digits", {{"uri", "file://" + csv}, {"split", false}}}}},
          {"config", {{"lr", 0.01}, {"epochs", epochs}, {"batch_size", 32}, {"seed", 0}}}};
      ctx["checkpoint_dir"] = checkpoint.empty() ? nlohmann::json() : nlohmann::json(checkpoint);
      REQUIRE(traintl::WriteFileAtomic(out + "/context.json", ctx.dump()).ok());
      procs.push_back(Spawn({TRAINTL_TORCH_TEST_RANK, "entry", TRAINTL_DIGITS_LIBRARY, "train_loop",
                             out + "/context.json", out},
                            out + "/log"));
    }
    for (int r = 0; r < 2; ++r) {
      INFO("rank " << r << " log:\n" << Log(procs[r]));
      REQUIRE(Wait(procs[r]) == 0);
    }
    std::vector<nlohmann::json> reports[2];
    for (int r = 0; r < 2; ++r) {
      auto text = traintl::ReadFile(
          dir / ("a" + std::to_string(attempt) + "_rank" + std::to_string(r) + "/reports.jsonl"));
      REQUIRE(text.ok());
      std::istringstream lines(*text);
      std::string line;
      while (std::getline(lines, line)) reports[r].push_back(nlohmann::json::parse(line));
    }
    // Each rank evaluates its own copy of the model: equal accuracies mean the replicas
    // stayed identical (also after torch::load into the prepared model on resume).
    REQUIRE(reports[0].size() == reports[1].size());
    for (size_t k = 0; k < reports[0].size(); ++k) {
      CHECK(reports[0][k]["metrics"] == reports[1][k]["metrics"]);
      CHECK_FALSE(reports[1][k].contains("checkpoint"));
    }
    return reports[0];
  };

  const auto first = run_attempt(1, 3, "");
  REQUIRE(first.size() == 3);
  CHECK(first.back()["metrics"]["epoch"] == 2);
  REQUIRE(first.back().contains("checkpoint"));

  // A restarted attempt resumes after the checkpoint's epoch and finishes the job.
  const auto second = run_attempt(2, 20, first.back()["checkpoint"].get<std::string>());
  REQUIRE(second.size() == 17);
  CHECK(second.front()["metrics"]["epoch"] == 3);
  const double accuracy = second.back()["metrics"]["val_accuracy"].get<double>();
  INFO("val_accuracy " << accuracy);
  CHECK(accuracy >= 0.95);
  CHECK(second.back()["metrics"]["loss"].get<double>() <
        first.front()["metrics"]["loss"].get<double>());
}

namespace {

traintl::torch::detail::Bytes B(const std::string& s) { return {s.begin(), s.end()}; }

}  // namespace

TEST_CASE("rendezvous store: set, get, add, compare-set, delete, check, wait") {
  using traintl::torch::detail::StoreClient;
  using traintl::torch::detail::StoreServer;
  using namespace std::chrono_literals;
  auto server = StoreServer::Start("127.0.0.1", 0);
  REQUIRE(server.ok());
  const int port = (*server)->port();
  REQUIRE(port > 0);
  auto a = StoreClient::Connect("127.0.0.1", port, 5s);
  auto b = StoreClient::Connect("127.0.0.1", port, 5s);
  REQUIRE(a.ok());
  REQUIRE(b.ok());

  REQUIRE((*a)->Set("k", B("v1")).ok());
  auto got = (*b)->Get("k", 1s);
  REQUIRE(got.ok());
  CHECK(*got == B("v1"));
  CHECK(*(*a)->Add("n", 5) == 5);
  CHECK(*(*b)->Add("n", -2) == 3);
  CHECK(*(*a)->Get("n", 1s) == B("3"));
  CHECK(*(*a)->CompareSet("k", B("v1"), B("v2")) == B("v2"));
  CHECK(*(*a)->CompareSet("k", B("wrong"), B("v3")) == B("v2"));
  CHECK(*(*a)->CompareSet("new", B(""), B("x")) == B("x"));
  CHECK(*(*a)->CompareSet("absent", B("e"), B("x")) == B("e"));
  CHECK(*(*a)->NumKeys() == 3);
  CHECK(*(*a)->Check({"k", "n"}));
  CHECK_FALSE(*(*a)->Check({"k", "absent"}));
  CHECK(*(*a)->Delete("new"));
  CHECK_FALSE(*(*a)->Delete("new"));
  REQUIRE((*a)->Set("k", B("text")).ok());
  CHECK_FALSE((*a)->Add("k", 1).ok());  // not a number

  // A blocked get is released by another client's set.
  std::thread setter([&] {
    std::this_thread::sleep_for(50ms);
    (void)(*b)->Set("later", B("L"));
  });
  auto later = (*a)->Get("later", 30s);
  setter.join();
  REQUIRE(later.ok());
  CHECK(*later == B("L"));
  CHECK((*a)->Wait({"k", "later"}, 1s).ok());

  // Missing keys time out instead of blocking forever.
  CHECK((*a)->Get("never", 100ms).status().code() == traintl::Status::Code::kUnavailable);
  CHECK_FALSE((*a)->Wait({"k", "never"}, 100ms).ok());

  // A blocked client fails when the server goes away (rank 0 died).
  std::thread stopper([&] {
    std::this_thread::sleep_for(50ms);
    server.value().reset();
  });
  CHECK_FALSE((*b)->Get("never", 0ms).ok());
  stopper.join();
  CHECK_FALSE((*a)->Set("k", B("v")).ok());
}

TEST_CASE("rendezvous store: binds only the given address and reports unreachable servers") {
  using traintl::torch::detail::StoreClient;
  using traintl::torch::detail::StoreServer;
  using namespace std::chrono_literals;
  auto server = StoreServer::Start("127.0.0.1", 0);
  REQUIRE(server.ok());
  const int port = (*server)->port();
  // The port is taken on 127.0.0.1 only, so a second server on 127.0.0.1 fails...
  CHECK_FALSE(StoreServer::Start("127.0.0.1", port).ok());
  // ...and nothing listens on 127.0.0.2 (a different loopback address).
  CHECK_FALSE(StoreClient::Connect("127.0.0.2", port, 100ms).ok());
  CHECK(StoreClient::Connect("127.0.0.1", port, 1s).ok());
  server.value().reset();
  CHECK_FALSE(StoreClient::Connect("127.0.0.1", port, 100ms).ok());
}

TEST_CASE("batch_slice: a global batch split among the ranks, the first ones taking the rest") {
  using traintl::torch::batch_slice;
  for (int world = 1; world <= 5; ++world) {
    for (int64_t global : {0, 1, 7, 48, 50}) {
      int64_t next = 0;
      for (int r = 0; r < world; ++r) {
        const auto s = batch_slice(global, r, world);
        CHECK(s.begin == next);  // contiguous, in rank order
        CHECK(s.size >= global / world);
        CHECK(s.size <= global / world + 1);
        next += s.size;
      }
      CHECK(next == global);  // every row, once
    }
  }
  CHECK(batch_slice(50, 0, 4).size == 13);
  CHECK(batch_slice(50, 3, 4).begin == 38);
  CHECK(batch_slice(50, 3, 4).size == 12);
}
