// libtest_torch_ckpt.so: tensors checkpointed three ways, with the loop's stall measured -
// the test of traintl::torch::AsyncCheckpointer (tests/e2e/test_async_checkpoints.py) and
// the LibTorch half of bench/checkpoint_async.
//
// train_loop_config (all optional):
//   mode: "sync"   - torch::save the state into a directory, report(metrics, checkpoint)
//         "async"  - the same with ReportOptions::async_upload
//         "staged" - AsyncCheckpointer::save (a copy into reused CPU buffers; torch::save
//                    and the report on its thread)
//   state_mb (8), tensors (4), checkpoints (3), step_ms (100), tmp_dir ($TMPDIR or /tmp)
//   verify (false): after each staged save, change the state at once, wait for the write,
//   and check that the written file holds the state as it was at save()
// Tensor j of checkpoint k holds k + j everywhere; the file is state_r<rank>.pt. A restored
// checkpoint is checked to be one consistent k ("restored_step"). The last report's metrics:
// stalls_ms and report_ms (per checkpoint, the first left in), verified, restored_step.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>
#include <traintl/torch_checkpoint.h>
#include <traintl/train.h>

namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The k of a state whose tensor j holds k + j everywhere; throws when it is not one.
int StepOf(const std::vector<torch::Tensor>& state) {
  if (state.empty()) throw std::runtime_error("empty checkpoint");
  const double k = state[0].min().item<double>();
  for (size_t j = 0; j < state.size(); ++j) {
    if (state[j].min().item<double>() != k + j || state[j].max().item<double>() != k + j)
      throw std::runtime_error("inconsistent checkpoint: tensor " + std::to_string(j));
  }
  return static_cast<int>(k);
}

// The file a save wrote into `staged` (<staging>/seq_<K>/rank_<R>): still there, or - the
// report having gone out - moved by the head's merge into the trial dir's
// checkpoint_a<attempt>_s<K>/ (through a ".tmp" name, so it may be in neither for a moment).
std::vector<torch::Tensor> LoadWritten(const std::string& staged, const std::string& file) {
  const traintl::Context ctx = traintl::get_context();
  const size_t at = staged.rfind("/seq_");
  const int seq = std::atoi(staged.c_str() + at + 5);
  char name[64];
  std::snprintf(name, sizeof name, "/checkpoint_a%03d_s%06d/", ctx.attempt(), seq);
  const std::string committed = ctx.trial_dir() + name + file + ".pt";
  for (int i = 0; i < 3000; ++i) {
    for (const std::string& path : {staged + "/" + file + ".pt", committed}) {
      if (::access(path.c_str(), R_OK) != 0) continue;
      try {
        std::vector<torch::Tensor> loaded;
        torch::load(loaded, path);
        return loaded;
      } catch (const std::exception&) {  // moved between the check and the open
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  throw std::runtime_error("the file of " + staged + " is neither staged nor committed");
}

void train_loop(const nlohmann::json& config) {
  const int rank = traintl::get_context().world_rank();
  const std::string mode = config.value("mode", "staged");
  const int64_t numel =
      (static_cast<int64_t>(config.value("state_mb", 8)) << 20) / 4 / config.value("tensors", 4);
  const int n_tensors = config.value("tensors", 4);
  const int checkpoints = config.value("checkpoints", 3);
  const int step_ms = config.value("step_ms", 100);
  const bool verify = config.value("verify", false);
  const char* tmpdir_env = std::getenv("TMPDIR");
  const std::string tmp =
      config.value("tmp_dir", tmpdir_env != nullptr && *tmpdir_env ? tmpdir_env : "/tmp");
  const std::string file = "state_r" + std::to_string(rank);

  int restored = -1;
  if (auto ckpt = traintl::get_checkpoint()) {
    std::vector<torch::Tensor> loaded;
    torch::load(loaded, ckpt->path() + "/" + file + ".pt");
    restored = StepOf(loaded);
  }
  std::vector<torch::Tensor> state;
  for (int j = 0; j < n_tensors; ++j) state.push_back(torch::zeros({numel}));
  const std::string dir = tmp + "/torch-ckpt-" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0700);
  traintl::torch::AsyncCheckpointer checkpointer;
  nlohmann::json stalls = nlohmann::json::array(), report_ms = nlohmann::json::array();
  int verified = 0;
  for (int k = restored + 1; k < restored + 1 + checkpoints; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
    for (int j = 0; j < n_tensors; ++j) state[j].fill_(k + j);  // "training"
    const nlohmann::json metrics = {{"step", k}, {"mode", mode}};
    const auto t0 = Clock::now();
    double in_report = 0;
    if (mode == "staged") {
      checkpointer.save(metrics, {{file, state}});
      in_report = MsSince(t0);
    } else {
      torch::save(state, dir + "/" + file + ".pt");
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
    std::printf("checkpoint %d (%s): stall %.1f ms\n", k, mode.c_str(),
                stalls.back().get<double>());
    std::fflush(stdout);
    if (verify && mode == "staged") {
      for (auto& t : state) t.add_(1000);  // the loop goes on at once
      checkpointer.wait();
      if (StepOf(LoadWritten(checkpointer.last_dir(), file)) != k)
        throw std::runtime_error("the snapshot changed after save()");
      ++verified;
    }
  }
  checkpointer.wait();
  traintl::wait_for_reports();
  traintl::report({{"mode", mode},
                   {"stalls_ms", stalls},
                   {"report_ms", report_ms},
                   {"verified", verified},
                   {"restored_step", restored}});
  std::remove((dir + "/" + file + ".pt").c_str());
  ::rmdir(dir.c_str());
}

}  // namespace

TRAINTL_ENTRYPOINT(train_loop)
