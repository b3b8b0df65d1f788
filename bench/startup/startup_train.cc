// libbench_startup_train.so: the traintl side of the startup benchmark (bench/startup/).
//
// Entry point `startup_loop`. Every rank builds the job's process group
// (traintl::torch::process_group(), the DDP rendezvous: the equivalent of torchrun's
// dist.init_process_group("gloo")), then, on entry to its training loop, writes the
// wall-clock time (CLOCK_REALTIME, ns since the Unix epoch) to <out_dir>/rank<R>.ns,
// followed by two earlier times for the breakdown: when the entry point was called, and
// when the process was forked (from /proc, 10 ms resolution). The loop allreduces a small
// tensor until `hold_ms` have passed (at least once), so that the memory benchmark can
// watch a running job; then every rank reports one metrics object. torchrun_peer.py is
// the same program for torchrun.
//
// train_loop_config: {"out_dir": "<dir>" (required), "hold_ms": 0}
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include <traintl/torch.h>
#include <traintl/train.h>

namespace {

int64_t ClockNs(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// When this process was forked, as wall-clock ns: /proc/self/stat's starttime counts clock
// ticks of CLOCK_BOOTTIME; shift it by the current offset between the two clocks.
int64_t ProcessStartNs() {
  std::ifstream in("/proc/self/stat");
  std::string stat;
  std::getline(in, stat);
  // Field 22 (starttime) is the 20th after the command name's closing parenthesis.
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string skip;
  for (int i = 0; i < 19; ++i) fields >> skip;
  int64_t ticks = 0;
  fields >> ticks;
  const int64_t boot_wall_ns = ClockNs(CLOCK_REALTIME) - ClockNs(CLOCK_BOOTTIME);
  return boot_wall_ns + ticks * (1000000000 / sysconf(_SC_CLK_TCK));
}

// Written to a temporary name and renamed, so that the harness never reads half a line.
void WriteStamp(const std::string& dir, int rank, int64_t loop_ns, int64_t entry_ns) {
  const std::string path = dir + "/rank" + std::to_string(rank) + ".ns";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << loop_ns << " " << entry_ns << " " << ProcessStartNs() << "\n";
    if (!out.flush()) throw std::runtime_error("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw std::runtime_error("cannot rename " + tmp + " to " + path);
  }
}

void StartupLoop(const nlohmann::json& config) {
  const int64_t entry_ns = ClockNs(CLOCK_REALTIME);
  const std::string out_dir = config.at("out_dir").get<std::string>();
  const int hold_ms = config.value("hold_ms", 0);

  traintl::torch::ProcessGroup& group = traintl::torch::process_group();
  WriteStamp(out_dir, group.rank(), ClockNs(CLOCK_REALTIME), entry_ns);

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
