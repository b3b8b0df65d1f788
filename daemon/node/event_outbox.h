// EventOutbox: the worker events a node that is not the head has yet to deliver to it
// (POST /v1/internal/events, HeadLink's sender), in order, as batches.
//
// What a worker writes is untrusted, so one event must never hold up the others:
// - a batch is bounded in events and in bytes (the head's body limit is 64 MiB);
// - when the head refuses a batch as malformed or too large (400, 413), the next one is
//   half as long, down to a single event, which is then dropped: every other event of
//   the node still goes through (a delivered batch doubles the next one's length again);
// - when the head took only the first events of a batch (503 with "applied": it could not
//   read its state for the next one), those leave the queue and the rest goes out again;
// - a rank's progress (a snapshot, sent often) replaces its queued predecessor, so a
//   flood of progress lines keeps one per rank instead of growing the queue (never across
//   another event of that rank: a replacement worker's progress stays after the old
//   worker's exit).
// Each event is serialized once, when it is queued.
//
// Thread-safety: none; HeadLink guards it with its mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace traintl {

struct EventOutboxOptions {
  // Most events in one batch. Default 64.
  size_t max_batch_events = 64;
  // Most bytes of events in one batch; a single larger event goes alone. Default 8 MiB.
  size_t max_batch_bytes = 8u << 20;
};

class EventOutbox {
 public:
  // A report the rank waits for: acked to it once the head took it.
  struct Ack {
    std::string job_id;
    int attempt = 0;
    int rank = 0;
    int seq = 0;
  };
  // The front of the queue, as it goes out; it stays queued until Delivered or Refused.
  struct Batch {
    std::string events_json;  // a JSON array of the events
    size_t count = 0;
    uint64_t last_id = 0;
    std::vector<Ack> acks;  // of its reports that are not held
  };

  explicit EventOutbox(EventOutboxOptions options = {})
      : options_(options), batch_limit_(options.max_batch_events) {}

  // Queues a worker event (an object with "type", "job_id", "attempt", "rank", ...).
  void Push(const nlohmann::json& event);
  // The batch at the front (the same again until Delivered or Refused); none when empty.
  std::optional<Batch> Next();
  // The head took `batch`: it leaves the queue.
  void Delivered(const Batch& batch);
  // The head took the first `n` events of `batch` (n < batch.count) and not the rest
  // (503 with "applied"): they leave the queue, the rest goes out again. Returns the acks
  // of the reports among them.
  std::vector<Ack> DeliveredFirst(const Batch& batch, size_t n);
  // The head refused `batch` (400 or 413): the next batch is half as long, or, for a batch
  // of one event, that event is dropped (returns true; *dropped, when given, says which:
  // "report of job J attempt A rank R").
  bool Refused(const Batch& batch, std::string* dropped = nullptr);
  // Drops every event but the workers' exits (the node was fenced: the head moved on, and
  // ignores events of attempts it ended). An exit is kept: without it a head that answers
  // again before it counts the node lost would wait for that rank for ever.
  void Clear();

  bool empty() const { return events_.empty(); }
  size_t size() const { return events_.size(); }

 private:
  struct Queued {
    uint64_t id = 0;
    std::string text;
    std::string progress_key;  // "job/attempt/rank" for progress, else ""
    std::string what;          // "<type> of job J attempt A rank R", for a drop's warning
    bool exit = false;         // a worker's exit: Clear keeps it
    std::optional<Ack> ack;
  };
  void PopThrough(uint64_t last_id);

  const EventOutboxOptions options_;
  std::deque<Queued> events_;                        // ascending ids
  std::map<std::string, uint64_t> latest_progress_;  // progress_key -> its queued id
  uint64_t next_id_ = 1;
  uint64_t out_through_ = 0;  // ids up to this went out in the batch Next gave last
  size_t batch_limit_;        // most events in the next batch
};

}  // namespace traintl
