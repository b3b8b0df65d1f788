// What per-rank progress costs a training step, measured directly: the calls the LibTorch
// integration makes per step (one CollectiveEntered per gradient bucket, WaitBegins and
// WaitEnds around the wait for the last one, StepDone; worker/torch/progress.cc through
// traintl/progress_recorder.h) into a real WorkerHost's progress callback (its sender thread
// running, writing to a socketpair as to the agent), timed over many steps. The end-to-end
// on/off comparison (run.py) cannot resolve 1 % on a noisy machine; this bounds the cost
// per step, to be divided by a step's time.
//
// Usage: progress_cost_bench [steps (default 2000000)] [buckets per step (default 1,4,16)]
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "proto/rank_context.h"
#include "traintl/progress_recorder.h"
#include "worker/agent_channel.h"
#include "worker/worker_host.h"

int main(int argc, char** argv) {
  const long steps = argc > 1 ? std::atol(argv[1]) : 2000000;
  std::vector<int> bucket_counts = {1, 4, 16};
  if (argc > 2) bucket_counts = {std::atoi(argv[2])};
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return 1;
  // The agent's end: drained so that the sender thread never blocks.
  std::thread drain([fd = fds[1]] {
    char buf[4096];
    while (::read(fd, buf, sizeof buf) > 0) {
    }
  });
  drain.detach();
  traintl::RankContext ctx;
  ctx.staging_dir = "/tmp";
  auto* channel = new traintl::worker::AgentChannel(fds[0]);  // lives to the exit, as in a worker
  auto* host = new traintl::worker::WorkerHost(ctx, channel);
  const traintl_host_api* api = host->api();
  if (api->progress == nullptr) {
    std::fprintf(stderr, "progress is off (NO_TRAINTL_PROGRESS=1?)\n");
    return 1;
  }
  traintl::ProgressRecorder recorder(
      [api](const traintl_progress& p) { api->progress(api->host, &p); });
  for (int buckets : bucket_counts) {
    const auto t0 = std::chrono::steady_clock::now();
    for (long s = 0; s < steps; ++s) {
      for (int b = 0; b < buckets; ++b) recorder.CollectiveEntered();
      recorder.WaitBegins();
      recorder.WaitEnds();
      recorder.StepDone();
    }
    const double ns =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
        static_cast<double>(steps);
    std::printf("buckets_per_step=%d ns_per_step=%.1f share_of_1ms_step=%.4f%%\n", buckets, ns,
                ns / 1e6 * 100);
  }
  std::fflush(stdout);
  std::_Exit(0);  // the host's sender thread and the channel live to the exit
}
