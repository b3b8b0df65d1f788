// xgb_collective_probe: one rabit worker on the real libxgboost, for rabit_tracker_test.cc.
//
//   xgb_collective_probe PORT TASK_ID [CONNECT_RETRY]
//
// Joins the tracker at 127.0.0.1:PORT as task TASK_ID through the C API (XGCommunicatorInit
// with a JSON config, as xgboost.collective.init passes it), prints "rank R world W",
// allreduces (sum) a short vector (tree allreduce) and a long one (ring allreduce: more
// elements than rabit_reduce_ring_mincount) and checks both sums, sends "hello from rank R"
// through XGCommunicatorPrint, finalizes (the shutdown) and prints "ok". Every line goes to
// stdout; a failed step prints "error STEP: MESSAGE" and exits 1.
#include <xgboost/c_api.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

constexpr int kDouble = 7;  // xgboost's DataType::kDouble
constexpr int kSum = 2;     // xgboost's Operation::kSum

int Fail(const char* step) {
  std::printf("error %s: %s\n", step, XGBGetLastError());
  std::fflush(stdout);
  return 1;
}

// Each rank contributes (rank + 1) * (i % 7 + 1) at i: the sum is n(n+1)/2 * (i % 7 + 1).
bool AllreduceChecked(int rank, int world, size_t count) {
  std::vector<double> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = (rank + 1.0) * static_cast<double>(i % 7 + 1);
  if (XGCommunicatorAllreduce(v.data(), v.size(), kDouble, kSum) != 0) return false;
  const double ranks = world * (world + 1) / 2.0;
  for (size_t i = 0; i < count; ++i) {
    if (v[i] != ranks * static_cast<double>(i % 7 + 1)) {
      std::printf("error allreduce: element %zu is %g, not %g\n", i, v[i],
                  ranks * static_cast<double>(i % 7 + 1));
      std::fflush(stdout);
      std::exit(1);
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s PORT TASK_ID [CONNECT_RETRY]\n", argv[0]);
    return 2;
  }
  const std::string retry = argc > 3 ? argv[3] : "5";
  // The values are strings: rabit takes every key as a NAME=VALUE parameter.
  const std::string config = std::string("{\"DMLC_TRACKER_URI\": \"127.0.0.1\", ") +
                             "\"DMLC_TRACKER_PORT\": \"" + argv[1] + "\", " +
                             "\"DMLC_TASK_ID\": \"" + argv[2] + "\", " +
                             "\"DMLC_WORKER_CONNECT_RETRY\": \"" + retry + "\"}";
  if (XGCommunicatorInit(config.c_str()) != 0) return Fail("init");
  const int rank = XGCommunicatorGetRank();
  const int world = XGCommunicatorGetWorldSize();
  std::printf("rank %d world %d\n", rank, world);
  std::fflush(stdout);
  if (!AllreduceChecked(rank, world, 100)) return Fail("allreduce");
  if (!AllreduceChecked(rank, world, 40000)) return Fail("allreduce");
  const std::string hello = "hello from rank " + std::to_string(rank) + "\n";
  if (XGCommunicatorPrint(hello.c_str()) != 0) return Fail("print");
  if (XGCommunicatorFinalize() != 0) return Fail("finalize");
  std::printf("ok\n");
  return 0;
}
