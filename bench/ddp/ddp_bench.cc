// ddp_bench: one rank of the traintl::torch DDP benchmark (run.sh starts the ranks and the
// Python peer, and writes RESULTS.md).
//
// Every mode takes --ranks-per-node K (default: all ranks on one node, so traintl's group is
// shared memory; TRAINTL_SHM_COLLECTIVES=0 makes it flat Gloo). Rank 0 prints the backend.
//
//   ddp_bench train --rank R --world W --store FILE [--steps N] [--batch B]
//     MLP 784-512-512-10 through prepare_model, SGD, one intra-op thread, B rows per rank;
//     rank 0 prints "steps_per_s <x> final_loss <l>".
//   ddp_bench allreduce --rank R --world W --store FILE [--iters N] [--bytes B]
//     25 MB (or B bytes) float32 allreduce, alternating rounds of traintl's path (the one
//     prepare_model's buckets take: process_group().allreduce_async(kSum); the 1/world scale is
//     fused into the gradient's copy into the bucket, which both DDPs pay) and a raw c10d
//     ProcessGroupGloo built the same way; rank 0 prints "traintl_ms <a> raw_ms <b>"
//     (medians per op).
#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include <traintl/torch.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "worker/torch/runtime.h"

namespace {

namespace tt = traintl::torch;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string mode;
  int rank = 0;
  int world = 2;
  std::string store;
  int steps = 300;
  int batch = 64;
  int iters = 20;
  int ranks_per_node = 0;            // 0: every rank on one node
  int64_t bytes = 25 * 1000 * 1000;  // allreduce size
};

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

void Init(const Args& a) {
  tt::detail::RuntimeOptions o;
  o.rank = a.rank;
  o.world_size = a.world;
  o.file_store_path = a.store;
  const int k = a.ranks_per_node > 0 ? a.ranks_per_node : a.world;
  o.node_rank = a.rank / k;
  o.local_rank = a.rank % k;
  o.local_world_size = std::min(k, a.world - o.node_rank * k);
  o.collective_timeout = std::chrono::seconds(60);
  o.rendezvous_timeout = std::chrono::seconds(60);
  auto st = tt::detail::InitForTesting(o);
  if (!st.ok()) {
    std::cerr << st.ToString() << "\n";
    std::exit(1);
  }
}

int Train(const Args& a) {
  Init(a);
  torch::manual_seed(1000 + a.rank);
  auto model = tt::prepare_model(torch::nn::Sequential(
      torch::nn::Linear(784, 512), torch::nn::ReLU(), torch::nn::Linear(512, 512),
      torch::nn::ReLU(), torch::nn::Linear(512, 10)));
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  const int64_t global = static_cast<int64_t>(a.batch) * a.world;
  std::vector<torch::Tensor> xs, ys;
  for (int k = 0; k < 8; ++k) {
    auto gen = at::detail::createCPUGenerator(42 + k);
    auto x = torch::randn({global, 784}, gen);
    auto y = torch::randint(0, 10, {global}, gen);
    xs.push_back(x.narrow(0, a.rank * a.batch, a.batch).contiguous());
    ys.push_back(y.narrow(0, a.rank * a.batch, a.batch).contiguous());
  }
  const int warmup = 10;
  Clock::time_point t0;
  torch::Tensor loss;
  for (int s = 0; s < a.steps + warmup; ++s) {
    if (s == warmup) t0 = Clock::now();
    opt.zero_grad();
    loss = torch::nn::functional::cross_entropy(model->forward(xs[s % 8]), ys[s % 8]);
    loss.backward();
    opt.step();
  }
  const double dt = Seconds(t0);
  if (a.rank == 0) {
    if (a.world > 1) std::cout << "backend " << tt::process_group().backend() << std::endl;
    std::cout << "steps_per_s " << a.steps / dt << " final_loss " << loss.item<float>()
              << std::endl;
  }
  return 0;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Allreduce(const Args& a) {
  Init(a);
  tt::ProcessGroup& ours = tt::process_group();
  auto raw_store = c10::make_intrusive<c10d::FileStore>(a.store + ".raw", a.world);
  auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(60));
  opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  opts->threads = 2;
  auto raw = c10::make_intrusive<c10d::ProcessGroupGloo>(
      c10::make_intrusive<c10d::PrefixStore>("raw", raw_store), a.rank, a.world, opts);

  auto t = torch::ones({a.bytes / 4});
  std::vector<at::Tensor> v{t};
  for (int i = 0; i < 3; ++i) {
    ours.allreduce_async({t}, tt::ReduceOp::kSum)->wait();
    raw->allreduce(v)->wait();
  }
  std::vector<double> ours_ms, raw_ms;
  auto time_ours = [&] {
    auto t0 = Clock::now();
    for (int i = 0; i < a.iters; ++i) ours.allreduce_async({t}, tt::ReduceOp::kSum)->wait();
    ours_ms.push_back(Seconds(t0) * 1e3 / a.iters);
  };
  auto time_raw = [&] {
    auto t0 = Clock::now();
    for (int i = 0; i < a.iters; ++i) raw->allreduce(v)->wait();
    raw_ms.push_back(Seconds(t0) * 1e3 / a.iters);
  };
  // The side that goes first alternates, so that neither always runs on a warmer cache.
  for (int round = 0; round < 9; ++round) {
    if (round % 2 == 0) {
      time_ours();
      time_raw();
    } else {
      time_raw();
      time_ours();
    }
  }
  ours.barrier();
  if (a.rank == 0) {
    std::cout << "backend " << ours.backend() << std::endl;
    std::cout << "traintl_ms " << Median(ours_ms) << " raw_ms " << Median(raw_ms) << std::endl;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: ddp_bench train|allreduce --rank R --world W --store FILE ...\n";
    return 2;
  }
  torch::set_num_threads(1);
  Args a;
  a.mode = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--rank")
      a.rank = std::stoi(v);
    else if (k == "--world")
      a.world = std::stoi(v);
    else if (k == "--store")
      a.store = v;
    else if (k == "--steps")
      a.steps = std::stoi(v);
    else if (k == "--batch")
      a.batch = std::stoi(v);
    else if (k == "--iters")
      a.iters = std::stoi(v);
    else if (k == "--bytes")
      a.bytes = std::stoll(v);
    else if (k == "--ranks-per-node")
      a.ranks_per_node = std::stoi(v);
    else {
      std::cerr << "unknown argument " << k << "\n";
      return 2;
    }
  }
  try {
    if (a.mode == "train") return Train(a);
    if (a.mode == "allreduce") return Allreduce(a);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "unknown mode " << a.mode << "\n";
  return 2;
}
