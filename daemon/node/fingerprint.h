// Fingerprint: what this node offers to the scheduler - CPUs (the affinity mask and the
// cgroup v2 CPU quota, whichever is smaller), memory (physical, capped by the cgroup
// limit), NVIDIA GPUs through NVML loaded at run time when present - with operator
// overrides.
//
// Thread-safety: free functions; NVML is loaded once behind a function-local static.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace traintl {

struct GpuInfo {
  int index = 0;
  std::string name;
  std::string uuid;
  int64_t memory_bytes = 0;
};

struct NodeResources {
  double cpus = 0;
  int64_t memory_bytes = 0;
  std::vector<GpuInfo> gpus;
  std::map<std::string, double> custom;
  // The scheduler's view: {"CPU": cpus, "GPU": n, "memory": bytes, custom...}.
  std::map<std::string, double> AsResourceMap() const;
};

struct FingerprintOverrides {
  std::optional<double> num_cpus;        // --num-cpus; default: detected
  std::optional<int> num_gpus;           // --num-gpus; default: detected (declared GPUs get
                                         // synthetic names "declared-<i>")
  std::map<std::string, double> custom;  // --resources '{"name": n}'; default none
};

NodeResources FingerprintNode(const FingerprintOverrides& overrides);

// Exposed for tests: the CPU limit a cgroup v2 "cpu.max" line allows ("max 100000" = none).
std::optional<double> ParseCgroupCpuMax(const std::string& content);

}  // namespace traintl
