// CheckpointCommitter (daemon/head/checkpoint_committer.h): checkpoint file work runs on
// its own thread, in submission order, and answers on the io_context.
#include "daemon/head/checkpoint_committer.h"

#include <unistd.h>

#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <thread>

#include "common/file_util.h"

using namespace traintl;

namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/traintl-committer-XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  return tmpl;
}

// Stages rank 0's checkpoint `seq` of attempt 1 with one file.
std::string Stage(const std::string& trial, int seq, const std::string& content) {
  const std::string dir = trial + "/.staging/attempt_1/seq_" + std::to_string(seq) + "/rank_0";
  REQUIRE(MakeDirs(dir).ok());
  REQUIRE(WriteFileAtomic(dir + "/model.pt", content).ok());
  return dir;
}

}  // namespace

TEST_CASE("merges run off the io thread and answer on it, in order; cleanup comes after") {
  const std::string trial = TempDir();
  boost::asio::io_context io;
  // The answers come from another thread: the loop must not stop for lack of work.
  auto work = boost::asio::make_work_guard(io);
  CheckpointCommitter committer(io, std::nullopt);
  const auto io_thread = std::this_thread::get_id();
  std::vector<std::string> merged;
  for (int seq = 0; seq < 3; ++seq) {
    committer.Merge(trial, 1, seq, {{0, Stage(trial, seq, "m" + std::to_string(seq))}},
                    {{"seq", seq}}, [&](Result<std::string> dir) {
                      CHECK(std::this_thread::get_id() == io_thread);
                      REQUIRE(dir.ok());
                      merged.push_back(*dir);
                    });
  }
  // A merge that fails (nothing staged there) reports its error the same way.
  Status failed;
  committer.Merge(trial, 1, 9, {{0, trial + "/.staging/attempt_1/seq_9/rank_0"}}, {},
                  [&](Result<std::string> dir) { failed = dir.status(); });
  // Queued behind the merges: the staging area goes only once they moved their files.
  committer.CleanUpAttempt(trial + "/.staging/attempt_1", trial);
  // Nothing answered before the io_context ran: the answers are posted to it.
  CHECK(merged.empty());
  while (merged.size() < 3 || failed.ok()) io.run_one();
  CHECK(merged == std::vector<std::string>{trial + "/checkpoint_a001_s000000",
                                           trial + "/checkpoint_a001_s000001",
                                           trial + "/checkpoint_a001_s000002"});
  CHECK(!failed.ok());
  CHECK(*ReadFile(merged[2] + "/model.pt") == "m2");
  while (committer.pending() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(!PathExists(trial + "/.staging/attempt_1"));
  CHECK(PathExists(merged[0]));

  // Retention's deletes: only checkpoint directories of this trial dir.
  const std::string outside = TempDir();
  committer.Remove(trial, {merged[0], outside});
  while (committer.pending() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(!PathExists(merged[0]));
  CHECK(PathExists(merged[1]));
  CHECK(PathExists(outside));
  RemoveAll(outside).IgnoreError();
  RemoveAll(trial).IgnoreError();
}
