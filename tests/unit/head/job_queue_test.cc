// JobQueue (daemon/head/job_queue.h): the scheduling pass over PENDING job records and
// node snapshots; no store, no Raft, no sockets, no sleeps.
#include "daemon/head/job_queue.h"

#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "proto/job_definition.h"

using namespace traintl;

namespace {

using Clock = std::chrono::steady_clock;

JobSpec Spec(int workers, double cpus) {
  JobSpec s;
  s.name = "j";
  s.library = "/lib.so";
  s.num_workers = workers;
  s.resources_per_worker = {{"CPU", cpus}, {"GPU", 0}};
  return s;
}

JobRecord Pending(const std::string& id, int attempt = 0, int priority = 0, int64_t at = 0) {
  JobRecord j;
  j.id = id;
  j.state = kJobPending;
  j.attempt = attempt;
  j.priority = priority;
  j.submitted_at = at;
  return j;
}

NodeSnapshot Node(const std::string& id, double cpus) {
  NodeSnapshot n;
  n.node_id = id;
  n.host = "10.0.0.1";
  n.total = {{"CPU", cpus}, {"GPU", 0}};
  n.available = n.total;
  return n;
}

// The store as the queue sees it: stored definitions by job id, with a count of reads.
struct Definitions {
  std::map<std::string, std::string> text;
  std::map<std::string, int> reads;
  void Put(const std::string& id, const JobSpec& spec) {
    text[id] = JobDefinitionToJson(spec).dump();
  }
  JobQueue::DefinitionLoader Loader() {
    return [this](const std::string& id) {
      ++reads[id];
      auto it = text.find(id);
      return it == text.end() ? std::string() : it->second;
    };
  }
};

JobQueue::PassInput Input(std::vector<NodeSnapshot> nodes, Clock::time_point now = {}) {
  JobQueue::PassInput in;
  in.nodes = [nodes] { return nodes; };
  in.now = now;
  return in;
}

}  // namespace

TEST_CASE("a full pass starts what fits and gives the rest a reason, proposed once") {
  Definitions defs;
  defs.Put("small", Spec(2, 1));
  defs.Put("big", Spec(1, 64));
  JobQueue q(defs.Loader());
  const std::vector<JobRecord> pending = {Pending("big", 0, 1), Pending("small")};

  auto pass = q.FullPass(pending, Input({Node("n1", 4)}));
  REQUIRE(pass.starts.size() == 1);
  CHECK(pass.starts[0].job.id == "small");
  CHECK(pass.starts[0].placement.rank_nodes == std::vector<std::string>{"n1", "n1"});
  CHECK(pass.starts[0].spec->num_workers == 2);
  REQUIRE(pass.reasons.count("big") == 1);
  CHECK(pass.reasons["big"].find("CPU") != std::string::npos);
  CHECK(pass.unreadable.empty());

  // The same reason is not proposed again; the definition is not read again.
  auto again = q.FullPass({Pending("big", 0, 1)}, Input({Node("n1", 4)}));
  CHECK(again.starts.empty());
  CHECK(again.reasons.empty());
  CHECK(defs.reads["big"] == 1);

  // A proposal that did not commit is proposed by the next pass.
  q.ReasonsNotCommitted(pass.reasons);
  CHECK(q.FullPass({Pending("big", 0, 1)}, Input({Node("n1", 4)})).reasons.count("big") == 1);
}

TEST_CASE("nodes are looked at only when some job may start") {
  JobQueue q(Definitions().Loader());
  JobQueue::PassInput in;
  int calls = 0;
  in.nodes = [&] {
    ++calls;
    return std::vector<NodeSnapshot>{};
  };
  q.FullPass({}, in);
  CHECK(calls == 0);
}

TEST_CASE("a job whose definition cannot be read is reported once, and again when forgotten") {
  Definitions defs;
  defs.text["old"] = "";                      // a refused spec at migration
  defs.text["newer"] = R"({"version": 99})";  // a newer release's record
  defs.text["broken"] = R"({"version": 1, "name": 3})";
  JobQueue q(defs.Loader());
  const std::vector<JobRecord> pending = {Pending("old"), Pending("newer"), Pending("broken")};

  auto pass = q.FullPass(pending, Input({Node("n1", 4)}));
  CHECK(pass.starts.empty());
  REQUIRE(pass.unreadable.size() == 3);
  CHECK(pass.unreadable["old"].find("older release") != std::string::npos);
  CHECK(pass.unreadable["newer"].find("version 99") != std::string::npos);
  CHECK(pass.unreadable["broken"].find("name: wrong type") != std::string::npos);

  CHECK(q.FullPass(pending, Input({Node("n1", 4)})).unreadable.empty());
  q.Forget("old");  // failing it did not commit
  auto retry = q.FullPass(pending, Input({Node("n1", 4)}));
  CHECK(retry.unreadable.size() == 1);
  CHECK(retry.unreadable.count("old") == 1);
}

TEST_CASE("a job that ran before waits out the settle period and its old workers") {
  Definitions defs;
  defs.Put("ran", Spec(1, 1));
  JobQueue q(defs.Loader());
  auto in = Input({Node("n1", 4)});
  in.settling = true;
  CHECK(q.FullPass({Pending("ran", 1)}, in).starts.empty());
  in.settling = false;
  bool live = true;
  in.has_live_workers = [&](const std::string& id) { return id == "ran" && live; };
  CHECK(q.FullPass({Pending("ran", 1)}, in).starts.empty());
  live = false;
  CHECK(q.FullPass({Pending("ran", 1)}, in).starts.size() == 1);

  // A job that never ran does not wait for the settle period.
  defs.Put("new", Spec(1, 1));
  in.settling = true;
  CHECK(q.FullPass({Pending("new")}, in).starts.size() == 1);
}

TEST_CASE("a held restart waits until its time, then starts") {
  Definitions defs;
  defs.Put("j", Spec(1, 1));
  JobQueue q(defs.Loader());
  const Clock::time_point t0{std::chrono::seconds(100)};
  q.HoldRestart("j", t0 + std::chrono::seconds(5));
  CHECK(q.EarliestHold() == t0 + std::chrono::seconds(5));
  CHECK(q.NextHoldAfter(t0) == t0 + std::chrono::seconds(5));
  CHECK_FALSE(q.NextHoldAfter(t0 + std::chrono::seconds(6)));

  CHECK(q.FullPass({Pending("j", 1)}, Input({Node("n1", 4)}, t0)).starts.empty());
  auto later = q.FullPass({Pending("j", 1)}, Input({Node("n1", 4)}, t0 + std::chrono::seconds(5)));
  CHECK(later.starts.size() == 1);
  CHECK_FALSE(q.EarliestHold());  // used up

  q.HoldRestart("gone", t0);
  q.DropHoldsBefore(t0 + std::chrono::seconds(1));
  CHECK_FALSE(q.EarliestHold());
}

TEST_CASE("a fresh pass places new jobs in queue order with the specs the head submitted") {
  Definitions defs;  // empty: the submitted specs must be used, not the store
  JobQueue q(defs.Loader());
  q.Submitted("late", std::make_shared<const JobSpec>(Spec(1, 2)));
  q.Submitted("urgent", std::make_shared<const JobSpec>(Spec(1, 2)));
  q.Submitted("urgent", nullptr);  // a repeated submission_id: counted once
  REQUIRE(q.has_fresh());
  auto ids = q.TakeFresh();
  CHECK(ids == std::vector<std::string>{"late", "urgent"});
  CHECK_FALSE(q.has_fresh());

  // 3 CPUs: only the first in queue order (priority, then submit time) fits.
  auto pass =
      q.FreshPass({Pending("late", 0, 0, 1), Pending("urgent", 0, 9, 2)}, Input({Node("n1", 3)}));
  REQUIRE(pass.starts.size() == 1);
  CHECK(pass.starts[0].job.id == "urgent");
  CHECK(pass.reasons.count("late") == 1);
  CHECK(defs.reads.empty());
}

TEST_CASE("entries of jobs that left the queue are dropped by a full pass") {
  Definitions defs;
  defs.Put("a", Spec(1, 64));
  JobQueue q(defs.Loader());
  q.FullPass({Pending("a")}, Input({Node("n1", 4)}));
  q.FullPass({}, Input({Node("n1", 4)}));  // stopped meanwhile
  q.FullPass({Pending("a")}, Input({Node("n1", 4)}));
  CHECK(defs.reads["a"] == 2);  // read again: its entry was gone
}
