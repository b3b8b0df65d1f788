// libtest_train.so: a fake training loop for worker and end-to-end tests. No LibTorch.
//
// train_loop_config (all optional):
//   epochs (3), sleep_ms (100): per epoch; checkpoint_every (1; 0 = never)
//   fail_at_epoch (-1 = never), fail_rank (0; -1 = every rank), fail_only_attempt (1;
//   0 = every attempt), fail_mode: "exit" (_Exit(7)) | "throw" | "abort" | "segfault" |
//   "hang" (sleeps forever, ignoring should_stop) | "binary" (writes bytes that are not
//   UTF-8, a character cut short last, to stderr, then _Exit(7))
//   bad_checkpoint (false): report a checkpoint directory that does not exist
//   echo_env ([]): names of environment variables to copy into the metrics ("env")
//   extra_metrics (0): that many more numeric metrics, extra_0 .. extra_<n-1>
//   print_kb (0): KiB of 64-byte lines each epoch prints to stdout
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
//   async_checkpoint (false): report checkpoints with ReportOptions::async_upload, and
//   reuse (overwrite) one checkpoint directory per rank: the snapshot must not see it change
//   deferred_checkpoint (false): report checkpoints with report_deferred(), writing the
//   files on a thread after it returned; deferred_fail_epoch (-1): that epoch's files
//   "cannot be written" (DeferredCheckpoint::fail)
//   metrics_between (0): metrics-only reports after each checkpoint report (queued behind
//   an asynchronous upload)
//   ckpt_manifest (false): each checkpoint also holds files_r<R>.json, {file: [size, crc32]}
//   of the rank's own files (rank_<R>.json, its blobs); a restored checkpoint that has one is
//   verified against it (a mismatch throws: "restored an incomplete checkpoint")
// Every metrics object: epoch, loss (loss_scale/(epoch+1)), rank, world_size, local_rank,
// node_rank, attempt, restored_epoch (-1 without a checkpoint), restored_path ("" without),
// and env when echo_env is set. A checkpoint holds state.json {"epoch","rank"} and
// rank_<R>.json; it resumes at the epoch after the restored one.
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
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

uint32_t Crc32(const std::string& data) {
  static uint32_t table[256] = {0};
  if (table[1] == 0) {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) != 0 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
  }
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char ch : data) crc = table[(crc ^ ch) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Removes `dir` and the files in it (a checkpoint directory has no subdirectories).
void RemoveFlatDir(const std::string& dir) {
  if (DIR* d = ::opendir(dir.c_str())) {
    while (struct dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") std::remove((dir + "/" + name).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

// Every files_r*.json of a restored checkpoint must match the files it lists.
void VerifyManifests(const std::string& dir) {
  for (int r = 0; r < 64; ++r) {
    const std::string manifest = dir + "/files_r" + std::to_string(r) + ".json";
    if (::access(manifest.c_str(), F_OK) != 0) continue;
    const nlohmann::json files = ReadJson(manifest);  // (items() of a temporary dangles)
    for (const auto& [name, entry] : files.items()) {
      const std::string data = ReadAll(dir + "/" + name);
      if (data.size() != entry.at(0).get<size_t>() || Crc32(data) != entry.at(1).get<uint32_t>())
        throw std::runtime_error("restored an incomplete checkpoint: " + dir + "/" + name);
    }
  }
}

void InjectFailure(const std::string& mode, int epoch, int rank) {
  std::printf("injecting failure '%s' at epoch %d on rank %d\n", mode.c_str(), epoch, rank);
  std::fflush(stdout);
  if (mode == "exit") std::_Exit(7);
  if (mode == "binary") {
    std::fputs("\xff\xfe not text \xc0\xaf\xed\xa0\x80 \xe2\x96", stderr);
    std::fflush(stderr);
    std::_Exit(7);
  }
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
  const int extra_metrics = config.value("extra_metrics", 0);
  const int print_kb = config.value("print_kb", 0);
  const int fail_rank = config.value("fail_rank", 0);
  const int fail_only_attempt = config.value("fail_only_attempt", 1);
  const std::string fail_mode = config.value("fail_mode", "throw");
  const bool bad_checkpoint = config.value("bad_checkpoint", false);
  const int ckpt_mb = config.value("ckpt_mb", 0);
  const double loss_scale = config.value("loss_scale", 1.0);
  const int ckpt_files = std::max(1, config.value("ckpt_files", 1));
  const bool async_checkpoint = config.value("async_checkpoint", false);
  const bool deferred_checkpoint = config.value("deferred_checkpoint", false);
  const int deferred_fail_epoch = config.value("deferred_fail_epoch", -1);
  const int metrics_between = config.value("metrics_between", 0);
  const bool ckpt_manifest = config.value("ckpt_manifest", false);
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
    VerifyManifests(restored_path);
    restored_epoch = ReadJson(restored_path + "/state.json").at("epoch").get<int>();
  }
  std::printf("rank %d/%d attempt %d starting at epoch %d (restored from '%s')\n", rank,
              ctx.world_size(), ctx.attempt(), restored_epoch + 1, restored_path.c_str());

  // A write to a pipe nobody reads: EPIPE when the worker ignores SIGPIPE, else the rank
  // dies (as a survivor whose collective peer died did, writing to its socket).
  int closed_pipe_errno = 0;
  if (config.value("write_closed_pipe", false)) {
    int fds[2];
    if (::pipe(fds) == 0) {
      ::close(fds[0]);
      if (::write(fds[1], "x", 1) < 0) closed_pipe_errno = errno;
      ::close(fds[1]);
    }
  }

  nlohmann::json env = nlohmann::json::object();
  for (const auto& name : config.value("echo_env", nlohmann::json::array())) {
    const char* value = std::getenv(name.get<std::string>().c_str());
    env[name.get<std::string>()] = value != nullptr ? nlohmann::json(value) : nlohmann::json();
  }

  for (int epoch = restored_epoch + 1; epoch < epochs; ++epoch) {
    for (int k = 0; k < print_kb * 1024 / 64; ++k)
      std::printf("epoch %6d line %10d %34s\n", epoch, k, "chatty");
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
    for (int k = 0; k < extra_metrics; ++k) metrics["extra_" + std::to_string(k)] = k;
    if (closed_pipe_errno != 0) metrics["closed_pipe_errno"] = closed_pipe_errno;
    std::printf("epoch %d rank %d loss %.6f\n", epoch, rank, loss);

    if (bad_checkpoint) {
      traintl::report(metrics, traintl::Checkpoint::from_directory("/nonexistent/traintl-ckpt"));
    } else if (checkpoint_every > 0 && (epoch + 1) % checkpoint_every == 0) {
      // Writes this epoch's checkpoint files into `dir`.
      auto write_files = [=](const std::string& dir) {
        nlohmann::json manifest = nlohmann::json::object();
        auto put = [&](const std::string& name, const std::string& data) {
          WriteFile(dir + "/" + name, data);
          manifest[name] = {data.size(), Crc32(data)};
        };
        // Every rank writes a state.json and the merge keeps rank 0's: not in the manifest.
        WriteFile(dir + "/state.json", nlohmann::json{{"epoch", epoch}, {"rank", rank}}.dump());
        put("rank_" + std::to_string(rank) + ".json", metrics.dump());
        if (ckpt_mb > 0) {
          std::string chunk(static_cast<size_t>(ckpt_mb) * (1 << 20) / ckpt_files, '\0');
          uint64_t x = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(rank * 131 + epoch);
          for (char& c : chunk) {  // xorshift: nothing a file system could compress away
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            c = static_cast<char>(x);
          }
          for (int i = 0; i < ckpt_files; ++i)
            put("blob_r" + std::to_string(rank) + "_" + std::to_string(i), chunk);
        }
        if (ckpt_manifest)
          WriteFile(dir + "/files_r" + std::to_string(rank) + ".json", manifest.dump());
      };
      if (deferred_checkpoint) {
        auto pending =
            std::make_shared<traintl::DeferredCheckpoint>(traintl::report_deferred(metrics));
        const bool fail = epoch == deferred_fail_epoch;
        std::thread([pending, write_files, fail] {
          if (fail) {
            pending->fail("injected: the files cannot be written");
            return;
          }
          write_files(pending->dir());
          pending->done();
        }).detach();
      } else {
        std::string dir;
        if (async_checkpoint) {
          // One directory, rewritten every epoch: the snapshot must hold what it was.
          dir = tmp_dir + "/traintl-test-ckpt-a" + std::to_string(ctx.attempt()) + "-r" +
                std::to_string(rank) + "-" + std::to_string(::getpid());
          ::mkdir(dir.c_str(), 0700);
        } else {
          std::string tmpl = tmp_dir + "/traintl-test-ckpt-XXXXXX";
          if (::mkdtemp(tmpl.data()) == nullptr)
            throw std::runtime_error("mkdtemp failed in " + tmp_dir);
          dir = tmpl;
        }
        write_files(dir);
        if (async_checkpoint) {
          traintl::report(metrics, traintl::Checkpoint::from_directory(dir),
                          traintl::ReportOptions{.async_upload = true});
          // Snapshotted: clobber it at once, as a loop that reuses its buffers would.
          WriteFile(dir + "/state.json", "clobbered");
        } else {
          traintl::report(metrics, traintl::Checkpoint::from_directory(dir));
          // Accepted: the worker has its own copy now.
          RemoveFlatDir(dir);
        }
      }
      for (int i = 0; i < metrics_between; ++i) {
        nlohmann::json between = metrics;
        between["between"] = i;
        traintl::report(between);
      }
    } else {
      traintl::report(metrics);
    }
    if (traintl::should_stop()) {
      std::printf("rank %d stopping after epoch %d\n", rank, epoch);
      break;
    }
  }
  if (async_checkpoint) {
    RemoveFlatDir(tmp_dir + "/traintl-test-ckpt-a" + std::to_string(ctx.attempt()) + "-r" +
                  std::to_string(rank) + "-" + std::to_string(::getpid()));
  }
}

}  // namespace

TRAINTL_ENTRYPOINT(train_loop)
