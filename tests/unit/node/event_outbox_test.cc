#include <catch2/catch.hpp>
#include <string>

#include <nlohmann/json.hpp>

#include "daemon/node/event_outbox.h"

using nlohmann::json;
using traintl::EventOutbox;
using traintl::EventOutboxOptions;

namespace {

json Report(int rank, int seq, bool held = false) {
  json e = {{"type", "report"}, {"job_id", "j"}, {"attempt", 1},
            {"rank", rank},     {"seq", seq},    {"metrics", {{"loss", 0.5}}},
            {"checkpoint", ""}};
  if (held) e["held"] = true;
  return e;
}

json Progress(int rank, int step) {
  return {{"type", "progress"},
          {"job_id", "j"},
          {"attempt", 1},
          {"rank", rank},
          {"progress", {{"step", step}}}};
}

json Hello(int rank) {
  return {{"type", "hello"}, {"job_id", "j"}, {"attempt", 1}, {"rank", rank}};
}

std::vector<json> Events(const EventOutbox::Batch& b) { return json::parse(b.events_json); }

}  // namespace

TEST_CASE("batches go out in order, bounded in events and bytes, until delivered") {
  EventOutboxOptions o;
  o.max_batch_events = 3;
  o.max_batch_bytes = 1000;
  EventOutbox box(o);
  CHECK(!box.Next());
  for (int i = 0; i < 5; ++i) box.Push(Report(0, i));
  auto b = box.Next();
  REQUIRE(b);
  CHECK(b->count == 3);
  CHECK(Events(*b)[2]["seq"] == 2);
  CHECK(box.Next()->last_id == b->last_id);  // the same again until delivered
  REQUIRE(b->acks.size() == 3);
  CHECK(b->acks[1].seq == 1);
  box.Delivered(*b);
  b = box.Next();
  REQUIRE(b);
  CHECK(b->count == 2);
  CHECK(Events(*b)[0]["seq"] == 3);
  box.Delivered(*b);
  CHECK(box.empty());

  // Bytes: one event over the bound still goes, alone.
  json big = Report(0, 9);
  big["metrics"]["blob"] = std::string(5000, 'x');
  box.Push(Report(0, 8));
  box.Push(big);
  b = box.Next();
  CHECK(b->count == 1);
  box.Delivered(*b);
  b = box.Next();
  CHECK(b->count == 1);
  CHECK(Events(*b)[0]["seq"] == 9);
}

TEST_CASE("a refused event is found by halving and dropped, the others go through") {
  EventOutbox box;
  for (int i = 0; i < 40; ++i) box.Push(i == 23 ? Report(1, i) : Hello(i));
  int dropped = 0, delivered = 0, rounds = 0;
  std::vector<int> ranks;
  while (auto b = box.Next()) {
    REQUIRE(++rounds < 100);
    bool bad = false;
    for (const auto& e : Events(*b)) bad = bad || e["type"] == "report";
    if (bad) {
      std::string what;
      if (box.Refused(*b, &what)) {
        CHECK(b->count == 1);
        CHECK(what == "report of job j attempt 1 rank 1");
        ++dropped;
      }
      continue;
    }
    for (const auto& e : Events(*b)) ranks.push_back(e["rank"]);
    delivered += static_cast<int>(b->count);
    box.Delivered(*b);
  }
  CHECK(dropped == 1);
  CHECK(delivered == 39);
  CHECK(rounds <= 2 + 2 * 7);  // log2(64) halvings, not one round per event
  for (size_t i = 1; i < ranks.size(); ++i) CHECK(ranks[i - 1] < ranks[i]);  // in order
}

TEST_CASE("held reports are not acked by the node, progress keeps one per rank") {
  EventOutbox box;
  box.Push(Report(0, 0, /*held=*/true));
  for (int step = 0; step < 100000; ++step) box.Push(Progress(0, step));
  box.Push(Progress(1, 7));
  CHECK(box.size() == 3);
  auto b = box.Next();
  REQUIRE(b);
  CHECK(b->acks.empty());
  auto events = Events(*b);
  CHECK(events[1]["progress"]["step"] == 99999);  // the latest, in its predecessor's place
  CHECK(events[2]["rank"] == 1);

  // A progress that went out (in a batch not yet delivered) is not rewritten: the next one
  // queues behind it.
  box.Push(Progress(0, 100000));
  CHECK(box.size() == 4);
  box.Delivered(*b);
  b = box.Next();
  REQUIRE(b);
  CHECK(b->count == 1);
  CHECK(Events(*b)[0]["progress"]["step"] == 100000);
  box.Delivered(*b);
  CHECK(box.empty());

  // Another event of the rank (its worker's exit) ends the replacing: later progress (a
  // replacement worker's) queues behind it.
  box.Push(Progress(0, 1));
  box.Push(json{{"type", "exit"}, {"job_id", "j"}, {"attempt", 1}, {"rank", 0}});
  box.Push(Progress(0, 2));
  CHECK(box.size() == 3);
  b = box.Next();
  REQUIRE(b);
  auto order = Events(*b);
  CHECK(order[0]["progress"]["step"] == 1);
  CHECK(order[1]["type"] == "exit");
  CHECK(order[2]["progress"]["step"] == 2);
  box.Delivered(*b);

  // Fenced: everything but the workers' exits goes (a head that answers again before it
  // counts the node lost would wait for those ranks for ever), and progress starts afresh.
  box.Push(Progress(0, 1));
  box.Push(Hello(0));
  box.Push(json{{"type", "exit"}, {"job_id", "j"}, {"attempt", 1}, {"rank", 0}});
  box.Push(Report(0, 9));
  box.Clear();
  REQUIRE(box.size() == 1);
  CHECK(Events(*box.Next())[0]["type"] == "exit");
  box.Push(Progress(0, 2));
  box.Push(Progress(0, 3));
  CHECK(box.size() == 2);
  box.Clear();
  CHECK(box.size() == 1);
  box.Delivered(*box.Next());
  CHECK(box.empty());
}

TEST_CASE("a batch the head took in part leaves what it took and sends the rest again") {
  EventOutboxOptions o;
  o.max_batch_events = 4;
  EventOutbox box(o);
  box.Push(Hello(0));
  box.Push(Report(0, 1));
  box.Push(Report(0, 2, /*held=*/true));
  box.Push(Report(1, 1));
  box.Push(Progress(1, 7));
  auto b = box.Next();
  REQUIRE(b);
  REQUIRE(b->count == 4);
  // The head applied the hello, the report and the held report, then could not go on.
  auto acks = box.DeliveredFirst(*b, 3);
  REQUIRE(acks.size() == 1);  // a held report is acked later, by its commit
  CHECK(acks[0].rank == 0);
  CHECK(acks[0].seq == 1);
  CHECK(box.size() == 2);
  // Progress queued after the partial delivery replaces the one the head did not take.
  box.Push(Progress(1, 8));
  CHECK(box.size() == 2);
  b = box.Next();
  REQUIRE(b);
  REQUIRE(b->count == 2);
  CHECK(Events(*b)[0]["type"] == "report");
  CHECK(Events(*b)[0]["rank"] == 1);
  CHECK(Events(*b)[1]["progress"]["step"] == 8);
  CHECK(box.DeliveredFirst(*box.Next(), 0).empty());
  CHECK(box.size() == 2);
  box.Delivered(*box.Next());
  CHECK(box.empty());
}
