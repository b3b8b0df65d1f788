// libtest_train.so: a fake training loop for worker and end-to-end tests. No LibTorch.
//
// train_loop_config (all optional):
//   epochs (3), sleep_ms (100): per epoch; checkpoint_every (1; 0 = never)
//   fail_at_epoch (-1 = never), fail_rank (0; -1 = every rank), fail_only_attempt (1;
//   0 = every attempt), fail_mode: "exit" (_Exit(7)) | "throw" | "abort" | "segfault" |
//   "hang" (sleeps forever, ignoring should_stop)
//   bad_checkpoint (false): report a checkpoint directory that does not exist
//   echo_env ([]): names of environment variables to copy into the metrics ("env")
//   tmp_dir ($TMPDIR or /tmp): where checkpoints are written before report()
//   ckpt_mb (0), ckpt_files (1): each checkpoint also holds ckpt_mb MiB per rank of
//   incompressible bytes in ckpt_files files (bench/checkpoint: large checkpoints)
//   spawn_child ("" = none): "group" forks a child that sleeps forever in the worker's
//   process group, "setsid" one in a session of its own; its pid goes to
//   <tmp_dir>/child_a<attempt>_r<rank>.pid (tests of processes that escape)
//   record_live (false): a thread rewrites <tmp_dir>/live_a<attempt>_r<rank> every 10 ms
//   with "<first> <last>": CLOCK_MONOTONIC milliseconds when the process began and now,
//   so a test can tell whether two attempts' processes were ever alive at once
//   loss_scale (1.0): the reported loss is loss_scale/(epoch+1) (tuning tests: a config
//   that makes one trial better than another)
// Every metrics object: epoch, loss (loss_scale/(epoch+1)), rank, world_size, local_rank,
// node_rank, attempt, restored_epoch (-1 without a checkpoint), restored_path ("" without),
// and env when echo_env is set. A checkpoint holds state.json {"epoch","rank"} and
// rank_<R>.json; it resumes at the epoch after the restored one.
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <traintl/train.h>

namespace {

void SleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Sleeps in slices so that a stop request ends the epoch early.
void SleepUnlessStopped(int ms) {
  for (int left = ms; left > 0 && !traintl::should_stop(); left -= 10)
    SleepMs(left < 10 ? left : 10);
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out.flush()) throw std::runtime_error("cannot write " + path);
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  return nlohmann::json::parse(in);
}

void InjectFailure(const std::string& mode, int epoch, int rank) {
  std::printf("injecting failure '%s' at epoch %d on rank %d\n", mode.c_str(), epoch, rank);
  std::fflush(stdout);
  if (mode == "exit") std::_Exit(7);
  if (mode == "abort") std::abort();
  if (mode == "segfault") {
    volatile int* p = nullptr;
    *p = 1;
  }
  if (mode == "hang") {
    for (;;) SleepMs(1000);
  }
  throw std::runtime_error("injected failure at epoch " + std::to_string(epoch) + " on rank " +
                           std::to_string(rank));
}

void train_loop(const nlohmann::json& config) {
  const traintl::Context ctx = traintl::get_context();
  const int rank = ctx.world_rank();
  const int epochs = config.value("epochs", 3);
  const int sleep_ms = config.value("sleep_ms", 100);
  const int checkpoint_every = config.value("checkpoint_every", 1);
  const int fail_at_epoch = config.value("fail_at_epoch", -1);
  const int fail_rank = config.value("fail_rank", 0);
  const int fail_only_attempt = config.value("fail_only_attempt", 1);
  const std::string fail_mode = config.value("fail_mode", "throw");
  const bool bad_checkpoint = config.value("bad_checkpoint", false);
  const int ckpt_mb = config.value("ckpt_mb", 0);
  const double loss_scale = config.value("loss_scale", 1.0);
  const int ckpt_files = std::max(1, config.value("ckpt_files", 1));
  const char* tmpdir_env = std::getenv("TMPDIR");
  const std::string tmp_dir =
      config.value("tmp_dir", tmpdir_env != nullptr && *tmpdir_env ? tmpdir_env : "/tmp");

  if (config.value("record_live", false)) {
    const std::string path =
        tmp_dir + "/live_a" + std::to_string(ctx.attempt()) + "_r" + std::to_string(rank);
    std::thread([path] {
      const auto mono_ms = [] {
        struct timespec ts;
        ::clock_gettime(CLOCK_MONOTONIC, &ts);
        return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
      };
      const long long first = mono_ms();
      for (;;) {
        const std::string text = std::to_string(first) + " " + std::to_string(mono_ms()) + "\n";
        const std::string tmp = path + ".tmp";
        if (FILE* f = std::fopen(tmp.c_str(), "w")) {
          std::fputs(text.c_str(), f);
          std::fclose(f);
          std::rename(tmp.c_str(), path.c_str());
        }
        SleepMs(10);
      }
    }).detach();
  }
  if (const std::string spawn = config.value("spawn_child", std::string()); !spawn.empty()) {
    const pid_t child = ::fork();
    if (child == 0) {
      if (spawn == "setsid") ::setsid();
      for (;;) ::pause();
    }
    std::ofstream(tmp_dir + "/child_a" + std::to_string(ctx.attempt()) + "_r" +
                  std::to_string(rank) + ".pid")
        << child << "\n";
  }

  int restored_epoch = -1;
  std::string restored_path;
  if (auto ckpt = traintl::get_checkpoint()) {
    restored_path = ckpt->path();
    restored_epoch = ReadJson(restored_path + "/state.json").at("epoch").get<int>();
  }
  std::printf("rank %d/%d attempt %d starting at epoch %d (restored from '%s')\n", rank,
              ctx.world_size(), ctx.attempt(), restored_epoch + 1, restored_path.c_str());

  nlohmann::json env = nlohmann::json::object();
  for (const auto& name : config.value("echo_env", nlohmann::json::array())) {
    const char* value = std::getenv(name.get<std::string>().c_str());
    env[name.get<std::string>()] = value != nullptr ? nlohmann::json(value) : nlohmann::json();
  }

  for (int epoch = restored_epoch + 1; epoch < epochs; ++epoch) {
    if (epoch == fail_at_epoch && (fail_rank < 0 || fail_rank == rank) &&
        (fail_only_attempt == 0 || fail_only_attempt == ctx.attempt())) {
      InjectFailure(fail_mode, epoch, rank);
    }
    SleepUnlessStopped(sleep_ms);
    const double loss = loss_scale / (epoch + 1);
    nlohmann::json metrics = {{"epoch", epoch},
                              {"loss", loss},
                              {"rank", rank},
                              {"world_size", ctx.world_size()},
                              {"local_rank", ctx.local_rank()},
                              {"node_rank", ctx.node_rank()},
                              {"attempt", ctx.attempt()},
                              {"restored_epoch", restored_epoch},
                              {"restored_path", restored_path}};
    if (!env.empty()) metrics["env"] = env;
    std::printf("epoch %d rank %d loss %.6f\n", epoch, rank, loss);

    if (bad_checkpoint) {
      traintl::report(metrics, traintl::Checkpoint::from_directory("/nonexistent/traintl-ckpt"));
    } else if (checkpoint_every > 0 && (epoch + 1) % checkpoint_every == 0) {
      std::string tmpl = tmp_dir + "/traintl-test-ckpt-XXXXXX";
      if (::mkdtemp(tmpl.data()) == nullptr)
        throw std::runtime_error("mkdtemp failed in " + tmp_dir);
      const std::string dir = tmpl;
      WriteFile(dir + "/state.json", nlohmann::json{{"epoch", epoch}, {"rank", rank}}.dump());
      WriteFile(dir + "/rank_" + std::to_string(rank) + ".json", metrics.dump());
      std::vector<std::string> blobs;
      if (ckpt_mb > 0) {
        std::string chunk(static_cast<size_t>(ckpt_mb) * (1 << 20) / ckpt_files, '\0');
        uint64_t x = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(rank * 131 + epoch);
        for (char& c : chunk) {  // xorshift: nothing a file system could compress away
          x ^= x << 13;
          x ^= x >> 7;
          x ^= x << 17;
          c = static_cast<char>(x);
        }
        for (int i = 0; i < ckpt_files; ++i) {
          blobs.push_back(dir + "/blob_r" + std::to_string(rank) + "_" + std::to_string(i));
          WriteFile(blobs.back(), chunk);
        }
      }
      traintl::report(metrics, traintl::Checkpoint::from_directory(dir));
      for (const auto& b : blobs) std::remove(b.c_str());
      // Accepted: the worker has its own durable copy now.
      std::remove((dir + "/state.json").c_str());
      std::remove((dir + "/rank_" + std::to_string(rank) + ".json").c_str());
      ::rmdir(dir.c_str());
    } else {
      traintl::report(metrics);
    }
    if (traintl::should_stop()) {
      std::printf("rank %d stopping after epoch %d\n", rank, epoch);
      return;
    }
  }
}

}  // namespace

TRAINTL_ENTRYPOINT(train_loop)
