// libbench_startup_train.so: the traintl side of the startup benchmark (bench/startup/).
//
// Entry point `startup_loop`. Every rank builds the job's process group
// (traintl::torch::process_group(), the DDP rendezvous: the equivalent of torchrun's
// dist.init_process_group("gloo")), then, on entry to its training loop, writes the
// wall-clock time (CLOCK_REALTIME, ns since the Unix epoch) to <out_dir>/rank<R>.ns. The
// loop allreduces a small tensor until `hold_ms` have passed (at least once), so that
// the memory benchmark can watch a running job; rank 0 reports one metrics object at the
// end. torchrun_peer.py is the same program for torchrun.
//
// train_loop_config: {"out_dir": "<dir>" (required), "hold_ms": 0}
#include <time.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include <traintl/torch.h>
#include <traintl/train.h>

namespace {

int64_t WallClockNs() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Written to a temporary name and renamed, so that the harness never reads half a number.
void WriteStamp(const std::string& dir, int rank, int64_t ns) {
  const std::string path = dir + "/rank" + std::to_string(rank) + ".ns";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << ns << "\n";
    if (!out.flush()) throw std::runtime_error("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw std::runtime_error("cannot rename " + tmp + " to " + path);
  }
}

void StartupLoop(const nlohmann::json& config) {
  const std::string out_dir = config.at("out_dir").get<std::string>();
  const int hold_ms = config.value("hold_ms", 0);

  traintl::torch::ProcessGroup& group = traintl::torch::process_group();
  WriteStamp(out_dir, group.rank(), WallClockNs());

  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(hold_ms);
  torch::Tensor t = torch::ones({16});
  int64_t steps = 0;
  do {
    group.allreduce(t);
    ++steps;
    if (hold_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < until && !traintl::should_stop());
  traintl::report({{"steps", steps}, {"value", t[0].item<double>()}});
}

}  // namespace

TRAINTL_ENTRYPOINT_AS(startup_loop, StartupLoop)
