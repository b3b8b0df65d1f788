#include "daemon/scheduler/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace traintl {
namespace {

constexpr double kEpsilon = 1e-9;

void Take(ResourceMap& available, const ResourceMap& need) {
  for (const auto& [name, amount] : need)
    if (amount > 0) available[name] -= amount;
}

double GpuNeed(const ResourceMap& need) {
  auto it = need.find("GPU");
  return it == need.end() ? 0 : it->second;
}

// How many workers needing `gpu` each the devices can hold (device granularity matters:
// two 0.6 workers do not fit on one device even though 1.2 <= 2 * 0.6).
int GpuCapacity(std::vector<double> gpu_free, double gpu) {
  if (gpu <= 0) return 1 << 20;
  int n = 0;
  while (TakeGpus(gpu_free, gpu)) ++n;
  return n;
}

int HowMany(const ResourceMap& available, const ResourceMap& need) {
  int n = 1 << 20;
  for (const auto& [name, amount] : need) {
    if (amount <= 0) continue;
    auto it = available.find(name);
    double have = it == available.end() ? 0 : it->second;
    n = std::min(n, static_cast<int>(std::floor((have + kEpsilon) / amount)));
  }
  return std::max(n, 0);
}

std::string FormatAmount(const std::string& name, double v) {
  char buf[64];
  if (name == "memory") {
    std::snprintf(buf, sizeof buf, "%.1fGiB", v / (1024.0 * 1024 * 1024));
  } else {
    std::snprintf(buf, sizeof buf, "%g", v);
  }
  return buf;
}

// Returns a per-node worker count for the job, or an empty vector when it does not fit.
std::vector<int> Place(const std::vector<NodeSnapshot>& nodes, const PendingJob& job,
                       bool use_total) {
  const size_t n = nodes.size();
  std::vector<int> capacity(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (!nodes[i].alive) continue;
    capacity[i] = HowMany(use_total ? nodes[i].total : nodes[i].available, job.per_worker);
    const double gpu = GpuNeed(job.per_worker);
    if (gpu > 0 && !nodes[i].gpu_free.empty()) {
      std::vector<double> devices = nodes[i].gpu_free;
      if (use_total) devices.assign(devices.size(), 1.0);
      capacity[i] = std::min(capacity[i], GpuCapacity(devices, gpu));
    }
  }
  std::vector<int> count(n, 0);
  int left = job.num_workers;
  // Prefer the nodes with room for the most workers (ties: the snapshot's order).
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return capacity[a] > capacity[b]; });
  switch (job.strategy) {
    case PlacementStrategy::kStrictPack:
      if (n == 0 || capacity[order[0]] < left) return {};
      count[order[0]] = left;
      return count;
    case PlacementStrategy::kPack:
      for (size_t i : order) {
        int take = std::min(capacity[i], left);
        count[i] = take;
        left -= take;
        if (left == 0) return count;
      }
      return {};
    case PlacementStrategy::kStrictSpread:
      for (size_t i : order) {
        if (left == 0) break;
        if (capacity[i] >= 1) {
          count[i] = 1;
          --left;
        }
      }
      return left == 0 ? count : std::vector<int>{};
    case PlacementStrategy::kSpread: {
      bool progress = true;
      while (left > 0 && progress) {
        progress = false;
        for (size_t i : order) {
          if (left == 0) break;
          if (count[i] < capacity[i]) {
            ++count[i];
            --left;
            progress = true;
          }
        }
      }
      return left == 0 ? count : std::vector<int>{};
    }
  }
  return {};
}

std::string MissingReason(const std::vector<NodeSnapshot>& nodes, const PendingJob& job,
                          bool use_total) {
  ResourceMap sum;
  int alive = 0;
  for (const auto& node : nodes) {
    if (!node.alive) continue;
    ++alive;
    for (const auto& [k, v] : use_total ? node.total : node.available) sum[k] += v;
  }
  std::ostringstream os;
  os << "needs " << job.num_workers << " x {" << FormatResources(job.per_worker) << "} ("
     << PlacementStrategyName(job.strategy) << ")";
  std::vector<std::string> short_of;
  for (const auto& [name, amount] : job.per_worker) {
    if (amount <= 0) continue;
    double need = amount * job.num_workers;
    double have = sum.count(name) ? sum[name] : 0;
    if (have + kEpsilon < need)
      short_of.push_back(name + ": " + FormatAmount(name, need) + " needed, " +
                         FormatAmount(name, have) + (use_total ? " in the cluster" : " free"));
  }
  if (!short_of.empty()) {
    os << "; ";
    for (size_t i = 0; i < short_of.size(); ++i) os << (i ? "; " : "") << short_of[i];
  } else if (job.strategy == PlacementStrategy::kStrictSpread && alive < job.num_workers) {
    os << "; STRICT_SPREAD needs " << job.num_workers << " nodes, " << alive
       << (use_total ? " in the cluster" : " alive");
  } else {
    os << "; no placement of whole workers fits on the " << alive << " node(s)"
       << (use_total ? "" : " right now");
  }
  return os.str();
}

// Everything Place() and MissingReason() look at in a job besides its id.
std::string ShapeKey(const PendingJob& job) {
  std::string key = std::to_string(job.num_workers) + "-" + std::to_string(job.min_workers) + "/" +
                    std::to_string(static_cast<int>(job.strategy));
  char buf[32];
  for (const auto& [name, amount] : job.per_worker) {
    std::snprintf(buf, sizeof buf, "=%a;", amount);   // exact: hex float
    key += std::to_string(name.size()) + ":" + name;  // length-prefixed: any name is safe
    key += buf;
  }
  return key;
}

}  // namespace

std::optional<std::vector<int>> TakeGpus(std::vector<double>& gpu_free, double amount) {
  if (amount <= 0) return std::vector<int>{};
  if (amount < 1.0 - kEpsilon) {
    // Best fit: the device whose remaining fraction is smallest but still enough, so that
    // fractional workers pack and whole devices stay free for whole-GPU workers.
    int best = -1;
    for (size_t d = 0; d < gpu_free.size(); ++d) {
      if (gpu_free[d] + kEpsilon < amount) continue;
      if (best < 0 || gpu_free[d] < gpu_free[best]) best = static_cast<int>(d);
    }
    if (best < 0) return std::nullopt;
    gpu_free[best] -= amount;
    return std::vector<int>{best};
  }
  const int whole = static_cast<int>(std::llround(amount));
  std::vector<int> devices;
  for (size_t d = 0; d < gpu_free.size() && static_cast<int>(devices.size()) < whole; ++d)
    if (gpu_free[d] >= 1.0 - kEpsilon) devices.push_back(static_cast<int>(d));
  if (static_cast<int>(devices.size()) < whole) return std::nullopt;
  for (int d : devices) gpu_free[d] = 0;
  return devices;
}

std::string FormatResources(const ResourceMap& r) {
  std::ostringstream os;
  bool first = true;
  for (const auto& [name, amount] : r) {
    if (amount <= 0 && name != "CPU") continue;
    os << (first ? "" : ", ") << name << "=" << FormatAmount(name, amount);
    first = false;
  }
  return os.str();
}

ScheduleResult Schedule(std::vector<NodeSnapshot> nodes, const std::vector<PendingJob>& queue) {
  ScheduleResult result;
  // A queue of thousands of waiting jobs usually holds a few shapes. A shape that did not
  // fit does not fit again until a placement changes the nodes, and waits for the same
  // reason: remembering it keeps a long queue linear instead of a placement attempt and a
  // formatted reason per job.
  std::map<std::string, std::string> unplaceable;  // shape -> reason; cleared on placement
  for (const auto& job : queue) {
    const std::string shape = ShapeKey(job);
    if (auto known = unplaceable.find(shape); known != unplaceable.end()) {
      result.waiting[job.job_id] = known->second;
      continue;
    }
    std::vector<int> count = Place(nodes, job, /*use_total=*/false);
    // An elastic job: the most workers that fit, down to its minimum.
    for (int n = job.num_workers - 1; count.empty() && job.min_workers > 0 && n >= job.min_workers;
         --n) {
      PendingJob smaller = job;
      smaller.num_workers = n;
      count = Place(nodes, smaller, /*use_total=*/false);
    }
    if (count.empty()) {
      PendingJob least = job;
      if (job.min_workers > 0) least.num_workers = std::min(job.min_workers, job.num_workers);
      std::string reason =
          "waiting for resources: " + MissingReason(nodes, least, /*use_total=*/false);
      result.waiting[job.job_id] = reason;
      unplaceable.emplace(shape, std::move(reason));
      continue;
    }
    unplaceable.clear();
    Placement p;
    p.job_id = job.job_id;
    const double gpu = GpuNeed(job.per_worker);
    for (size_t i = 0; i < nodes.size(); ++i) {
      for (int k = 0; k < count[i]; ++k) {
        p.rank_nodes.push_back(nodes[i].node_id);
        Take(nodes[i].available, job.per_worker);
        std::vector<int> devices;
        if (gpu > 0 && !nodes[i].gpu_free.empty()) {
          auto taken = TakeGpus(nodes[i].gpu_free, gpu);
          if (taken) devices = *taken;  // Place() counted device capacity, so this holds
        }
        p.rank_gpus.push_back(devices);
      }
    }
    result.placements.push_back(std::move(p));
  }
  return result;
}

Status CheckFeasible(const std::vector<NodeSnapshot>& nodes, const PendingJob& job) {
  PendingJob least = job;
  if (job.min_workers > 0) least.num_workers = std::min(job.min_workers, job.num_workers);
  if (!Place(nodes, least, /*use_total=*/true).empty()) return Status::Ok();
  return Status::FailedPrecondition("infeasible: " + MissingReason(nodes, least, true));
}

}  // namespace traintl
