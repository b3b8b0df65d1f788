// libdata_bench_train.so, entry point read_loop: reads dataset "bench" once through
// traintl::torch::iter_torch_batches as float32 tensors and stacks each batch's columns
// into one [rows, columns] tensor (what pandas' read_csv(...).to_numpy() gives): by
// default as torch::stack(columns, 0).t(), a column-major [rows, columns] (one contiguous
// copy per column), with "stack": "rows" as torch::stack(columns, 1), a row-major one
// (a strided copy, which costs LibTorch several times more), then
// reports: rows, seconds (from get_dataset_shard to the last batch, so it includes the
// row count that a split shard needs), cpu_seconds (the process's CPU time over the same
// span, all threads), first_batch_seconds, rss_before_bytes and peak_rss_bytes (VmRSS
// before reading, VmHWM after).
//
// train_loop_config: batch_size (4096), threads (0 = the worker's default), stack
// ("columns" or "rows", see above; default "columns"), evict (a path, default none: evicts
// that file from the page cache with posix_fadvise(DONTNEED) just before the timed span,
// so that a cold read starts as soon after the eviction as bench.py's cold `cat` does),
// evict_wait_s (seconds to wait after evicting, default 0; see bench.py's AGED_S).
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <traintl/torch.h>
#include <traintl/train.h>

namespace {

int64_t StatusBytes(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string k;
  while (in >> k) {
    if (k == key) {
      int64_t kb = 0;
      in >> kb;
      return kb * 1024;
    }
    std::string rest;
    std::getline(in, rest);
  }
  return -1;
}

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void Evict(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + path + " to evict it");
  const int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
  if (rc != 0) throw std::runtime_error("posix_fadvise(DONTNEED) failed on " + path);
}

void read_loop(const nlohmann::json& config) {
  if (const std::string path = config.value("evict", std::string()); !path.empty()) {
    Evict(path);
    std::this_thread::sleep_for(std::chrono::duration<double>(config.value("evict_wait_s", 0.0)));
  }
  const int64_t rss_before = StatusBytes("VmRSS:");
  const double cpu_start = CpuSeconds();
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  auto shard = traintl::get_dataset_shard("bench");
  traintl::torch::TorchBatchOptions options;
  options.dtype = torch::kFloat32;
  options.device = torch::Device(torch::kCPU);
  options.iter.num_threads = config.value("threads", 0);
  const bool row_major = config.value("stack", std::string("columns")) == "rows";
  int64_t rows = 0;
  double first_batch = -1;
  double checksum = 0;
  for (auto& batch :
       traintl::torch::iter_torch_batches(shard, config.value("batch_size", 4096), options)) {
    std::vector<torch::Tensor> columns;
    for (auto& named : batch) columns.push_back(named.second);
    torch::Tensor x = row_major ? torch::stack(columns, 1) : torch::stack(columns, 0).t();
    rows += x.size(0);
    checksum += x[0][0].item<float>();
    if (first_batch < 0) first_batch = seconds();
  }
  const double total = seconds();
  const double cpu = CpuSeconds() - cpu_start;
  traintl::report({{"rows", rows},
                   {"seconds", total},
                   {"cpu_seconds", cpu},
                   {"first_batch_seconds", first_batch},
                   {"checksum", checksum},
                   {"rss_before_bytes", rss_before},
                   {"peak_rss_bytes", StatusBytes("VmHWM:")}});
}

}  // namespace

TRAINTL_ENTRYPOINT(read_loop)
