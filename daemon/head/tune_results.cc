#include "daemon/head/tune_results.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "common/json_depth.h"
#include "common/safe_fs.h"

namespace traintl {
namespace {

using nlohmann::json;

// Ray's own columns, written after the user's metrics.
const std::vector<std::string>& BookkeepingKeys() {
  static const auto* keys = new std::vector<std::string>{"training_iteration", "time_total_s",
                                                         "timestamp", "trial_id", "job_id"};
  return *keys;
}

std::string CsvField(const json& v) {
  std::string s;
  if (v.is_string()) {
    s = v.get<std::string>();
  } else if (v.is_null()) {
    return "";
  } else {
    s = v.dump();
  }
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string quoted = "\"";
  for (char c : s) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

}  // namespace

int64_t CountTrialResults(const StateStore& store, const TrialRecord& trial) {
  int64_t n = 0;
  for (const auto& job : JobsOf(trial)) n += store.CountMetrics(job);
  return n;
}

std::vector<json> TrialResults(const StateStore& store, const TrialRecord& trial, int64_t skip) {
  std::vector<json> out;
  int64_t index = 0;         // of the next result, across the trial's jobs
  double time_before_s = 0;  // running time of the trial's earlier jobs
  for (const auto& job_id : JobsOf(trial)) {
    auto job = store.GetJob(job_id, /*with_spec=*/false);
    if (!job) continue;
    const int64_t started = job->started_at.value_or(job->submitted_at);
    const int64_t here = std::max<int64_t>(0, skip - index);
    const int64_t count = here > 0 ? store.CountMetrics(job_id) : -1;
    if (here > 0 && here >= count) {
      index += count;  // all seen
    } else {
      index += here;
      for (const auto& m : store.ListMetrics(job_id, 0, here)) {
        json r = ParseJsonBounded(m.metrics);
        if (!r.is_object()) r = json::object();
        r["training_iteration"] = ++index;
        r["time_total_s"] = time_before_s + static_cast<double>(m.time - started) / 1000.0;
        r["timestamp"] = m.time / 1000;
        r["trial_id"] = trial.name;
        r["job_id"] = job_id;
        out.push_back(std::move(r));
      }
    }
    // A job stopped before it started (queued when its experiment was stopped) ran for
    // no time at all.
    if (job->ended_at && job->started_at)
      time_before_s += static_cast<double>(*job->ended_at - started) / 1000.0;
  }
  return out;
}

Status WriteTrialFiles(const std::string& dir, const std::vector<json>& results,
                       const json& config) {
  auto d = MakeJobDir(dir, 0755, OwnerPolicy::ForThisThread());
  if (!d.ok()) return d.status();
  std::set<std::string> user_keys;
  for (const auto& r : results)
    for (auto it = r.begin(); it != r.end(); ++it) user_keys.insert(it.key());
  std::vector<std::string> header;
  for (const auto& k : user_keys) {
    bool ours = false;
    for (const auto& b : BookkeepingKeys()) ours = ours || b == k;
    // Bounded: a trial whose every result had new keys made a file of results x keys.
    if (!ours && header.size() < kMaxProgressCsvColumns) header.push_back(k);
  }
  for (const auto& b : BookkeepingKeys()) header.push_back(b);

  std::ostringstream csv, lines;
  for (size_t i = 0; i < header.size(); ++i) csv << (i ? "," : "") << CsvField(header[i]);
  csv << "\n";
  for (const auto& r : results) {
    for (size_t i = 0; i < header.size(); ++i) {
      auto it = r.find(header[i]);
      csv << (i ? "," : "") << (it == r.end() ? std::string() : CsvField(*it));
    }
    csv << "\n";
    json line = r;
    line["config"] = config;
    lines << line.dump() << "\n";
  }
  if (Status st = WriteFileAtomicAt(*d, "progress.csv", csv.str(), 0644); !st.ok()) return st;
  if (Status st = WriteFileAtomicAt(*d, "result.json", lines.str(), 0644); !st.ok()) return st;
  return WriteFileAtomicAt(*d, "params.json", config.dump(2) + "\n", 0644);
}

}  // namespace traintl
