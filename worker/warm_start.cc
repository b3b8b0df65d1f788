#include "worker/warm_start.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

namespace traintl {
namespace worker {
namespace {

// The largest launch message: an environment of up to ~1 MiB.
constexpr size_t kMaxLaunchBytes = 1 << 20;

std::string DlError() {
  const char* e = ::dlerror();
  return e != nullptr ? e : "unknown error";
}

// Candidates for libtraintl_torch: installed beside lib/traintl under its soname (the
// libtraintl-torch package; the unversioned name is traintl-dev's link), or (a worker run
// from the build tree) where the build put it.
std::vector<std::string> TorchSdkCandidates(const std::string& runtime_lib_dir) {
  std::vector<std::string> out{runtime_lib_dir + "/../" TRAINTL_TORCH_SONAME};
#ifdef TRAINTL_BUILD_TORCH_LIB
  out.push_back(TRAINTL_BUILD_TORCH_LIB);
#endif
  return out;
}

}  // namespace

std::string PreloadRuntimes(const std::string& runtime_lib_dir) {
  std::string problems;
  for (const auto& path : TorchSdkCandidates(runtime_lib_dir)) {
    if (::access(path.c_str(), R_OK) != 0) continue;
    // RTLD_LOCAL, as a training library's dependency would be: the library that needs it
    // later finds it loaded (same soname) and nothing else sees its symbols.
    if (::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) {
      problems += "LibTorch (" + path + "): " + DlError() + "; ";
    }
    break;
  }
  const std::string shim = runtime_lib_dir + "/libtraintl_python.so";
  if (::access(shim.c_str(), R_OK) == 0) {
    void* handle = ::dlopen(shim.c_str(), RTLD_NOW | RTLD_LOCAL);
    using Prewarm = int (*)(const char* modules, char* err, size_t err_len);
    auto prewarm = handle != nullptr
                       ? reinterpret_cast<Prewarm>(::dlsym(handle, "traintl_python_prewarm"))
                       : nullptr;
    if (prewarm == nullptr) {
      problems += "Python (" + shim + "): " + DlError() + "; ";
    } else {
      char err[2048] = {0};
      if (prewarm("torch", err, sizeof err) != 0) problems += std::string("Python: ") + err + "; ";
    }
  }
  if (problems.size() >= 2) problems.resize(problems.size() - 2);
  return problems;
}

Result<WarmLaunch> ReceiveWarmLaunch(int fd) {
  std::string data;
  WarmLaunch launch;
  for (;;) {
    char buf[64 * 1024];
    char control[CMSG_SPACE(sizeof(int))];
    iovec iov{buf, sizeof buf};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Unavailable(std::string("reading the channel: ") + strerror(errno));
    if (n == 0) return Status::Unavailable("the agent closed the channel before the launch");
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
          c->cmsg_len == CMSG_LEN(sizeof(int))) {
        int received;
        std::memcpy(&received, CMSG_DATA(c), sizeof received);
        if (launch.log_fd >= 0) ::close(launch.log_fd);
        launch.log_fd = received;
      }
    }
    data.append(buf, static_cast<size_t>(n));
    // The agent writes the launch and nothing after it until the worker says hello.
    if (data.back() == '\n') break;
    if (data.size() > kMaxLaunchBytes) {
      if (launch.log_fd >= 0) ::close(launch.log_fd);
      return Status::InvalidArgument("the launch is too large");
    }
  }
  nlohmann::json j = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& what) {
    if (launch.log_fd >= 0) ::close(launch.log_fd);
    return Status::InvalidArgument("malformed launch message: " + what);
  };
  // Checked before reading: the agent is trusted, but a wrong type must not throw here.
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string() || j["type"] != "launch")
    return bad("not a launch");
  if (!j.contains("context") || !j["context"].is_string()) return bad("context");
  if (!j.contains("workdir") || !j["workdir"].is_string()) return bad("workdir");
  if (!j.contains("env") || !j["env"].is_array()) return bad("env");
  launch.context_path = j["context"].get<std::string>();
  launch.workdir = j["workdir"].get<std::string>();
  for (const auto& e : j["env"]) {
    if (!e.is_string() || e.get<std::string>().find('=') == std::string::npos) return bad("env");
    launch.env.push_back(e.get<std::string>());
  }
  if (launch.log_fd < 0) return bad("no log descriptor");
  return launch;
}

Status ApplyWarmLaunch(const WarmLaunch& launch) {
  if (::dup2(launch.log_fd, STDOUT_FILENO) < 0 || ::dup2(launch.log_fd, STDERR_FILENO) < 0) {
    return Status::Internal(std::string("dup2 of the log: ") + strerror(errno));
  }
  ::close(launch.log_fd);
  ::clearenv();
  // putenv keeps the pointer: the strings live as long as the process.
  auto* kept = new std::vector<std::string>(launch.env);
  for (auto& e : *kept) ::putenv(e.data());
  if (::chdir(launch.workdir.c_str()) != 0) {
    return Status::Internal("cannot enter the working directory " + launch.workdir + ": " +
                            strerror(errno));
  }
  // libgomp and OpenBLAS sized their thread pools when LibTorch loaded them, before the
  // rank's values existed (a rank with 1 CPU would run as many BLAS threads as the node
  // has cores). Loaded as LibTorch's dependencies, RTLD_LOCAL: each is reached by its own
  // handle.
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const char* blas = std::getenv("OPENBLAS_NUM_THREADS");
  if (blas == nullptr) blas = omp;
  using SetThreads = void (*)(int);
  auto call = [](const char* library, const char* function, const char* value) {
    if (value == nullptr || std::atoi(value) <= 0) return;
    if (void* handle = ::dlopen(library, RTLD_NOW | RTLD_NOLOAD)) {
      if (auto set = reinterpret_cast<SetThreads>(::dlsym(handle, function))) set(std::atoi(value));
    }
  };
  call("libgomp.so.1", "omp_set_num_threads", omp);
  for (const char* library : {"libblas.so.3", "libopenblas.so.0"})
    call(library, "openblas_set_num_threads", blas);
  return Status::Ok();
}

std::string EncodeWarmLaunch(const WarmLaunch& launch) {
  return nlohmann::json{{"type", "launch"},
                        {"context", launch.context_path},
                        {"workdir", launch.workdir},
                        {"env", launch.env}}
             .dump() +
         "\n";
}

}  // namespace worker
}  // namespace traintl
