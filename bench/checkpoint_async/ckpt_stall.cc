// libckpt_stall_bench.so: how long a training loop stalls per checkpoint of a large
// in-memory state, by how it saves (bench/checkpoint_async/run.py runs it).
//
// train_loop_config:
//   mode: "sync"   - write the state into files, report(metrics, checkpoint)
//         "async"  - write the state into files, report(..., {.async_upload = true})
//         "staged" - report_deferred(metrics), copy the state into a reusable in-memory
//                    buffer (as torch.distributed.checkpoint.async_save stages tensors into
//                    CPU buffers), and let a thread write the files from that buffer into
//                    the deferred directory and call done()
//   state_mb (500), files (4), checkpoints (5), step_ms (1000): the "training" between
//   checkpoints (a sleep: the background upload overlaps it), tmp_dir ($TMPDIR or /tmp)
// The stall of each checkpoint (ms from the start of the save to the return to the loop)
// goes into the last report's metrics as "stalls_ms"; "report_ms" is the report call alone.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <traintl/train.h>

namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Writes `size` bytes at `data` into `files` files in `dir` (the "serialization").
void WriteState(const std::string& dir, const char* data, size_t size, int files) {
  const size_t per = size / static_cast<size_t>(files);
  for (int i = 0; i < files; ++i) {
    const std::string path = dir + "/shard_" + std::to_string(i) + ".bin";
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) throw std::runtime_error("cannot write " + path);
    const size_t n = i + 1 == files ? size - per * i : per;
    if (std::fwrite(data + per * i, 1, n, f) != n || std::fclose(f) != 0)
      throw std::runtime_error("cannot write " + path);
  }
}

void train_loop(const nlohmann::json& config) {
  const std::string mode = config.value("mode", "sync");
  const size_t size = static_cast<size_t>(config.value("state_mb", 500)) << 20;
  const int files = config.value("files", 4);
  const int checkpoints = config.value("checkpoints", 5);
  const int step_ms = config.value("step_ms", 1000);
  const char* tmpdir_env = std::getenv("TMPDIR");
  const std::string tmp =
      config.value("tmp_dir", tmpdir_env != nullptr && *tmpdir_env ? tmpdir_env : "/tmp");
  if (mode != "sync" && mode != "async" && mode != "staged")
    throw std::invalid_argument("mode must be sync, async or staged");

  // The "model": touched every step, so that each checkpoint differs.
  std::vector<char> state(size);
  std::memset(state.data(), 7, size);
  // staged: the reusable staging buffer, faulted in once (as pinned CPU buffers are).
  auto staging = std::make_shared<std::vector<char>>(mode == "staged" ? size : 0, 0);
  const std::string dir = tmp + "/ckpt-stall-" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0700);

  nlohmann::json stalls = nlohmann::json::array(), report_ms = nlohmann::json::array();
  for (int k = 0; k < checkpoints; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
    for (size_t i = 0; i < size; i += 1 << 20) state[i] = static_cast<char>(k);
    const nlohmann::json metrics = {{"step", k}, {"mode", mode}};
    const auto t0 = Clock::now();
    double in_report = 0;
    if (mode == "staged") {
      // Reserve the report first: it waits for the previous upload, which reads `staging`.
      const auto r0 = Clock::now();
      auto pending =
          std::make_shared<traintl::DeferredCheckpoint>(traintl::report_deferred(metrics));
      in_report = MsSince(r0);
      std::memcpy(staging->data(), state.data(), size);
      std::thread([pending, staging, size, files] {
        try {
          WriteState(pending->dir(), staging->data(), size, files);
          pending->done();
        } catch (const std::exception& e) {
          pending->fail(e.what());
        }
      }).detach();
    } else {
      WriteState(dir, state.data(), size, files);
      const auto r0 = Clock::now();
      if (mode == "async") {
        traintl::report(metrics, traintl::Checkpoint::from_directory(dir),
                        traintl::ReportOptions{.async_upload = true});
      } else {
        traintl::report(metrics, traintl::Checkpoint::from_directory(dir));
      }
      in_report = MsSince(r0);
    }
    stalls.push_back(MsSince(t0));
    report_ms.push_back(in_report);
    std::printf("checkpoint %d (%s): stall %.1f ms, of which report %.1f ms\n", k, mode.c_str(),
                stalls.back().get<double>(), in_report);
    std::fflush(stdout);
  }
  traintl::wait_for_reports();
  traintl::report(
      {{"mode", mode}, {"stalls_ms", stalls}, {"report_ms", report_ms}, {"state_mb", size >> 20}});
  for (int i = 0; i < files; ++i)
    std::remove((dir + "/shard_" + std::to_string(i) + ".bin").c_str());
  ::rmdir(dir.c_str());
}

}  // namespace

TRAINTL_ENTRYPOINT(train_loop)
