// A database written by an older release still opens: the images of schema-1 and schema-2
// databases (tests/unit/state/testdata/schema_v*.sql, their DDL verbatim) are restored,
// migrated, and the FSM goes on applying commands to them as it would to a new one.
#include <sqlite3.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "daemon/state/commands.h"
#include "daemon/state/fsm.h"
#include "proto/job_definition.h"

using namespace traintl;
using nlohmann::json;

namespace {

// The serialized image of a database built from `sql`, as a Raft snapshot carries it.
std::string ImageOf(const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(":memory:", &db) == SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  INFO((err ? err : ""));
  REQUIRE(rc == SQLITE_OK);
  sqlite3_int64 size = 0;
  unsigned char* p = sqlite3_serialize(db, "main", &size, 0);
  REQUIRE(p != nullptr);
  std::string image(reinterpret_cast<const char*>(p), static_cast<size_t>(size));
  sqlite3_free(p);
  sqlite3_close(db);
  return image;
}

std::string Fixture(const char* name) {
  std::ifstream in(std::string(TRAINTL_STATE_TESTDATA) + "/" + name);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("a schema-1 snapshot is migrated: policies from the stored specs, rows kept") {
  StateStore store;
  Fsm fsm(&store);
  REQUIRE(fsm.Restore(ImageOf(Fixture("schema_v1.sql"))).ok());
  CHECK(store.GetMeta("schema_version") == "5");

  auto running = store.GetJob("aa01");
  REQUIRE(running);
  CHECK(running->state == kJobRunning);
  CHECK(running->metrics == R"({"loss":0.5})");
  cmd::JobPolicy want{3, 2, "loss", false};
  CHECK(running->policy == want);
  CHECK(store.GetJob("bb02")->policy == cmd::JobPolicy{});
  CHECK(store.GetJob("bb02")->priority == 5);
  // These specs lack an entrypoint, which this release requires: no definition, so the
  // head fails bb02 (PENDING) with the reason instead of running it.
  CHECK(store.GetJob("bb02")->definition.empty());
  auto attempt = store.GetAttempt("aa01", 1);
  REQUIRE(attempt);
  CHECK(attempt->head_node.empty());
  CHECK(store.ListCheckpoints("aa01").size() == 1);

  // The FSM works on the migrated rows: max_failures 3 (from the old spec) restarts it,
  // a known rid still answers with its stored result, a new job gets the new columns.
  cmd::AttemptOutcome failed;
  failed.state = kJobFailed;
  failed.reason = "rank 0 exited with code 1";
  auto r = json::parse(fsm.Apply(commands::EndAttempt("aa01", 1, failed)));
  CHECK(r["job_state"] == kJobPending);
  cmd::Envelope replay{"0123456789abcdef01234567", 1, cmd::StopJob{"bb02", ""}};
  CHECK(fsm.Apply(cmd::Encode(replay)) == R"({"ok":true})");
  CHECK(store.GetJob("bb02")->state == kJobPending);  // not applied again
  CHECK(attempt->rank_nodes.empty());                 // schema 4: no placement before it
  REQUIRE(json::parse(fsm.Apply(commands::StartAttempt(
              "aa01", 2, "", "n2", "r2", {"n2", "n3"},
              {{"n2", "127.0.0.1:1"}, {"n3", "127.0.0.1:2"}})))["ok"] == true);
  CHECK(store.GetAttempt("aa01", 2)->head_node == "n2");

  // A migrated store snapshots and restores like a new one (no second migration).
  auto image = fsm.Snapshot();
  REQUIRE(image.ok());
  StateStore again;
  Fsm fsm2(&again);
  REQUIRE(fsm2.Restore(*image).ok());
  CHECK(again.GetJob("aa01")->policy == want);
  CHECK(again.GetAttempt("aa01", 2)->head_run == "r2");
  // The placement survives a snapshot: which node ran each rank, and its address.
  CHECK(again.GetAttempt("aa01", 2)->rank_nodes == std::vector<std::string>{"n2", "n3"});
  CHECK(again.GetAttempt("aa01", 2)->node_addresses.at("n3") == "127.0.0.1:2");
}

TEST_CASE("a schema-2 snapshot is migrated: definitions made from the stored specs") {
  StateStore store;
  Fsm fsm(&store);
  REQUIRE(fsm.Restore(ImageOf(Fixture("schema_v2.sql"))).ok());
  CHECK(store.GetMeta("schema_version") == "5");

  auto mnist = store.GetJob("aa01");
  REQUIRE(mnist);
  auto def = JobDefinitionFromJson(json::parse(mnist->definition));
  REQUIRE(def.ok());
  CHECK(def->num_workers == 2);
  CHECK(def->placement_strategy == PlacementStrategy::kSpread);
  CHECK(def->resources_per_worker.at("CPU") == 2);
  CHECK(def->function == "train");
  CHECK(def->max_failures == 3);
  CHECK(def->datasets.at("train").uri == "file:///d/train.csv");
  CHECK(mnist->policy == cmd::JobPolicy{3, 2, "loss", false});
  CHECK(store.GetAttempt("aa01", 1)->head_run == "run1");

  auto plain = JobDefinitionFromJson(json::parse(store.GetJob("bb02")->definition));
  REQUIRE(plain.ok());
  CHECK(plain->priority == 5);
  CHECK(plain->num_workers == 1);
  // A spec this release refuses (an s3:// dataset URI): no definition.
  CHECK(store.GetJob("cc03")->definition.empty());
  CHECK(store.GetJob("cc03")->state == kJobPending);

  // New jobs keep working beside the migrated ones, and a snapshot restores unchanged.
  JobRecord j;
  j.id = "dd04";
  j.name = "new";
  j.spec = R"({"name":"new","entrypoint":{"library":"/n.so"}})";
  REQUIRE(json::parse(fsm.Apply(commands::SubmitJob(j, "")))["ok"] == true);
  auto image = fsm.Snapshot();
  REQUIRE(image.ok());
  StateStore again;
  Fsm fsm2(&again);
  REQUIRE(fsm2.Restore(*image).ok());
  CHECK(again.GetJob("aa01")->definition == mnist->definition);
  CHECK(JobDefinitionFromJson(json::parse(again.GetJob("dd04")->definition)).ok());
  CHECK(again.GetJob("dd04")->spec.empty());  // the definition is what views show
}

TEST_CASE("a snapshot of a newer schema is refused, not misread") {
  std::string sql = Fixture("schema_v1.sql");
  sql += "UPDATE meta SET value = '99' WHERE key = 'schema_version';";
  StateStore store;
  Fsm fsm(&store);
  Status st = fsm.Restore(ImageOf(sql));
  CHECK(!st.ok());
  CHECK(st.message().find("schema version 99") != std::string::npos);
}
