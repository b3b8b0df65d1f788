// Tests of libtraintl_python.so, the entry shim for {"python": "module:function"} entry
// points. This test plays traintl-worker: a forked child per case (CPython starts once per
// process) builds an AgentChannel on a socketpair and a WorkerHost from a rank context,
// dlopens the shim as the worker does and calls traintl_entry_python; the parent plays the
// agent on the other end (acks reports, sends stop) and collects the entry's result.
#include <catch2/catch.hpp>

#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "proto/rank_context.h"
#include "traintl/abi.h"
#include "worker/agent_channel.h"
#include "worker/worker_host.h"

namespace traintl {
namespace {

using nlohmann::json;

// Guards against a hung child; never a measure of speed.
constexpr int kHangGuardMs = 120000;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/traintl-python-shim-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() { (void)RemoveAll(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

struct ShimResult {
  int rc = -1;
  std::string err;
  std::vector<json> reports;
  // The rank's log (the child's stdout and stderr) as it was when each report arrived.
  std::vector<std::string> log_at_report;
  std::string log;
};

// The child: traintl-worker's part. Never returns.
[[noreturn]] void RunChild(int channel_fd, const std::string& context_text,
                           const std::string& log_path, const std::string& result_path,
                           size_t err_len) {
  int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ::dup2(log, 1);
  ::dup2(log, 2);
  json result;
  auto context = ParseRankContext(context_text);
  if (!context.ok()) {
    result = {{"rc", -1}, {"err", context.status().message()}};
  } else {
    auto* channel = new worker::AgentChannel(channel_fd);
    channel->Start();
    auto* host = new worker::WorkerHost(std::move(context).value(), channel);
    void* lib = ::dlopen(TRAINTL_PYTHON_SHIM, RTLD_NOW | RTLD_LOCAL);
    auto version =
        lib ? reinterpret_cast<traintl_abi_version_fn>(::dlsym(lib, TRAINTL_ABI_VERSION_SYMBOL))
            : nullptr;
    auto entry =
        lib ? reinterpret_cast<traintl_entry_fn>(::dlsym(lib, "traintl_entry_python")) : nullptr;
    if (version == nullptr || entry == nullptr || version() != TRAINTL_ABI_VERSION) {
      const char* e = ::dlerror();
      result = {{"rc", -1}, {"err", std::string("loading the shim: ") + (e ? e : "bad ABI")}};
    } else {
      std::vector<char> err(err_len, 'x');
      const int rc = entry(host->api(), err.data(), err.size());
      const bool terminated = std::find(err.begin(), err.end(), '\0') != err.end();
      result = {{"rc", rc}, {"err", terminated ? std::string(err.data()) : "<not NUL-terminated>"}};
    }
  }
  (void)WriteFileAtomic(result_path, result.dump());
  ::_exit(0);
}

// Runs `python` ("module:function") through the shim in a child, with `modules` (file
// name -> source) in a fresh working_dir, and plays the agent until the child is done.
ShimResult RunShim(const std::string& python, const std::map<std::string, std::string>& modules,
                   json context_extra = json::object(), size_t err_len = 64 * 1024,
                   bool send_stop = false) {
  TempDir dir;
  const std::string wd = JoinPath(dir.path(), "work");
  REQUIRE(MakeDirs(wd).ok());
  for (const auto& [name, source] : modules)
    REQUIRE(WriteFileAtomic(JoinPath(wd, name), source).ok());
  json context = {{"job_id", "3f9c2a1b7d4e"},
                  {"job_name", "shim-test"},
                  {"attempt", 1},
                  {"world_rank", 0},
                  {"world_size", 1},
                  {"library", TRAINTL_PYTHON_SHIM},
                  {"function", "python"},
                  {"python", python},
                  {"working_dir", wd},
                  {"config", {{"lr", 0.1}, {"epochs", 2}}},
                  {"trial_dir", JoinPath(dir.path(), "trial")},
                  {"staging_dir", JoinPath(dir.path(), "staging")},
                  {"master_addr", "127.0.0.1"},
                  {"master_port", FreePort()},
                  {"collective_timeout_s", 60},
                  {"use_gpu", false}};
  for (const auto& item : context_extra.items()) context[item.key()] = item.value();
  const std::string log_path = JoinPath(dir.path(), "rank.log");
  const std::string result_path = JoinPath(dir.path(), "result.json");

  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(sv[0]);
    ::setpgid(0, 0);
    RunChild(sv[1], context.dump(), log_path, result_path, err_len);
  }
  ::close(sv[1]);
  const int fd = sv[0];
  auto send = [&](const json& message) {
    const std::string line = message.dump() + "\n";
    (void)::send(fd, line.data(), line.size(), MSG_NOSIGNAL);
  };
  if (send_stop) send({{"type", "stop"}});

  ShimResult out;
  std::string buffer;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kHangGuardMs);
  bool exited = false;
  int status = 0;
  while (!exited) {
    pollfd p = {fd, POLLIN, 0};
    if (::poll(&p, 1, 20) > 0) {
      char chunk[4096];
      const ssize_t n = ::read(fd, chunk, sizeof chunk);
      if (n > 0) buffer.append(chunk, static_cast<size_t>(n));
    }
    for (size_t nl; (nl = buffer.find('\n')) != std::string::npos;) {
      json message = json::parse(buffer.substr(0, nl));
      buffer.erase(0, nl + 1);
      if (message.value("type", "") == "report") {
        auto log = ReadFile(log_path);
        out.log_at_report.push_back(log.ok() ? *log : "");
        out.reports.push_back(message);
        // Staged files must exist before the ack, or the test fails them below.
        send({{"type", "ack"}, {"seq", message["seq"]}});
      }
    }
    exited = ::waitpid(pid, &status, WNOHANG) == pid;
    if (!exited && std::chrono::steady_clock::now() > deadline) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ::close(fd);
      auto log = ReadFile(log_path);
      FAIL("the child did not finish; log:\n" << (log.ok() ? *log : ""));
    }
  }
  ::close(fd);
  // Whatever the entry left behind (torch threads, data loaders) goes with the child.
  ::kill(-pid, SIGKILL);
  auto log = ReadFile(log_path);
  out.log = log.ok() ? *log : "";
  INFO("log:\n" << out.log);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  auto result = ReadFile(result_path);
  REQUIRE(result.ok());
  json r = json::parse(*result);
  out.rc = r["rc"].get<int>();
  out.err = r["err"].get<std::string>();
  return out;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST_CASE("a Python function runs with its config in its working_dir and reports", "[python]") {
  const std::string module = R"(import os, sys, tempfile
from traintl import train

def train_func(config):
    print("started", config["epochs"])
    ctx = train.get_context()
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "w.txt"), "w") as f:
        f.write("w")
    train.report({"lr": config["lr"], "rank": ctx.get_world_rank(),
                  "job": ctx.get_trial_name(), "cwd": os.getcwd(), "argv": sys.argv,
                  "path0": sys.path[0], "torch": "torch" in sys.modules},
                 checkpoint=train.Checkpoint.from_directory(d))
    train.report({"second": True})
)";
  ShimResult r = RunShim("train_ok:train_func", {{"train_ok.py", module}});
  INFO("err: " << r.err << "\nlog:\n" << r.log);
  REQUIRE(r.rc == TRAINTL_ENTRY_OK);
  REQUIRE(r.err.empty());
  REQUIRE(r.reports.size() == 2);
  const json& m = r.reports[0]["metrics"];
  CHECK(r.reports[0]["seq"] == 0);
  CHECK(r.reports[1]["seq"] == 1);
  CHECK(m["lr"] == 0.1);
  CHECK(m["rank"] == 0);
  CHECK(m["job"] == "shim-test");
  const std::string wd = m["path0"].get<std::string>();
  CHECK(wd.size() > 5);
  CHECK(wd.substr(wd.size() - 5) == "/work");
  CHECK(m["cwd"] == wd);
  CHECK(m["argv"] == json::array({"train_ok"}));
  CHECK(m["torch"] == false);
  const std::string staged = r.reports[0]["checkpoint"].get<std::string>();
  CHECK(Contains(staged, "seq_0/rank_0"));
  // stdout is unbuffered: the line is in the log before report() returned.
  CHECK(Contains(r.log_at_report[0], "started 2"));
}

TEST_CASE("a Python function without parameters is called without the config", "[python]") {
  ShimResult r = RunShim("noargs:main", {{"noargs.py",
                                          "from traintl import train\n"
                                          "def main():\n"
                                          "    train.report({'called': True})\n"}});
  INFO("err: " << r.err << "\nlog:\n" << r.log);
  REQUIRE(r.rc == TRAINTL_ENTRY_OK);
  REQUIRE(r.reports.size() == 1);
  CHECK(r.reports[0]["metrics"]["called"] == true);
}

TEST_CASE("a dotted function name reaches a static method", "[python]") {
  ShimResult r = RunShim("dotted:Trainer.run", {{"dotted.py",
                                                 "from traintl import train\n"
                                                 "class Trainer:\n"
                                                 "    @staticmethod\n"
                                                 "    def run(config):\n"
                                                 "        train.report({'lr': config['lr']})\n"}});
  INFO("err: " << r.err);
  REQUIRE(r.rc == TRAINTL_ENTRY_OK);
  REQUIRE(r.reports.size() == 1);
}

const char kRaises[] = R"(def helper(x):
    raise ValueError(f"bad lr {x}")

def train_func(config):
    helper(42)
)";

TEST_CASE("an exception fails the attempt with its traceback", "[python]") {
  ShimResult r = RunShim("raises:train_func", {{"raises.py", kRaises}});
  INFO("err: " << r.err << "\nlog:\n" << r.log);
  REQUIRE(r.rc == TRAINTL_ENTRY_FAILED);
  CHECK(Contains(r.err, "Traceback (most recent call last)"));
  CHECK(Contains(r.err, "in helper"));
  CHECK(Contains(r.err, "ValueError: bad lr 42"));
  CHECK(Contains(r.log, "ValueError: bad lr 42"));
  CHECK(Contains(r.log, "raises.py"));
}

TEST_CASE("a traceback longer than the error buffer keeps its end", "[python]") {
  ShimResult r = RunShim("raises:train_func", {{"raises.py", kRaises}}, json::object(), 40);
  INFO("err: " << r.err);
  REQUIRE(r.rc == TRAINTL_ENTRY_FAILED);
  CHECK(r.err.size() == 39);
  CHECK(Contains(r.err, "ValueError: bad lr 42"));
}

TEST_CASE("sys.exit(0) is success and another code a failure", "[python]") {
  ShimResult ok = RunShim("exits:f", {{"exits.py", "import sys\ndef f(c):\n    sys.exit(0)\n"}});
  CHECK(ok.rc == TRAINTL_ENTRY_OK);
  ShimResult none = RunShim("exits:f", {{"exits.py", "import sys\ndef f(c):\n    sys.exit()\n"}});
  CHECK(none.rc == TRAINTL_ENTRY_OK);
  ShimResult three = RunShim("exits:f", {{"exits.py", "import sys\ndef f(c):\n    sys.exit(3)\n"}});
  CHECK(three.rc == TRAINTL_ENTRY_FAILED);
  CHECK(three.err == "the training function called sys.exit(3)");
}

TEST_CASE("a module that cannot be used is incompatible with a clear reason", "[python]") {
  SECTION("missing module") {
    ShimResult r = RunShim("nosuch:f", {});
    INFO("err: " << r.err);
    CHECK(r.rc == TRAINTL_ENTRY_INCOMPATIBLE);
    CHECK(Contains(r.err, "cannot import module 'nosuch' (working_dir /"));
    CHECK(Contains(r.err, "): ModuleNotFoundError: No module named 'nosuch'"));
  }
  SECTION("syntax error") {
    ShimResult r = RunShim("broken:f", {{"broken.py", "x = 1\n\ndef f(:\n    pass\n"}});
    INFO("err: " << r.err);
    CHECK(r.rc == TRAINTL_ENTRY_INCOMPATIBLE);
    CHECK(Contains(r.err, "cannot import module 'broken'"));
    CHECK(Contains(r.err, "SyntaxError: "));
    CHECK(Contains(r.err, "(broken.py, line 3)"));
  }
  SECTION("a failing import inside the module") {
    ShimResult r =
        RunShim("needs:f", {{"needs.py", "import traintl_no_such_dep\ndef f(): pass\n"}});
    INFO("err: " << r.err);
    CHECK(r.rc == TRAINTL_ENTRY_INCOMPATIBLE);
    CHECK(Contains(r.err, "cannot import module 'needs'"));
    CHECK(Contains(r.err, "No module named 'traintl_no_such_dep'"));
    CHECK(Contains(r.err, "needs.py\", line 1"));  // the traceback's last lines
  }
  SECTION("missing function") {
    ShimResult r = RunShim("mod:train_fn", {{"mod.py", "def other(config): pass\n"}});
    INFO("err: " << r.err);
    CHECK(r.rc == TRAINTL_ENTRY_INCOMPATIBLE);
    CHECK(Contains(r.err, "module 'mod' has no function 'train_fn'"));
  }
  SECTION("not callable") {
    ShimResult r = RunShim("mod:train_fn", {{"mod.py", "train_fn = 3\n"}});
    INFO("err: " << r.err);
    CHECK(r.rc == TRAINTL_ENTRY_INCOMPATIBLE);
    CHECK(Contains(r.err, "'train_fn' is not callable (it is a int)"));
  }
  SECTION("too many parameters") {
    ShimResult r = RunShim("mod:f", {{"mod.py", "def f(config, other): pass\n"}});
    INFO("err: " << r.err);
    CHECK(r.rc == TRAINTL_ENTRY_INCOMPATIBLE);
    CHECK(Contains(r.err, "must take 0 or 1 arguments"));
  }
  SECTION("no function named") {
    ShimResult r = RunShim("mod", {{"mod.py", "def f(): pass\n"}});
    INFO("err: " << r.err);
    CHECK(r.rc == TRAINTL_ENTRY_INCOMPATIBLE);
    CHECK(Contains(r.err, "\"module:function\""));
  }
}

TEST_CASE("an exception at the module's top level fails the attempt (retryable)", "[python]") {
  ShimResult r = RunShim("top:f", {{"top.py", "raise RuntimeError('no data yet')\n"}});
  INFO("err: " << r.err);
  CHECK(r.rc == TRAINTL_ENTRY_FAILED);
  CHECK(Contains(r.err, "importing module 'top' failed"));
  CHECK(Contains(r.err, "RuntimeError: no data yet"));
}

TEST_CASE("should_stop() sees the agent's stop", "[python]") {
  ShimResult r = RunShim("stops:f",
                         {{"stops.py",
                           "import time\n"
                           "from traintl import train\n"
                           "def f():\n"
                           "    end = time.monotonic() + 60\n"
                           "    while not train.should_stop() and "
                           "time.monotonic() < end:\n"
                           "        time.sleep(0.01)\n"
                           "    train.report({'stopped': train.should_stop()})\n"}},
                         json::object(), 64 * 1024, /*send_stop=*/true);
  INFO("err: " << r.err);
  REQUIRE(r.rc == TRAINTL_ENTRY_OK);
  REQUIRE(r.reports.size() == 1);
  CHECK(r.reports[0]["metrics"]["stopped"] == true);
}

TEST_CASE("an attached function reads its dataset shard", "[python]") {
  TempDir data;
  const std::string csv = JoinPath(data.path(), "d.csv");
  REQUIRE(WriteFileAtomic(csv, "a,b\n1,2.5\n3,4.5\n5,6.5\n").ok());
  ShimResult r =
      RunShim("reads:f",
              {{"reads.py",
                "from traintl import train\n"
                "def f(config):\n"
                "    s = train.get_dataset_shard('train')\n"
                "    a = [int(x) for b in s.iter_batches(batch_size=2) for x in b['a']]\n"
                "    bs = [float(x) for b in s.iter_batches(batch_size=2) for x in b['b']]\n"
                "    train.report({'a': a, 'b': bs})\n"}},
              {{"datasets", {{"train", {{"uri", "file://" + csv}, {"split", false}}}}}});
  INFO("err: " << r.err << "\nlog:\n" << r.log);
  REQUIRE(r.rc == TRAINTL_ENTRY_OK);
  REQUIRE(r.reports.size() == 1);
  CHECK(r.reports[0]["metrics"]["a"] == json::array({1, 3, 5}));
  CHECK(r.reports[0]["metrics"]["b"] == json::array({2.5, 4.5, 6.5}));
}

TEST_CASE("a module that imports torch gets an initialized gloo process group", "[python]") {
  const std::string module = R"(import torch
import torch.distributed as dist
from traintl import train

def train_func(config):
    t = torch.ones(3)
    dist.all_reduce(t)
    model = train.torch.prepare_model(torch.nn.Linear(2, 1))
    train.report({"initialized": dist.is_initialized(), "world_size": dist.get_world_size(),
                  "rank": dist.get_rank(), "backend": dist.get_backend(),
                  "sum": t.tolist(), "device": str(train.torch.get_device()),
                  "wrapped": type(model).__name__})
)";
  ShimResult r = RunShim("uses_torch:train_func", {{"uses_torch.py", module}});
  INFO("err: " << r.err << "\nlog:\n" << r.log);
  REQUIRE(r.rc == TRAINTL_ENTRY_OK);
  REQUIRE(r.reports.size() == 1);
  const json& m = r.reports[0]["metrics"];
  CHECK(m["initialized"] == true);
  CHECK(m["world_size"] == 1);
  CHECK(m["rank"] == 0);
  CHECK(m["backend"] == "gloo");
  CHECK(m["sum"] == json::array({1.0, 1.0, 1.0}));
  CHECK(m["device"] == "cpu");
  CHECK(m["wrapped"] == "Linear");  // one rank: no DistributedDataParallel
}

}  // namespace
}  // namespace traintl
