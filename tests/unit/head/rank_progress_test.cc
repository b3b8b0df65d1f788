// RankProgress (daemon/head/rank_progress.h): stragglers from the ranks' busy time per step
// (>= 1.5x the peers' median over the window, after kMinSteps steps, not for tiny absolute
// differences), stalled collectives from who waits in which collective and for how long,
// the View JSON and the Summary line. Pure: every time is passed in.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/head/rank_progress.h"
#include "proto/worker_events.h"

using namespace traintl;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// A fixed origin well after the clock's epoch, so that "received - waiting_s" stays sane.
Clock::time_point At(double s) {
  return Clock::time_point{} + std::chrono::hours(1) +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

events::Progress Step(int64_t steps, double busy_s, double step_s = 0.5) {
  events::Progress p;
  p.steps = steps;
  p.busy_s = busy_s;
  p.step_s = step_s;
  return p;
}

events::Progress InCollective(int64_t seq, bool waiting, double waiting_s, double step_s = 0.5) {
  events::Progress p;
  p.steps = 3;
  p.step_s = step_s;
  p.busy_s = 0.1;
  p.collective_seq = seq;
  p.in_collective = waiting;
  p.waiting_s = waiting ? waiting_s : 0;
  return p;
}

// Steps first..last of every rank, rank r's busy time busy[r], in lockstep.
void Steps(RankProgress& rp, int64_t first, int64_t last, const std::vector<double>& busy) {
  for (int64_t s = first; s <= last; ++s)
    for (size_t r = 0; r < busy.size(); ++r)
      rp.Update(static_cast<int>(r), Step(s, busy[r]), At(static_cast<double>(s)));
}

const std::vector<std::string> kNodes = {"node-a", "node-b", "node-c"};

}  // namespace

TEST_CASE("a rank whose busy time stays 1.5x the peers' median is a straggler") {
  RankProgress rp(3);
  Steps(rp, 1, 6, {0.1, 0.3, 0.12});
  const auto s = rp.Stragglers();
  REQUIRE(s.size() == 1);
  CHECK(s[0].rank == 1);
  CHECK(s[0].busy_s == Approx(0.3));
  CHECK(s[0].peers_busy_s == Approx(0.11));  // the median of 0.1 and 0.12
  CHECK(s[0].slower == Approx(0.3 / 0.11));
}

TEST_CASE("no straggler is named before kMinSteps busy samples") {
  STATIC_REQUIRE(RankProgress::kMinSteps == 5);
  RankProgress rp(3);
  // Step 1 (warm-up) adds no sample: steps 1..5 are 4 samples.
  Steps(rp, 1, 5, {0.1, 0.3, 0.1});
  CHECK(rp.Stragglers().empty());
  Steps(rp, 6, 6, {0.1, 0.3, 0.1});
  REQUIRE(rp.Stragglers().size() == 1);
  CHECK(rp.Stragglers()[0].rank == 1);
}

TEST_CASE("an even job has no straggler") {
  RankProgress rp(4);
  Steps(rp, 1, 20, {0.1, 0.11, 0.1, 0.12});
  CHECK(rp.Stragglers().empty());
}

TEST_CASE("a rank 1.4x the peers' median is no straggler") {
  RankProgress rp(3);
  Steps(rp, 1, 20, {0.1, 0.14, 0.1});
  CHECK(rp.Stragglers().empty());
}

TEST_CASE("a tiny absolute difference is no straggler however large the ratio") {
  RankProgress rp(3);
  Steps(rp, 1, 12, {0.001, 0.004, 0.001});  // 4x but 3 ms
  CHECK(rp.Stragglers().empty());

  RankProgress above(3);
  Steps(above, 1, 12, {0.001, 0.0065, 0.001});  // 6.5x and 5.5 ms
  REQUIRE(above.Stragglers().size() == 1);
  CHECK(above.Stragglers()[0].rank == 1);
  CHECK(above.Stragglers()[0].slower == Approx(6.5));
}

TEST_CASE("a straggler that has been fast for most of the window is no longer named") {
  STATIC_REQUIRE(RankProgress::kWindow == 10);
  RankProgress rp(3);
  Steps(rp, 1, 11, {0.1, 0.3, 0.1});
  REQUIRE(rp.Stragglers().size() == 1);
  Steps(rp, 12, 16, {0.1, 0.1, 0.1});  // 5 slow, 5 fast: the median is still 0.2
  REQUIRE(rp.Stragglers().size() == 1);
  CHECK(rp.Stragglers()[0].busy_s == Approx(0.2));
  Steps(rp, 17, 17, {0.1, 0.1, 0.1});  // 4 slow, 6 fast
  CHECK(rp.Stragglers().empty());
}

TEST_CASE("a progress message repeating the same step count adds no busy sample") {
  RankProgress rp(3);
  // Ranks 0 and 2: 5 samples (steps 2..6); rank 1: 4 samples (steps 2..5) so far.
  for (int64_t s = 1; s <= 6; ++s) {
    rp.Update(0, Step(s, 0.1), At(static_cast<double>(s)));
    rp.Update(2, Step(s, 0.1), At(static_cast<double>(s)));
    if (s <= 5) rp.Update(1, Step(s, 0.3), At(static_cast<double>(s)));
  }
  for (int i = 0; i < 10; ++i) rp.Update(1, Step(5, 0.3), At(6.1 + i * 0.01));
  CHECK(rp.Stragglers().empty());
  rp.Update(1, Step(6, 0.3), At(7));
  REQUIRE(rp.Stragglers().size() == 1);
  CHECK(rp.Stragglers()[0].rank == 1);
}

TEST_CASE("Update ignores ranks out of range") {
  RankProgress rp(3);
  rp.Update(-1, InCollective(4, true, 10), At(0));
  rp.Update(3, InCollective(4, true, 10), At(0));
  rp.Update(100, Step(7, 1), At(0));
  CHECK(rp.View(At(1), kNodes).is_null());
  CHECK_FALSE(rp.Stalled(At(100)).has_value());

  // Ranks 0 and 1 wait; a message "from rank 3" does not stand for rank 2.
  rp.Update(0, InCollective(4, true, 0), At(10));
  rp.Update(1, InCollective(4, true, 0), At(10));
  rp.Update(3, InCollective(3, false, 0), At(10));
  CHECK_FALSE(rp.Stalled(At(100)).has_value());
  CHECK(rp.View(At(100), kNodes)["ranks"].size() == 2);
}

TEST_CASE("two ranks waiting past the threshold with the third a collective behind: a stall") {
  RankProgress rp(3);
  rp.Update(0, InCollective(7, true, 0.5), At(10));  // waiting since 9.5
  rp.Update(1, InCollective(7, true, 0.1), At(10));  // since 9.9
  rp.Update(2, InCollective(6, false, 0), At(9.4));
  // step_s 0.5: 3 x 0.5 = 1.5 < 2, so the threshold is 2 s.
  CHECK_FALSE(rp.Stalled(At(11.4)).has_value());  // 1.9 s
  auto s = rp.Stalled(At(12));
  REQUIRE(s.has_value());
  CHECK(s->collective == 7);
  CHECK(s->waiting == std::vector<int>{0, 1});
  CHECK(s->lagging == std::vector<int>{2});
  CHECK(s->for_s == Approx(2.5));  // the longest wait
}

TEST_CASE("a worker's absurd waiting time is clamped to a day, not overflowed") {
  RankProgress rp(3);
  rp.Update(0, InCollective(7, true, 1e300), At(10));  // was undefined behaviour
  rp.Update(1, InCollective(7, true, -5), At(10));     // as if it had just begun
  rp.Update(2, InCollective(6, false, 0), At(9.4));
  auto s = rp.Stalled(At(12));
  REQUIRE(s.has_value());
  CHECK(s->for_s == Approx(86402.0));
  CHECK(s->waiting == std::vector<int>{0, 1});
}

TEST_CASE("the stall threshold is 3 median step times when that is over 2 s") {
  RankProgress rp(3);
  rp.Update(0, InCollective(7, true, 0, 1.0), At(10));
  rp.Update(1, InCollective(7, true, 0, 1.0), At(10));
  rp.Update(2, InCollective(6, false, 0, 0.9), At(9));
  CHECK_FALSE(rp.Stalled(At(12.9)).has_value());  // 2.9 s < 3 x 1.0
  auto s = rp.Stalled(At(13.2));
  REQUIRE(s.has_value());
  CHECK(s->lagging == std::vector<int>{2});
  CHECK(s->for_s == Approx(3.2));
}

TEST_CASE("a rank in the same collective but not waiting in it lags: stopped mid-way") {
  RankProgress rp(3);
  rp.Update(0, InCollective(7, true, 0), At(10));
  rp.Update(1, InCollective(7, false, 0), At(10));
  rp.Update(2, InCollective(7, true, 0), At(10));
  auto s = rp.Stalled(At(15));
  REQUIRE(s.has_value());
  CHECK(s->collective == 7);
  CHECK(s->waiting == std::vector<int>{0, 2});
  CHECK(s->lagging == std::vector<int>{1});
  CHECK(s->for_s == Approx(5));
}

TEST_CASE("a rank still waiting in the collective before is blocked too, not the cause") {
  // Rank 1 was stopped half-way through collective 67: rank 2 got what it needed and
  // waits in 68, rank 0 still waits in 67 (and says so every second); rank 1 computes.
  RankProgress rp(3);
  rp.Update(0, InCollective(67, true, 0), At(10));
  rp.Update(1, InCollective(67, false, 0), At(10));
  rp.Update(2, InCollective(68, true, 0), At(10));
  rp.Update(0, InCollective(67, true, 2), At(12));  // repeated while waiting
  auto s = rp.Stalled(At(12.1));
  REQUIRE(s.has_value());
  CHECK(s->collective == 68);
  CHECK(s->waiting == std::vector<int>{0, 2});
  CHECK(s->lagging == std::vector<int>{1});
}

TEST_CASE("ranks waiting in two collectives: the silent one is named once it is silent") {
  // Rank 1 froze while waiting in 67 itself: at first it cannot be told from rank 0.
  RankProgress rp(3);
  rp.Update(0, InCollective(67, true, 0), At(10));
  rp.Update(1, InCollective(67, true, 0), At(10));
  rp.Update(2, InCollective(68, true, 0), At(10));
  rp.Update(0, InCollective(67, true, 2), At(12));
  CHECK_FALSE(rp.Stalled(At(12.1)).has_value());  // rank 1 heard 2.1 s ago: too early
  rp.Update(0, InCollective(67, true, 3), At(13));
  auto s = rp.Stalled(At(13));  // rank 1 silent for 3 s
  REQUIRE(s.has_value());
  CHECK(s->waiting == std::vector<int>{0, 2});
  CHECK(s->lagging == std::vector<int>{1});
}

TEST_CASE("every rank waiting is no stall of a rank") {
  RankProgress rp(3);
  for (int r = 0; r < 3; ++r) rp.Update(r, InCollective(7, true, 0), At(10));
  CHECK_FALSE(rp.Stalled(At(100)).has_value());
}

TEST_CASE("a rank never heard of means no stall yet") {
  RankProgress rp(3);
  rp.Update(0, InCollective(7, true, 0), At(10));
  rp.Update(1, InCollective(7, true, 0), At(10));
  CHECK_FALSE(rp.Stalled(At(100)).has_value());
  rp.Update(2, InCollective(6, false, 0), At(10));
  CHECK(rp.Stalled(At(100)).has_value());
}

TEST_CASE("waits below the threshold are no stall") {
  RankProgress rp(3);
  rp.Update(0, InCollective(7, true, 1.0), At(10));
  rp.Update(1, InCollective(7, true, 1.5), At(10));
  rp.Update(2, InCollective(6, false, 0), At(10));
  CHECK_FALSE(rp.Stalled(At(10.4)).has_value());  // 1.9 s
  CHECK(rp.Stalled(At(10.6)).has_value());        // 2.1 s
}

TEST_CASE("no collective entered yet is no stall") {
  RankProgress rp(2);
  rp.Update(0, Step(3, 0.1), At(0));
  rp.Update(1, Step(3, 0.1), At(0));
  CHECK_FALSE(rp.Stalled(At(100)).has_value());
}

TEST_CASE("a rank's repeated messages in one collective keep the wait's start") {
  RankProgress rp(3);
  rp.Update(0, InCollective(7, true, 0.2), At(10));  // since 9.8
  rp.Update(0, InCollective(7, true, 1.2), At(11));  // still since 9.8
  rp.Update(1, InCollective(7, true, 0.0), At(10));
  rp.Update(2, InCollective(6, false, 0), At(10));
  auto s = rp.Stalled(At(12));
  REQUIRE(s.has_value());
  CHECK(s->for_s == Approx(2.2));
}

TEST_CASE("View is null before any rank has said anything") {
  RankProgress rp(3);
  CHECK(rp.View(At(0), kNodes).is_null());
}

TEST_CASE("View names ranks stragglers and the stall with their nodes") {
  RankProgress rp(3);
  Steps(rp, 1, 6, {0.1, 0.3, 0.1});
  // The last words: ranks 0 and 1 wait in collective 7, rank 2 never entered it.
  rp.Update(0, InCollective(7, true, 0.5), At(10));
  rp.Update(1, InCollective(7, true, 0.5), At(10));
  rp.Update(2, InCollective(6, false, 0), At(9));

  const json v = rp.View(At(13), kNodes);
  REQUIRE(v.is_object());
  CHECK(v.size() == 3);
  REQUIRE(v["ranks"].is_array());
  REQUIRE(v["ranks"].size() == 3);
  const json& r0 = v["ranks"][0];
  CHECK(r0.size() == 9);
  CHECK(r0["rank"] == 0);
  CHECK(r0["node"] == "node-a");
  CHECK(r0["steps"] == 3);
  CHECK(r0["step_s"].get<double>() == Approx(0.5));
  CHECK(r0["busy_s"].get<double>() == Approx(0.1));
  CHECK(r0["collective_seq"] == 7);
  CHECK(r0["in_collective"] == true);
  CHECK(r0["waiting_s"].get<double>() == Approx(3.5));
  CHECK(r0["age_s"].get<double>() == Approx(3));
  const json& r2 = v["ranks"][2];
  CHECK(r2["rank"] == 2);
  CHECK(r2["node"] == "node-c");
  CHECK(r2["collective_seq"] == 6);
  CHECK(r2["in_collective"] == false);
  CHECK(r2["waiting_s"].get<double>() == 0);
  CHECK(r2["age_s"].get<double>() == Approx(4));

  REQUIRE(v["stragglers"].is_array());
  REQUIRE(v["stragglers"].size() == 1);
  const json& st = v["stragglers"][0];
  CHECK(st.size() == 5);
  CHECK(st["rank"] == 1);
  CHECK(st["node"] == "node-b");
  CHECK(st["busy_s"].get<double>() == Approx(0.3));
  CHECK(st["peers_busy_s"].get<double>() == Approx(0.1));
  CHECK(st["slower"].get<double>() == Approx(3));

  REQUIRE(v["stalled"].is_object());
  CHECK(v["stalled"].size() == 4);
  CHECK(v["stalled"]["collective"] == 7);
  CHECK(v["stalled"]["waiting"] == json::array({0, 1}));
  CHECK(v["stalled"]["lagging"] == json::array({2}));
  CHECK(v["stalled"]["for_s"].get<double>() == Approx(3.5));
}

TEST_CASE("View of an even job: no stragglers and stalled null and unheard ranks left out") {
  RankProgress rp(3);
  rp.Update(0, Step(4, 0.1), At(1));
  rp.Update(2, Step(4, 0.1), At(1));
  const json v = rp.View(At(2), {"node-a"});  // fewer nodes than ranks
  REQUIRE(v["ranks"].size() == 2);
  CHECK(v["ranks"][0]["rank"] == 0);
  CHECK(v["ranks"][0]["node"] == "node-a");
  CHECK(v["ranks"][1]["rank"] == 2);
  CHECK(v["ranks"][1]["node"] == "");
  CHECK(v["stragglers"] == json::array());
  CHECK(v["stalled"].is_null());
}

TEST_CASE("Summary is empty when all is well") {
  RankProgress rp(3);
  CHECK(rp.Summary(At(0), kNodes).empty());
  Steps(rp, 1, 10, {0.1, 0.1, 0.1});
  CHECK(rp.Summary(At(10), kNodes).empty());
}

TEST_CASE("Summary names the straggler with its node and times") {
  RankProgress rp(3);
  Steps(rp, 1, 6, {0.1, 0.3, 0.1});
  CHECK(rp.Summary(At(7), kNodes) ==
        "rank 1 (node-b) is a straggler: 3.0x the others' busy time per step (300 ms vs 100 ms)");
}

TEST_CASE("Summary names a stalled collective's waiting and lagging ranks and nodes") {
  RankProgress rp(3);
  rp.Update(0, InCollective(7, true, 0), At(10));
  rp.Update(1, InCollective(6, false, 0), At(10));
  rp.Update(2, InCollective(7, true, 0), At(10));
  CHECK(rp.Summary(At(13), kNodes) ==
        "collective 7 stalled: rank(s) 0, 2 wait for rank(s) 1 (node-b), which are not in it");
}

TEST_CASE("Summary joins a stall and a straggler") {
  RankProgress rp(3);
  Steps(rp, 1, 6, {0.1, 0.3, 0.1});
  rp.Update(0, InCollective(7, true, 0), At(10));
  rp.Update(1, InCollective(7, true, 0), At(10));
  rp.Update(2, InCollective(6, false, 0), At(10));
  CHECK(rp.Summary(At(13), kNodes) ==
        "collective 7 stalled: rank(s) 0, 1 wait for rank(s) 2 (node-c), which are not in it; rank "
        "1 (node-b) is a straggler: 3.0x the others' busy time per step "
        "(300 ms vs 100 ms)");
}

TEST_CASE("a rank frozen while waiting in the collective is named by its silence") {
  RankProgress rp(3);
  // All three entered collective 7 and wait; ranks 0 and 2 repeat it every second,
  // rank 1 (stopped by SIGSTOP inside its wait) said it once.
  for (int r = 0; r < 3; ++r) rp.Update(r, InCollective(7, true, 0.0), At(10));
  for (double t = 11; t <= 14; t += 1) {
    rp.Update(0, InCollective(7, true, t - 10), At(t));
    rp.Update(2, InCollective(7, true, t - 10), At(t));
  }
  auto stall = rp.Stalled(At(14));
  REQUIRE(stall.has_value());
  CHECK(stall->lagging == std::vector<int>{1});
  CHECK(stall->waiting == std::vector<int>{0, 2});
  // Everyone silent (the head lost touch, or all froze): nobody is singled out.
  CHECK_FALSE(rp.Stalled(At(30)).has_value());
}
