// torch_test_rank: one rank of a multi-process traintl::torch test, started by torch_test.
// Separate processes (not fork) because LibTorch and Gloo start threads.
//
//   torch_test_rank <mode> --rank R --world W --store FILE [--timeout-ms T] [--out FILE]
//                   [--steps N] [--global-batch G] [--bucket-bytes B] [--reload 0|1]
//                   [--ranks-per-node K] [--backend NAME]
//   torch_test_rank entry LIB FUNCTION CONTEXT_JSON OUT_DIR
//
// Modes: ddp (train, dump parameters), unused (a model with unused parameters),
// collectives (check allreduce/broadcast/barrier results), die (rank 1 is killed in the
// middle of an allreduce), hang (rank 1 never joins the allreduce). entry runs a training
// library's entry point under a minimal fake worker host (reports go to OUT_DIR).
// --ranks-per-node K places ranks K to a node (rank / K is the node; the default, 1, is one
// rank per node: flat Gloo); --backend is the process group's expected backend() (default
// gloo).
// Exit codes: 0 ok, 1 wrong result or usage, 3 a CollectiveError was caught (and printed).
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include <traintl/abi.h>
#include <traintl/torch.h>
#include <nlohmann/json.hpp>

#include "worker/data/dataset_service.h"
#include "worker/torch/runtime.h"

namespace {

namespace tt = traintl::torch;

struct Args {
  std::string mode;
  int rank = 0;
  int world = 1;
  std::string store;
  int timeout_ms = 30000;
  std::string out;
  int steps = 5;
  int global_batch = 16;
  size_t bucket_bytes = 25u << 20;
  bool reload = false;  // torch::load into the prepared model, as a resumed job does
  int ranks_per_node = 1;
  std::string backend = "gloo";
};

void Init(const Args& a) {
  tt::detail::RuntimeOptions o;
  o.rank = a.rank;
  o.world_size = a.world;
  o.file_store_path = a.store;
  const int k = std::max(1, a.ranks_per_node);
  o.node_rank = a.rank / k;
  o.local_rank = a.rank % k;
  o.local_world_size = std::min(k, a.world - o.node_rank * k);
  o.collective_timeout = std::chrono::milliseconds(a.timeout_ms);
  o.rendezvous_timeout = std::chrono::seconds(60);
  auto st = tt::detail::InitForTesting(o);
  if (!st.ok()) {
    std::cerr << "InitForTesting: " << st.ToString() << "\n";
    std::exit(1);
  }
}

void Dump(const std::vector<torch::Tensor>& params, const std::string& path) {
  std::ofstream f(path, std::ios::binary);
  for (const auto& p : params) {
    auto c = p.detach().to(torch::kCPU).contiguous();
    f.write(reinterpret_cast<const char*>(c.data_ptr<float>()),
            static_cast<std::streamsize>(c.numel() * sizeof(float)));
  }
}

// Batch k of the global data; this rank's rows are [rank * G/W, (rank + 1) * G/W).
std::pair<torch::Tensor, torch::Tensor> LocalBatch(const Args& a, int k, int features,
                                                   int classes) {
  auto gen = at::detail::createCPUGenerator(42 + k);
  auto x = torch::randn({a.global_batch, features}, gen);
  auto y = torch::randint(0, classes, {a.global_batch}, gen);
  const int local = a.global_batch / a.world;
  return {x.narrow(0, a.rank * local, local), y.narrow(0, a.rank * local, local)};
}

int RunDdp(const Args& a) {
  Init(a);
  torch::manual_seed(100 + a.rank);  // differs per rank: prepare_model must broadcast
  torch::nn::Sequential model(torch::nn::Linear(8, 16), torch::nn::ReLU(),
                              torch::nn::Linear(16, 16), torch::nn::Tanh(),
                              torch::nn::Linear(16, 4));
  tt::PrepareModelOptions options;
  options.bucket_cap_bytes = a.bucket_bytes;
  options.first_bucket_cap_bytes = a.bucket_bytes;
  model = tt::prepare_model(model, options);
  if (a.reload) {
    torch::save(model, a.out + ".pt");
    torch::load(model, a.out + ".pt");
  }
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int s = 0; s < a.steps; ++s) {
    auto [x, y] = LocalBatch(a, s, 8, 4);
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
  }
  Dump(model->parameters(), a.out);
  return 0;
}

struct PartlyUsedImpl : torch::nn::Module {
  PartlyUsedImpl()
      : fc1(register_module("fc1", torch::nn::Linear(8, 16))),
        fc2(register_module("fc2", torch::nn::Linear(16, 4))),
        never(register_module("never", torch::nn::Linear(4, 4))),
        odd_ranks(register_module("odd_ranks", torch::nn::Linear(16, 4))) {}
  torch::Tensor forward(const torch::Tensor& x, bool use_odd) {
    auto h = torch::relu(fc1(x));
    auto out = fc2(h);
    if (use_odd) out = out + odd_ranks(h);
    return out;
  }
  torch::nn::Linear fc1, fc2, never, odd_ranks;
};

int RunUnused(const Args& a) {
  Init(a);
  torch::manual_seed(100 + a.rank);
  auto model = tt::prepare_model(std::make_shared<PartlyUsedImpl>(),
                                 {.bucket_cap_bytes = 64, .first_bucket_cap_bytes = 64});
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  for (int s = 0; s < a.steps; ++s) {
    auto [x, y] = LocalBatch(a, s, 8, 4);
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x, a.rank % 2 == 1), y);
    loss.backward();
    opt.step();
  }
  Dump(model->parameters(), a.out);
  return 0;
}

bool Expect(bool ok, const std::string& what) {
  if (!ok) std::cerr << "rank check failed: " << what << "\n";
  return ok;
}

int RunCollectives(const Args& a) {
  Init(a);
  tt::ProcessGroup& pg = tt::process_group();
  bool ok = Expect(pg.rank() == a.rank && pg.world_size() == a.world, "rank/world");
  ok &= Expect(pg.backend() == a.backend, "backend " + a.backend + ", not " + pg.backend());
  const double r = a.rank;
  const double w = a.world;
  const double rank_sum = w * (w - 1) / 2;

  // Several tensors, mixed dtypes, one non-contiguous: each is reduced on its own.
  auto f = torch::full({3}, r + 1, torch::kFloat);
  auto d = torch::full({2, 2}, r * 2, torch::kDouble);
  auto i = torch::full({4}, a.rank + 10, torch::kLong);
  auto base = torch::full({3, 2}, r, torch::kFloat);
  auto nc = base.t();
  pg.allreduce({f, d, i, nc});
  ok &= Expect(torch::allclose(f, torch::full({3}, rank_sum + w, torch::kFloat)), "float sum");
  ok &= Expect(torch::allclose(d, torch::full({2, 2}, 2 * rank_sum, torch::kDouble)), "double sum");
  ok &= Expect(
      torch::equal(i, torch::full({4}, static_cast<int64_t>(rank_sum + 10 * w), torch::kLong)),
      "int64 sum");
  ok &= Expect(torch::allclose(base, torch::full({3, 2}, rank_sum, torch::kFloat)),
               "non-contiguous sum");

  auto avg = torch::full({5}, r, torch::kFloat);
  pg.allreduce(avg, tt::ReduceOp::kAvg);
  ok &= Expect(torch::allclose(avg, torch::full({5}, rank_sum / w, torch::kFloat)), "avg");
  auto mx = torch::full({2}, r, torch::kFloat);
  pg.allreduce(mx, tt::ReduceOp::kMax);
  ok &= Expect(torch::allclose(mx, torch::full({2}, w - 1, torch::kFloat)), "max");
  auto mn = torch::full({2}, r + 1, torch::kFloat);
  pg.allreduce(mn, tt::ReduceOp::kMin);
  ok &= Expect(torch::allclose(mn, torch::full({2}, 1.0, torch::kFloat)), "min");

  auto work = pg.allreduce_async({torch::ones({7})});
  work->wait();
  work->wait();  // idempotent

  const int root = a.world - 1;
  auto b1 = torch::full({4}, r, torch::kFloat);
  auto b2 = torch::full({2}, static_cast<int64_t>(a.rank) * 3, torch::kLong);
  auto b3 = torch::full({3}, r * 5, torch::kFloat);
  pg.broadcast({b1, b2, b3}, root);
  ok &= Expect(torch::allclose(b1, torch::full({4}, root * 1.0, torch::kFloat)), "broadcast 1");
  ok &= Expect(torch::equal(b2, torch::full({2}, static_cast<int64_t>(root) * 3, torch::kLong)),
               "broadcast 2");
  ok &= Expect(torch::allclose(b3, torch::full({3}, root * 5.0, torch::kFloat)), "broadcast 3");
  pg.barrier();

  // bfloat16 sums (widened, rounded once; LibTorch 1.13's Gloo has none) and allgather in
  // rank order.
  if (a.backend != "gloo") {
    auto bf = torch::full({9}, r + 0.5, torch::kBFloat16);
    pg.allreduce(bf);
    ok &= Expect(torch::allclose(bf.to(torch::kFloat), torch::full({9}, rank_sum + 0.5 * w)),
                 "bfloat16 sum");
  }
  auto gathered = pg.allgather(torch::full({2, 3}, r * 10 + 1, torch::kFloat));
  ok &= Expect(static_cast<int>(gathered.size()) == a.world, "allgather count");
  for (int q = 0; q < a.world && q < static_cast<int>(gathered.size()); ++q) {
    ok &= Expect(torch::equal(gathered[q], torch::full({2, 3}, q * 10 + 1.0, torch::kFloat)),
                 "allgather row " + std::to_string(q));
  }
  auto big = torch::arange(200000, torch::kFloat) * (r + 1);  // several chunks
  pg.allreduce(big, tt::ReduceOp::kAvg);
  ok &= Expect(torch::allclose(big, torch::arange(200000, torch::kFloat) * ((w + 1) / 2)),
               "large average");
  pg.barrier();
  try {
    pg.allreduce(torch::ones({2}, torch::kLong), tt::ReduceOp::kAvg);
    ok &= Expect(false, "kAvg of int64 must throw");
  } catch (const std::invalid_argument&) {
  }
  pg.barrier();
  return ok ? 0 : 1;
}

// Rank 1 starts a large allreduce and is killed while it is in flight (die), or never
// joins it (hang); rank 0 must get a CollectiveError, not wait forever.
int RunPeerFailure(const Args& a, bool die) {
  Init(a);
  tt::ProcessGroup& pg = tt::process_group();
  pg.barrier();
  auto big = torch::ones({25 * 1000 * 1000 / 4});
  if (a.rank == 1) {
    if (die) {
      auto work = pg.allreduce_async({big});
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      raise(SIGKILL);
    }
    for (;;) pause();  // hang: alive, silent, until torch_test kills it
  }
  try {
    for (int k = 0; k < 1000; ++k) pg.allreduce(big);
    std::cerr << "allreduce with a failed peer succeeded\n";
    return 1;
  } catch (const tt::CollectiveError& e) {
    std::cerr << "CollectiveError: " << e.what() << "\n";
    return 3;
  }
}

// ---- A minimal worker host for `entry`: context from a file, reports to OUT_DIR.
struct FakeHost {
  std::string context_text;
  std::string out_dir;
  std::string checkpoint;
  std::mutex mu;
  int seq = 0;
};

const char* HostContext(void* h) { return static_cast<FakeHost*>(h)->context_text.c_str(); }

int HostReport(void* h, const char* metrics_json, const char* checkpoint_dir, char* err,
               size_t err_len) {
  auto* host = static_cast<FakeHost*>(h);
  std::lock_guard<std::mutex> lock(host->mu);
  nlohmann::json line = {{"seq", host->seq}, {"metrics", nlohmann::json::parse(metrics_json)}};
  if (checkpoint_dir != nullptr) {
    const std::string dst = host->out_dir + "/checkpoint_" + std::to_string(host->seq);
    std::error_code ec;
    std::filesystem::copy(checkpoint_dir, dst, std::filesystem::copy_options::recursive, ec);
    if (ec) {
      std::snprintf(err, err_len, "copy %s: %s", checkpoint_dir, ec.message().c_str());
      return 1;
    }
    line["checkpoint"] = dst;
  }
  std::ofstream(host->out_dir + "/reports.jsonl", std::ios::app) << line.dump() << "\n";
  ++host->seq;
  return 0;
}

const char* HostCheckpoint(void* h) {
  auto* host = static_cast<FakeHost*>(h);
  return host->checkpoint.empty() ? nullptr : host->checkpoint.c_str();
}

int HostShouldStop(void*) { return 0; }
void HostLog(void*, int level, const char* msg) {
  std::cerr << "[" << level << "] " << msg << "\n";
}

int RunEntry(const std::string& lib, const std::string& function, const std::string& context,
             const std::string& out_dir) {
  FakeHost host;
  std::ifstream in(context);
  std::stringstream text;
  text << in.rdbuf();
  host.context_text = text.str();
  host.out_dir = out_dir;
  auto ctx = nlohmann::json::parse(host.context_text);
  if (ctx.contains("checkpoint_dir") && ctx["checkpoint_dir"].is_string()) {
    host.checkpoint = ctx["checkpoint_dir"].get<std::string>();
  }
  void* handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::cerr << "dlopen: " << dlerror() << "\n";
    return 1;
  }
  auto entry = reinterpret_cast<traintl_entry_fn>(
      dlsym(handle, (std::string(TRAINTL_ENTRY_SYMBOL_PREFIX) + function).c_str()));
  if (entry == nullptr) {
    std::cerr << "no entry point " << function << "\n";
    return 1;
  }
  traintl_host_api api{};
  api.struct_size = sizeof api;
  api.abi_version = TRAINTL_ABI_VERSION;
  api.host = &host;
  api.get_context_json = HostContext;
  api.report = HostReport;
  api.get_checkpoint = HostCheckpoint;
  api.should_stop = HostShouldStop;
  api.log = HostLog;
  // Datasets of the context ("datasets"), served as traintl-worker serves them.
  traintl::data::DatasetService datasets(ctx);
  api.datasets = datasets.api();
  char err[4096] = {0};
  const int rc = entry(&api, err, sizeof err);
  if (rc != TRAINTL_ENTRY_OK) {
    std::cerr << "entry point failed (" << rc << "): " << err << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: torch_test_rank <mode> ...\n";
    return 1;
  }
  torch::set_num_threads(1);
  Args a;
  a.mode = argv[1];
  if (a.mode == "entry") {
    if (argc != 6) {
      std::cerr << "usage: torch_test_rank entry LIB FUNCTION CONTEXT_JSON OUT_DIR\n";
      return 1;
    }
    return RunEntry(argv[2], argv[3], argv[4], argv[5]);
  }
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const std::string v = argv[i + 1];
    if (k == "--rank")
      a.rank = std::stoi(v);
    else if (k == "--world")
      a.world = std::stoi(v);
    else if (k == "--store")
      a.store = v;
    else if (k == "--timeout-ms")
      a.timeout_ms = std::stoi(v);
    else if (k == "--out")
      a.out = v;
    else if (k == "--steps")
      a.steps = std::stoi(v);
    else if (k == "--global-batch")
      a.global_batch = std::stoi(v);
    else if (k == "--reload")
      a.reload = v == "1";
    else if (k == "--bucket-bytes")
      a.bucket_bytes = std::stoul(v);
    else if (k == "--ranks-per-node")
      a.ranks_per_node = std::stoi(v);
    else if (k == "--backend")
      a.backend = v;
    else {
      std::cerr << "unknown argument " << k << "\n";
      return 1;
    }
  }
  try {
    if (a.mode == "ddp") return RunDdp(a);
    if (a.mode == "unused") return RunUnused(a);
    if (a.mode == "collectives") return RunCollectives(a);
    if (a.mode == "die") return RunPeerFailure(a, /*die=*/true);
    if (a.mode == "hang") return RunPeerFailure(a, /*die=*/false);
  } catch (const tt::CollectiveError& e) {
    std::cerr << "CollectiveError: " << e.what() << "\n";
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "exception: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "unknown mode " << a.mode << "\n";
  return 1;
}
