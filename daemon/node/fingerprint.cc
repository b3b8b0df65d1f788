#include "daemon/node/fingerprint.h"

#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "common/file_util.h"
#include "common/logging.h"

namespace traintl {
namespace {

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Path of this process's cgroup v2 directory, "" when not on cgroup v2.
std::string CgroupDir() {
  auto content = ReadFile("/proc/self/cgroup");
  if (!content.ok()) return "";
  std::istringstream in(*content);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + line.substr(3);
  }
  return "";
}

double DetectCpus() {
  cpu_set_t set;
  double cpus = static_cast<double>(sysconf(_SC_NPROCESSORS_ONLN));
  if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = CPU_COUNT(&set);
  const std::string dir = CgroupDir();
  if (!dir.empty()) {
    auto max = ReadFile(dir + "/cpu.max");
    if (max.ok()) {
      if (auto quota = ParseCgroupCpuMax(*max)) cpus = std::min(cpus, *quota);
    }
  }
  return cpus;
}

int64_t DetectMemory() {
  int64_t mem = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  const std::string dir = CgroupDir();
  if (!dir.empty()) {
    auto max = ReadFile(dir + "/memory.max");
    if (max.ok() && Trim(*max) != "max") {
      try {
        int64_t limit = std::stoll(Trim(*max));
        if (limit > 0) mem = std::min(mem, limit);
      } catch (const std::exception&) {
      }
    }
  }
  return mem;
}

// NVML through dlopen so that the daemon neither links nor needs the NVIDIA driver.
std::vector<GpuInfo> DetectGpus() {
  std::vector<GpuInfo> out;
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return out;
  using InitFn = int (*)();
  using CountFn = int (*)(unsigned*);
  using HandleFn = int (*)(unsigned, void**);
  using NameFn = int (*)(void*, char*, unsigned);
  struct Memory {
    unsigned long long total, free, used;
  };
  using MemFn = int (*)(void*, Memory*);
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "nvmlInit_v2"));
  auto count = reinterpret_cast<CountFn>(dlsym(lib, "nvmlDeviceGetCount_v2"));
  auto handle = reinterpret_cast<HandleFn>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto name = reinterpret_cast<NameFn>(dlsym(lib, "nvmlDeviceGetName"));
  auto uuid = reinterpret_cast<NameFn>(dlsym(lib, "nvmlDeviceGetUUID"));
  auto mem = reinterpret_cast<MemFn>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
  unsigned n = 0;
  if (!init || !count || !handle || init() != 0 || count(&n) != 0) {
    LOG_WARN << "NVML present but not usable; no GPUs detected";
    return out;
  }
  for (unsigned i = 0; i < n; ++i) {
    void* h = nullptr;
    if (handle(i, &h) != 0) continue;
    GpuInfo g;
    g.index = static_cast<int>(i);
    char buf[128] = {0};
    if (name && name(h, buf, sizeof buf) == 0) g.name = buf;
    char ubuf[128] = {0};
    if (uuid && uuid(h, ubuf, sizeof ubuf) == 0) g.uuid = ubuf;
    Memory m{};
    if (mem && mem(h, &m) == 0) g.memory_bytes = static_cast<int64_t>(m.total);
    out.push_back(g);
  }
  return out;  // the library stays loaded: NVML keeps state for the process lifetime
}

}  // namespace

std::optional<double> ParseCgroupCpuMax(const std::string& content) {
  std::istringstream in(content);
  std::string quota, period;
  if (!(in >> quota >> period) || quota == "max") return std::nullopt;
  try {
    double q = std::stod(quota), p = std::stod(period);
    if (q <= 0 || p <= 0) return std::nullopt;
    return q / p;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::map<std::string, double> NodeResources::AsResourceMap() const {
  std::map<std::string, double> r = custom;
  r["CPU"] = cpus;
  r["GPU"] = static_cast<double>(gpus.size());
  r["memory"] = static_cast<double>(memory_bytes);
  return r;
}

NodeResources FingerprintNode(const FingerprintOverrides& o) {
  NodeResources r;
  r.cpus = o.num_cpus ? *o.num_cpus : DetectCpus();
  r.memory_bytes = DetectMemory();
  if (o.num_gpus) {
    for (int i = 0; i < *o.num_gpus; ++i) {
      GpuInfo g;
      g.index = i;
      g.name = "declared-" + std::to_string(i);
      r.gpus.push_back(g);
    }
  } else {
    r.gpus = DetectGpus();
  }
  r.custom = o.custom;
  return r;
}

}  // namespace traintl
