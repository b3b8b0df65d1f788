#include "daemon/node/event_outbox.h"

#include <algorithm>

namespace traintl {

using nlohmann::json;

void EventOutbox::Push(const json& event) {
  Queued q;
  // Replaced, not thrown: text from a worker that slipped past its source's cleaning.
  q.text = event.dump(-1, ' ', false, json::error_handler_t::replace);
  const std::string type = event.value("type", "");
  const std::string job = event.value("job_id", "");
  const int attempt = event.value("attempt", 0);
  const int rank = event.value("rank", 0);
  if (type == "progress") {
    q.progress_key = job + "/" + std::to_string(attempt) + "/" + std::to_string(rank);
    auto latest = latest_progress_.find(q.progress_key);
    // Its predecessor is replaced in place while it has not gone out.
    if (latest != latest_progress_.end() && latest->second > out_through_) {
      auto it = std::lower_bound(events_.begin(), events_.end(), latest->second,
                                 [](const Queued& e, uint64_t id) { return e.id < id; });
      if (it != events_.end() && it->id == latest->second) {
        it->text = std::move(q.text);
        return;
      }
    }
  } else {
    // Later progress of this rank (a replacement worker's, after this exit) must not take
    // the place of progress queued before this event.
    latest_progress_.erase(job + "/" + std::to_string(attempt) + "/" + std::to_string(rank));
    if (type == "report" && !event.value("held", false))
      q.ack = Ack{job, attempt, rank, event.value("seq", 0)};
  }
  q.what = type + " of job " + job + " attempt " + std::to_string(attempt) + " rank " +
           std::to_string(rank);
  q.exit = type == "exit";
  q.id = next_id_++;
  if (!q.progress_key.empty()) latest_progress_[q.progress_key] = q.id;
  events_.push_back(std::move(q));
}

std::optional<EventOutbox::Batch> EventOutbox::Next() {
  if (events_.empty()) return std::nullopt;
  Batch b;
  b.events_json = "[";
  size_t bytes = 0;
  for (const Queued& e : events_) {
    if (b.count > 0 &&
        (b.count >= batch_limit_ || bytes + e.text.size() > options_.max_batch_bytes))
      break;
    if (b.count > 0) b.events_json += ',';
    b.events_json += e.text;
    bytes += e.text.size();
    ++b.count;
    b.last_id = e.id;
    if (e.ack) b.acks.push_back(*e.ack);
  }
  b.events_json += ']';
  out_through_ = b.last_id;
  return b;
}

void EventOutbox::PopThrough(uint64_t last_id) {
  while (!events_.empty() && events_.front().id <= last_id) {
    const Queued& e = events_.front();
    if (!e.progress_key.empty()) {
      auto latest = latest_progress_.find(e.progress_key);
      if (latest != latest_progress_.end() && latest->second == e.id)
        latest_progress_.erase(latest);
    }
    events_.pop_front();
  }
}

void EventOutbox::Delivered(const Batch& batch) {
  PopThrough(batch.last_id);
  out_through_ = 0;
  // Back up by doubling, not at once: while a refused event is being looked for, a full
  // batch would only be halved again.
  batch_limit_ = std::min(options_.max_batch_events, 2 * batch_limit_);
}

std::vector<EventOutbox::Ack> EventOutbox::DeliveredFirst(const Batch& batch, size_t n) {
  std::vector<Ack> acks;
  uint64_t last = 0;
  for (size_t i = 0; i < n && i < events_.size() && events_[i].id <= batch.last_id; ++i) {
    last = events_[i].id;
    if (events_[i].ack) acks.push_back(*events_[i].ack);
  }
  if (last > 0) PopThrough(last);
  out_through_ = 0;
  return acks;
}

bool EventOutbox::Refused(const Batch& batch, std::string* dropped) {
  out_through_ = 0;
  if (batch.count > 1) {
    batch_limit_ = std::max<size_t>(1, batch.count / 2);
    return false;
  }
  if (dropped != nullptr && !events_.empty() && events_.front().id == batch.last_id)
    *dropped = events_.front().what;
  PopThrough(batch.last_id);
  batch_limit_ = options_.max_batch_events;
  return true;
}

void EventOutbox::Clear() {
  events_.erase(
      std::remove_if(events_.begin(), events_.end(), [](const Queued& e) { return !e.exit; }),
      events_.end());
  latest_progress_.clear();
  out_through_ = 0;
  batch_limit_ = options_.max_batch_events;
}

}  // namespace traintl
