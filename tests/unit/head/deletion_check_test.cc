// CheckDeletion (daemon/head/deletion_check.h): a delete that would take a trial dir or a
// checkpoint from a job that has not ended is refused, naming the job.
#include "daemon/head/deletion_check.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "daemon/state/commands.h"
#include "daemon/state/fsm.h"

using namespace traintl;
using nlohmann::json;

namespace {

JobRecord Active(const std::string& id, const std::string& trial_dir, const json& resume) {
  JobRecord j;
  j.id = id;
  j.name = "n-" + id;
  j.state = kJobPending;
  j.trial_dir = trial_dir;
  json def = {{"version", 1}, {"name", j.name}};
  if (!resume.is_null()) def["resume_from_checkpoint"] = resume;
  j.definition = def.dump();
  return j;
}

std::string Resolve(const std::string& ref) { return ref == "trainer" ? "t1" : ref; }

}  // namespace

TEST_CASE("PathUnder: the directory itself and what lies under it, by whole names") {
  CHECK(PathUnder("/data/exp", "/data/exp"));
  CHECK(PathUnder("/data/exp/t0/checkpoint_1", "/data/exp"));
  CHECK(PathUnder("/data/exp/t0", "/data/exp/"));
  CHECK_FALSE(PathUnder("/data/exp-2/t0", "/data/exp"));
  CHECK_FALSE(PathUnder("/data", "/data/exp"));
  CHECK_FALSE(PathUnder("", "/data/exp"));
  CHECK_FALSE(PathUnder("/data/exp", ""));
  CHECK(PathUnder("/anything", "/"));
}

TEST_CASE("CheckDeletion: trial dirs and checkpoints that jobs still need") {
  const std::set<std::string> deleting{"t1", "t2"};
  SECTION("a job writing under the removed dir") {
    Status st =
        CheckDeletion({Active("a", "/data/exp/other", nullptr)}, deleting, "/data/exp", Resolve);
    CHECK(st.code() == Status::Code::kFailedPrecondition);
    CHECK_THAT(st.message(), Catch::Contains("job a (n-a, PENDING) writes its trial dir "
                                             "/data/exp/other under /data/exp"));
    // Without removing files, its dir is not in the way.
    CHECK(CheckDeletion({Active("a", "/data/exp/other", nullptr)}, deleting, "", Resolve).ok());
  }
  SECTION("the jobs being deleted are not in their own way") {
    CHECK(CheckDeletion({Active("t1", "/data/exp/t0", nullptr)}, deleting, "/data/exp", Resolve)
              .ok());
  }
  SECTION("a job resuming from a checkpoint under the removed dir") {
    const auto jobs = {Active("b", "/data/b", "/data/exp/t0/checkpoint_000003")};
    Status st = CheckDeletion(jobs, deleting, "/data/exp", Resolve);
    CHECK(st.code() == Status::Code::kFailedPrecondition);
    CHECK_THAT(st.message(), Catch::Contains("resumes from the checkpoint "
                                             "/data/exp/t0/checkpoint_000003 under /data/exp"));
    CHECK(CheckDeletion(jobs, deleting, "", Resolve).ok());
    CHECK(CheckDeletion(jobs, deleting, "/data/exp-2", Resolve).ok());
  }
  SECTION("a job resuming from a deleted job's checkpoint, by id or by a name") {
    for (const char* ref : {"job:t2", "job:trainer"}) {
      INFO(ref);
      Status st = CheckDeletion({Active("c", "/data/c", ref)}, deleting, "", Resolve);
      CHECK(st.code() == Status::Code::kFailedPrecondition);
      CHECK_THAT(st.message(), Catch::Contains("job c (n-c, PENDING) resumes from " +
                                               std::string(ref) + "'s checkpoint"));
    }
    CHECK(CheckDeletion({Active("c", "/data/c", "job:other")}, deleting, "", Resolve).ok());
  }
  SECTION("a definition without a resume, or unreadable, is in nobody's way") {
    JobRecord bad = Active("d", "/data/d", nullptr);
    bad.definition = "{not json";
    CHECK(
        CheckDeletion({Active("e", "/data/e", nullptr), bad}, deleting, "/data/exp", Resolve).ok());
  }
}

TEST_CASE("CheckDeletion over a store: only jobs that have not ended count") {
  StateStore store;
  Fsm fsm(&store);
  auto submit = [&](const std::string& id, const std::string& trial_dir, const json& def) {
    JobRecord j;
    j.id = id;
    j.name = id;
    j.spec = json{{"name", id}}.dump();
    j.definition = def.dump();
    j.library_path = "/lib.so";
    j.trial_dir = trial_dir;
    j.submitted_at = 1000;
    REQUIRE(json::parse(fsm.Apply(commands::SubmitJob(j, "")))["ok"] == true);
  };
  submit("t1", "/data/exp/t0", {{"version", 1}});
  submit("waiting", "/data/w", {{"version", 1}, {"resume_from_checkpoint", "job:t1"}});
  Status st = CheckDeletion(store, {"t1"}, "");
  CHECK_THAT(st.message(), Catch::Contains("job waiting (waiting, PENDING) resumes from job:t1"));
  // Once it has ended, it needs nothing.
  REQUIRE(json::parse(fsm.Apply(commands::StopJob("waiting")))["ok"] == true);
  CHECK(CheckDeletion(store, {"t1"}, "/data/exp").ok());
}
