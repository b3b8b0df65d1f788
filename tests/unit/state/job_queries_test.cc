// What users call a job (id, id prefix, name) and the job list's pages and filters.

#include <catch2/catch.hpp>

#include "daemon/state/state_store.h"

using traintl::JobRecord;
using traintl::StateStore;
using traintl::Status;

namespace {

void Insert(StateStore& store, const std::string& id, const std::string& name, int64_t at,
            const std::string& state = "SUCCEEDED") {
  JobRecord j;
  j.id = id;
  j.name = name;
  j.spec = "{}";
  j.state = state;
  j.submitted_at = at;
  store.Mutate([&](StateStore::Tx& tx) {
    tx.InsertJob(j, "");
    return std::string();
  });
}

void InsertFinished(StateStore& store, const std::string& id, int64_t ended) {
  JobRecord j;
  j.id = id;
  j.name = "n";
  j.spec = "{}";
  j.state = "SUCCEEDED";
  j.submitted_at = ended - 10;
  j.ended_at = ended;
  store.Mutate([&](StateStore::Tx& tx) {
    tx.InsertJob(j, "");
    return std::string();
  });
}

std::vector<std::string> Ids(const StateStore::JobPage& page) {
  std::vector<std::string> out;
  for (const auto& j : page.jobs) out.push_back(j.id);
  return out;
}

}  // namespace

TEST_CASE("a job is found by id, unique id prefix, or name (its newest job)") {
  StateStore store;
  Insert(store, "0a1b00000000", "digits", 1000);
  Insert(store, "0a2c00000000", "digits", 2000);
  Insert(store, "ff0000000000", "cafe", 3000);
  Insert(store, "cafe00000000", "other", 4000);
  CHECK(*store.ResolveJobId("0a1b00000000") == "0a1b00000000");
  CHECK(*store.ResolveJobId("0a1") == "0a1b00000000");
  CHECK(*store.ResolveJobId("digits") == "0a2c00000000");  // the newer of the two
  std::vector<std::string> candidates;
  auto ambiguous = store.ResolveJobId("0a", &candidates);
  CHECK(ambiguous.status().code() == Status::Code::kFailedPrecondition);
  CHECK(candidates == std::vector<std::string>{"0a1b00000000", "0a2c00000000"});
  // "cafe" is a name and another job's id prefix: both are offered.
  candidates.clear();
  auto both = store.ResolveJobId("cafe", &candidates);
  CHECK(both.status().code() == Status::Code::kFailedPrecondition);
  CHECK_THAT(both.status().message(), Catch::Contains("name of job ff0000000000"));
  CHECK(candidates == std::vector<std::string>{"cafe00000000", "ff0000000000"});
  // A whole id wins over a name.
  Insert(store, "abcdef012345", "abcdef012345x", 5000);
  Insert(store, "123456789abc", "abcdef012345", 6000);
  CHECK(*store.ResolveJobId("abcdef012345") == "abcdef012345");
  auto missing = store.ResolveJobId("nope");
  CHECK(missing.status().code() == Status::Code::kNotFound);
  CHECK_THAT(missing.status().message(), Catch::Contains("id, id prefix or name nope"));
}

TEST_CASE("the job list pages newest first and filters by state and name") {
  StateStore store;
  // Two jobs share a submit time: the cursor orders them by id.
  Insert(store, "000000000001", "a", 1000, "FAILED");
  Insert(store, "000000000002", "b", 2000);
  Insert(store, "000000000003", "a", 2000, "FAILED");
  Insert(store, "000000000004", "a", 3000, "RUNNING");
  Insert(store, "000000000005", "b", 4000, "FAILED");

  StateStore::JobQuery q;
  q.limit = 2;
  auto p1 = store.ListJobs(q);
  CHECK(Ids(p1) == std::vector<std::string>{"000000000005", "000000000004"});
  CHECK(p1.more);
  q.before = std::make_pair(p1.jobs.back().submitted_at, p1.jobs.back().id);
  auto p2 = store.ListJobs(q);
  CHECK(Ids(p2) == std::vector<std::string>{"000000000003", "000000000002"});
  CHECK(p2.more);
  q.before = std::make_pair(p2.jobs.back().submitted_at, p2.jobs.back().id);
  auto p3 = store.ListJobs(q);
  CHECK(Ids(p3) == std::vector<std::string>{"000000000001"});
  CHECK_FALSE(p3.more);

  StateStore::JobQuery failed_a;
  failed_a.state = "FAILED";
  failed_a.name = "a";
  CHECK(Ids(store.ListJobs(failed_a)) == std::vector<std::string>{"000000000003", "000000000001"});
  StateStore::JobQuery b;
  b.name = "b";
  b.limit = 1;
  auto pb = store.ListJobs(b);
  CHECK(Ids(pb) == std::vector<std::string>{"000000000005"});
  CHECK(pb.more);
  StateStore::JobQuery none;
  none.state = "PENDING";
  CHECK(store.ListJobs(none).jobs.empty());
  CHECK(store.ListJobs(size_t{0}).size() == 5);
}

TEST_CASE("retention picks finished jobs past the count or the age, oldest first") {
  StateStore store;
  InsertFinished(store, "000000000001", 1000);
  InsertFinished(store, "000000000002", 2000);
  InsertFinished(store, "000000000003", 3000);
  InsertFinished(store, "000000000004", 4000);
  Insert(store, "000000000005", "n", 100, "RUNNING");  // never, however old
  using V = std::vector<std::string>;
  CHECK(store.ExpiredJobs(0, 0, 100).empty());
  CHECK(store.ExpiredJobs(2, 0, 100) == V{"000000000001", "000000000002"});
  CHECK(store.ExpiredJobs(0, 2500, 100) == V{"000000000001", "000000000002"});
  CHECK(store.ExpiredJobs(3, 2500, 100) == V{"000000000001", "000000000002"});
  CHECK(store.ExpiredJobs(1, 0, 2) == V{"000000000001", "000000000002"});
  CHECK(store.ExpiredJobs(10, 0, 100).empty());
}

TEST_CASE("retention leaves the trial jobs of a running experiment alone") {
  StateStore store;
  InsertFinished(store, "000000000001", 1000);  // a trial's first job (PBT restarted it)
  InsertFinished(store, "000000000002", 2000);
  InsertFinished(store, "000000000003", 3000);  // the same trial's current job
  InsertFinished(store, "000000000004", 4000);
  auto experiment = [&](const std::string& state) {
    traintl::ExperimentRecord e;
    e.id = "exp1";
    e.name = "e";
    e.spec = "{}";
    e.state = state;
    traintl::TrialRecord t;
    t.experiment_id = "exp1";
    t.name = "e_00000";
    t.config = "{}";
    t.job_id = "000000000003";
    t.jobs = R"(["000000000001", "000000000003"])";
    store.Mutate([&](StateStore::Tx& tx) {
      if (tx.GetExperiment("exp1")) {
        tx.UpdateExperiment(e);
      } else {
        tx.InsertExperiment(e, "");
      }
      tx.UpsertTrial(t);
      return std::string();
    });
  };
  using V = std::vector<std::string>;
  experiment("RUNNING");
  CHECK(store.ExpiredJobs(1, 0, 100) == V{"000000000002"});
  CHECK(store.ExpiredJobs(0, 5000, 100) == V{"000000000002", "000000000004"});
  experiment("SUCCEEDED");
  CHECK(store.ExpiredJobs(1, 0, 100) == V{"000000000001", "000000000002", "000000000003"});
}
