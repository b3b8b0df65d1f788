#include "daemon/head/job_queue.h"

#include <algorithm>
#include <utility>

#include "common/json_depth.h"
#include "proto/job_definition.h"

namespace traintl {

PendingJob ToPending(const std::string& job_id, const JobSpec& spec) {
  PendingJob p;
  p.job_id = job_id;
  p.num_workers = spec.num_workers;
  p.min_workers = spec.elastic() ? spec.min_workers : 0;
  p.per_worker = spec.resources_per_worker;
  p.strategy = spec.placement_strategy;
  return p;
}

namespace {

// The job's definition, or why this release cannot run it.
Result<JobSpec> ReadDefinition(const std::string& text) {
  if (text.empty()) {
    return Status::InvalidArgument(
        "it was stored by an older release with a spec this release refuses");
  }
  nlohmann::json doc = ParseJsonBounded(text);
  if (doc.is_discarded()) return Status::InvalidArgument("its stored definition is not JSON");
  return JobDefinitionFromJson(doc);
}

}  // namespace

JobQueue::Entry& JobQueue::EntryOf(const JobRecord& job,
                                   std::map<std::string, std::string>* unreadable) {
  auto [it, inserted] = entries_.try_emplace(job.id);
  Entry& e = it->second;
  if (!inserted) return e;
  e.seen = pass_;
  auto spec = ReadDefinition(load_(job.id));
  if (!spec.ok()) {
    // It can never start, so it fails with the reason rather than waiting forever.
    (*unreadable)[job.id] =
        "this version of traintl cannot run the job: " + spec.status().message();
    return e;
  }
  e.pending = ToPending(job.id, *spec);
  e.spec = std::make_shared<const JobSpec>(std::move(*spec));
  return e;
}

bool JobQueue::Held(const std::string& job_id, TimePoint now) {
  auto hold = holds_.find(job_id);
  if (hold == holds_.end()) return false;
  if (now < hold->second) return true;
  holds_.erase(hold);
  return false;
}

JobQueue::PassResult JobQueue::FullPass(const std::vector<JobRecord>& pending,
                                        const PassInput& in) {
  fresh_.clear();
  ++pass_;
  PassResult out;
  std::vector<std::pair<const JobRecord*, Entry*>> queue;
  for (const JobRecord& job : pending) {
    Entry& e = EntryOf(job, &out.unreadable);
    e.seen = pass_;
    // A job that ran before must not start while old workers of it may still run.
    if (job.attempt > 0 && (in.settling || (in.has_live_workers && in.has_live_workers(job.id)))) {
      continue;
    }
    if (Held(job.id, in.now)) continue;  // backing off
    if (e.spec != nullptr) queue.emplace_back(&job, &e);
  }
  // Jobs no longer PENDING (started, stopped) leave the queue.
  for (auto it = entries_.begin(); it != entries_.end();)
    it = it->second.seen == pass_ ? std::next(it) : entries_.erase(it);
  Place(queue, in, &out);
  return out;
}

JobQueue::PassResult JobQueue::FreshPass(std::vector<JobRecord> fresh, const PassInput& in) {
  // The store's queue order (ListActiveJobs): priority, then submit time.
  std::sort(fresh.begin(), fresh.end(), [](const JobRecord& a, const JobRecord& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    if (a.submitted_at != b.submitted_at) return a.submitted_at < b.submitted_at;
    return a.id < b.id;
  });
  PassResult out;
  std::vector<std::pair<const JobRecord*, Entry*>> queue;
  for (const JobRecord& job : fresh) {
    Entry& e = EntryOf(job, &out.unreadable);
    if (e.spec != nullptr) queue.emplace_back(&job, &e);
  }
  Place(queue, in, &out);
  return out;
}

void JobQueue::Place(const std::vector<std::pair<const JobRecord*, Entry*>>& jobs,
                     const PassInput& in, PassResult* out) {
  if (jobs.empty()) return;
  std::vector<PendingJob> queue;
  queue.reserve(jobs.size());
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < jobs.size(); ++i) {
    queue.push_back(jobs[i].second->pending);
    index.emplace(jobs[i].first->id, i);
  }
  ScheduleResult result = Schedule(in.nodes(), queue);
  for (auto& p : result.placements) {
    const auto& [job, e] = jobs[index.at(p.job_id)];
    out->starts.push_back(Start{*job, e->spec, std::move(p)});
  }
  // Only changed reasons: a queue of thousands of waiting jobs costs one small commit.
  for (auto& [id, reason] : result.waiting) {
    const auto& [job, e] = jobs[index.at(id)];
    if (job->pending_reason == reason || e->proposed_reason == reason) continue;
    e->proposed_reason = reason;
    out->reasons.emplace(id, std::move(reason));
  }
  for (const Start& s : out->starts) entries_.erase(s.job.id);
}

void JobQueue::Submitted(const std::string& job_id, std::shared_ptr<const JobSpec> spec) {
  fresh_.push_back(job_id);
  if (spec == nullptr) return;
  Entry& e = entries_[job_id];
  e.pending = ToPending(job_id, *spec);
  e.spec = std::move(spec);
  e.seen = pass_;
}

std::vector<std::string> JobQueue::TakeFresh() {
  std::vector<std::string> ids;
  ids.swap(fresh_);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());  // a repeated submission_id
  return ids;
}

void JobQueue::ReasonsNotCommitted(const std::map<std::string, std::string>& reasons) {
  for (const auto& [id, reason] : reasons) {
    auto it = entries_.find(id);
    if (it != entries_.end() && it->second.proposed_reason == reason)
      it->second.proposed_reason.clear();
  }
}

void JobQueue::Clear() {
  entries_.clear();
  fresh_.clear();
}

void JobQueue::DropHoldsBefore(TimePoint stale) {
  for (auto it = holds_.begin(); it != holds_.end();)
    it = it->second < stale ? holds_.erase(it) : std::next(it);
}

std::optional<JobQueue::TimePoint> JobQueue::NextHoldAfter(TimePoint now) const {
  std::optional<TimePoint> next;
  for (const auto& [id, t] : holds_)
    if (t > now && (!next || t < *next)) next = t;
  return next;
}

std::optional<JobQueue::TimePoint> JobQueue::EarliestHold() const {
  std::optional<TimePoint> earliest;
  for (const auto& [id, t] : holds_)
    if (!earliest || t < *earliest) earliest = t;
  return earliest;
}

}  // namespace traintl
