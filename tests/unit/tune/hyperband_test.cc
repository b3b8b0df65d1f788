#include "daemon/tune/hyperband.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace traintl::tune {
namespace {

using json = nlohmann::json;
using Action = SchedulerDecision::Action;

// max_t 9, eta 3: three brackets per band, s = 0 (3 trials, milestone 9), s = 1 (5 trials,
// milestones 3 then 9), s = 2 (9 trials, milestones 1, 3, 9).
std::unique_ptr<TrialScheduler> Make(json spec = json::object(), const std::string& mode = "max",
                                     const std::string& metric = "acc") {
  spec["type"] = "hyperband";
  if (!spec.contains("max_t")) spec["max_t"] = 9;
  auto s = MakeScheduler(spec, metric, mode, 11);
  REQUIRE(s.ok());
  return std::move(*s);
}

HyperBandScheduler& Hb(std::unique_ptr<TrialScheduler>& s) {
  auto* h = dynamic_cast<HyperBandScheduler*>(s.get());
  REQUIRE(h != nullptr);
  return *h;
}

json R(double iter, double value, const std::string& metric = "acc") {
  return {{"training_iteration", iter}, {metric, value}};
}

std::set<std::string> Names(const std::vector<std::pair<std::string, std::string>>& v) {
  std::set<std::string> out;
  for (const auto& p : v) out.insert(p.first);
  return out;
}

// Fills bracket 0 (s = 0) with trials that never report, then adds a..e to bracket 1.
void FillToBracketOne(TrialScheduler& s) {
  for (const char* t : {"f0", "f1", "f2"}) s.OnTrialAdd(t, json::object());
  for (const char* t : {"a", "b", "c", "d", "e"}) s.OnTrialAdd(t, json::object());
}

TEST_CASE("HyperBand fills brackets as Ray does: s = 0, 1, 2, then a new band",
          "[tune][hyperband]") {
  auto s = Make();
  for (int i = 0; i < 18; ++i) s->OnTrialAdd("t" + std::to_string(i), json::object());
  auto& hb = Hb(s);
  for (int i = 0; i < 3; ++i) CHECK(hb.BracketOf("t" + std::to_string(i)) == 0);
  for (int i = 3; i < 8; ++i) CHECK(hb.BracketOf("t" + std::to_string(i)) == 1);
  for (int i = 8; i < 17; ++i) CHECK(hb.BracketOf("t" + std::to_string(i)) == 2);
  CHECK(hb.BracketOf("t17") == 3);
  CHECK(hb.Capacity(0) == 3);
  CHECK(hb.Capacity(1) == 5);
  CHECK(hb.Capacity(2) == 9);
  CHECK(hb.Milestone(0) == 9);
  CHECK(hb.Milestone(1) == 3);
  CHECK(hb.Milestone(2) == 1);
  CHECK(hb.Milestone(3) == 9);
  CHECK(s->CanAddTrial());

  // Ray's defaults (max_t 81, eta 3): five brackets of 5, 8, 15, 34 and 81 trials.
  auto d = Make({{"max_t", 81}});
  int added = 0;
  for (int64_t n : {5, 8, 15, 34, 81}) {
    for (int64_t i = 0; i < n; ++i) d->OnTrialAdd("u" + std::to_string(added++), json::object());
    const int b = Hb(d).BracketOf("u" + std::to_string(added - 1));
    CHECK(Hb(d).Capacity(b) == n);
  }
  CHECK(Hb(d).Milestone(0) == 81);
  CHECK(Hb(d).Milestone(4) == 1);
}

TEST_CASE("HyperBand fills a bracket by the trials that joined it even after some ended",
          "[tune][hyperband]") {
  // The head adds trials as they start: bracket 0's first trials may be done before its
  // last one is added, and the bracket must not take more than its 3 all the same.
  auto s = Make();
  auto& hb = Hb(s);
  for (const char* t : {"t0", "t1", "t2"}) s->OnTrialAdd(t, json::object());
  s->OnTrialResult("t0", R(9, 0.5));
  s->OnTrialComplete("t0");
  s->OnTrialAdd("t3", json::object());
  CHECK(hb.BracketOf("t3") == 1);
  // Saved and loaded, the count stays.
  auto again = Make();
  REQUIRE(again->LoadState(s->SaveState()).ok());
  again->OnTrialAdd("t4", json::object());
  CHECK(Hb(again).BracketOf("t4") == 1);
}

TEST_CASE("HyperBand pauses at the milestone, promotes the top 1/eta, stops the others",
          "[tune][hyperband]") {
  auto s = Make();
  FillToBracketOne(*s);
  const std::vector<std::pair<std::string, double>> acc = {
      {"a", 0.5}, {"b", 0.9}, {"c", 0.1}, {"d", 0.7}, {"e", 0.3}};
  for (int it = 1; it <= 2; ++it) {
    for (const auto& [t, v] : acc) CHECK(s->OnTrialResult(t, R(it, v)).action == Action::kContinue);
  }
  for (int i = 0; i < 4; ++i) {
    auto d = s->OnTrialResult(acc[i].first, R(3, acc[i].second));
    CHECK(d.action == Action::kPause);
    CHECK(d.reason ==
          "HyperBand: waiting for the other trials of bracket 1 to reach training_iteration 3");
  }
  CHECK(s->TakeTrialsToResume().empty());
  CHECK(s->TakeTrialsToStop().empty());
  // The last one decides the bracket: it is in the bottom, so it stops.
  auto last = s->OnTrialResult("e", R(3, 0.3));
  CHECK(last.action == Action::kStop);
  CHECK(last.reason ==
        "HyperBand: acc 0.3 is not among the top 2 of bracket 1 at training_iteration 3");
  auto resume = s->TakeTrialsToResume();
  CHECK(std::set<std::string>(resume.begin(), resume.end()) == std::set<std::string>{"b", "d"});
  auto stop = s->TakeTrialsToStop();
  CHECK(Names(stop) == std::set<std::string>{"a", "c"});
  for (const auto& [t, why] : stop) CHECK(why.find("is not among the top 2") != std::string::npos);
  CHECK(s->TakeTrialsToResume().empty());  // each returned once
  CHECK(s->TakeTrialsToStop().empty());
  CHECK(Hb(s).Milestone(1) == 9);
  // Stopped trials stay stopped.
  CHECK(s->OnTrialResult("c", R(4, 1.0)).action == Action::kStop);

  // The survivors run to max_t; the first there waits, the second finishes the bracket.
  for (int it = 4; it <= 8; ++it)
    CHECK(s->OnTrialResult("d", R(it, 0.7)).action == Action::kContinue);
  CHECK(s->OnTrialResult("d", R(9, 0.7)).action == Action::kPause);
  for (int it = 4; it <= 8; ++it)
    CHECK(s->OnTrialResult("b", R(it, 0.9)).action == Action::kContinue);
  auto end = s->OnTrialResult("b", R(9, 0.9));
  CHECK(end.action == Action::kStop);
  CHECK(end.reason.find("finished at its last milestone, training_iteration 9") !=
        std::string::npos);
  CHECK(Names(s->TakeTrialsToStop()) == std::set<std::string>{"d"});
}

TEST_CASE("HyperBand in min mode promotes the lowest loss", "[tune][hyperband]") {
  auto s = Make(json::object(), "min", "loss");
  FillToBracketOne(*s);
  const std::vector<std::pair<std::string, double>> loss = {
      {"a", 0.5}, {"b", 0.9}, {"c", 0.1}, {"d", 0.7}, {"e", 0.3}};
  for (const auto& [t, v] : loss) s->OnTrialResult(t, R(3, v, "loss"));
  auto resume = s->TakeTrialsToResume();
  CHECK(std::set<std::string>(resume.begin(), resume.end()) == std::set<std::string>{"c"});
  CHECK(Names(s->TakeTrialsToStop()) == std::set<std::string>{"a", "b", "d"});
  // e (0.3) reported last and is in the top 2: it goes on.
  CHECK(s->OnTrialResult("e", R(4, 0.3, "loss")).action == Action::kContinue);
}

TEST_CASE("HyperBand decides a bracket when a trial it waits for ends", "[tune][hyperband]") {
  auto s = Make();
  FillToBracketOne(*s);
  s->OnTrialResult("a", R(3, 0.4));
  s->OnTrialResult("b", R(3, 0.3));
  s->OnTrialResult("c", R(3, 0.2));
  s->OnTrialResult("d", R(3, 0.1));
  CHECK(s->TakeTrialsToResume().empty());
  s->OnTrialResult("e", R(2, 0.9));
  s->OnTrialComplete("e");  // failed before the milestone
  auto resume = s->TakeTrialsToResume();
  CHECK(std::set<std::string>(resume.begin(), resume.end()) == std::set<std::string>{"a", "b"});
  CHECK(Names(s->TakeTrialsToStop()) == std::set<std::string>{"c", "d"});
  // A stopped trial's completion changes nothing.
  s->OnTrialComplete("c");
  CHECK(s->TakeTrialsToStop().empty());
  CHECK(s->TakeTrialsToResume().empty());
  // a waits at the last milestone for b; b fails: the bracket is finished, a stops.
  CHECK(s->OnTrialResult("a", R(9, 0.4)).action == Action::kPause);
  s->OnTrialComplete("b");
  auto stop = s->TakeTrialsToStop();
  REQUIRE(Names(stop) == std::set<std::string>{"a"});
  CHECK(stop[0].second.find("finished at its last milestone") != std::string::npos);
}

TEST_CASE("HyperBand decides again when the good trials are already past the next milestone",
          "[tune][hyperband]") {
  auto s = Make();
  FillToBracketOne(*s);
  for (const char* t : {"a", "b", "c", "d"}) {
    CHECK(s->OnTrialResult(t, R(12, t[0] - 'a')).action == Action::kPause);
  }
  // e's result halves the bracket to a milestone (9) everyone passed: it finishes at once.
  CHECK(s->OnTrialResult("e", R(12, -1)).action == Action::kStop);
  CHECK(Names(s->TakeTrialsToStop()) == std::set<std::string>{"a", "b", "c", "d"});
  CHECK(s->TakeTrialsToResume().empty());
}

TEST_CASE("HyperBand without stop_last_trials lets the last stage run on", "[tune][hyperband]") {
  auto s = Make({{"stop_last_trials", false}});
  s->OnTrialAdd("x", json::object());  // bracket 0: s = 0, no halving
  for (int it : {1, 9, 10, 50})
    CHECK(s->OnTrialResult("x", R(it, 0.5)).action == Action::kContinue);
  s->OnTrialAdd("f1", json::object());
  s->OnTrialAdd("f2", json::object());
  for (const char* t : {"a", "b", "c", "d", "e"}) s->OnTrialAdd(t, json::object());
  for (const char* t : {"a", "b", "c", "d"}) s->OnTrialResult(t, R(3, t[0] - 'a'));
  CHECK(s->OnTrialResult("e", R(3, 10)).action == Action::kContinue);
  CHECK(s->TakeTrialsToResume() == std::vector<std::string>{"d"});
  CHECK(s->TakeTrialsToStop().size() == 3);
  for (int it : {9, 12, 40}) {
    CHECK(s->OnTrialResult("e", R(it, 10)).action == Action::kContinue);
    CHECK(s->OnTrialResult("d", R(it, 3)).action == Action::kContinue);
  }
}

TEST_CASE("HyperBand skips results without the metric or time_attr", "[tune][hyperband]") {
  auto s = Make();
  FillToBracketOne(*s);
  CHECK(s->OnTrialResult("a", {{"training_iteration", 3}}).action == Action::kContinue);
  CHECK(s->OnTrialResult("a", {{"acc", 1.0}}).action == Action::kContinue);
  CHECK(s->OnTrialResult("a", {{"training_iteration", 3}, {"acc", nullptr}}).action ==
        Action::kContinue);
  CHECK(s->OnTrialResult("a", R(3, 1.0)).action == Action::kPause);
}

TEST_CASE("HyperBand reloaded mid-bracket decides as the uninterrupted one", "[tune][hyperband]") {
  auto run = [](TrialScheduler& s, int from, int to) {
    std::vector<std::string> log;
    for (int it = from; it <= to; ++it) {
      for (int i = 0; i < 17; ++i) {
        const std::string t = "t" + std::to_string(i);
        auto d = s.OnTrialResult(t, R(it, ((i * 7) % 17) / 17.0));
        log.push_back(t + ":" + std::to_string(static_cast<int>(d.action)) + d.reason);
      }
      for (const auto& t : s.TakeTrialsToResume()) log.push_back("resume " + t);
      for (const auto& [t, why] : s.TakeTrialsToStop()) log.push_back("stop " + t + why);
    }
    return log;
  };
  auto whole = Make();
  auto first = Make();
  for (int i = 0; i < 17; ++i) {
    whole->OnTrialAdd("t" + std::to_string(i), json::object());
    first->OnTrialAdd("t" + std::to_string(i), json::object());
  }
  CHECK(run(*whole, 1, 2) == run(*first, 1, 2));
  // Mid-bracket: some trials of bracket 2 paused at 3, results of the others still due.
  for (int i = 8; i < 12; ++i) {
    const std::string t = "t" + std::to_string(i);
    CHECK(whole->OnTrialResult(t, R(3, 0.5)).action == first->OnTrialResult(t, R(3, 0.5)).action);
  }
  auto second = Make();
  REQUIRE(second->LoadState(json::parse(first->SaveState().dump())).ok());
  CHECK(second->SaveState() == first->SaveState());
  const auto a = run(*whole, 3, 12);
  const auto b = run(*second, 3, 12);
  CHECK(a == b);
  CHECK(std::count_if(a.begin(), a.end(),
                      [](const std::string& l) { return l.rfind("stop ", 0) == 0; }) > 0);
  CHECK(whole->SaveState() == second->SaveState());
}

}  // namespace
}  // namespace traintl::tune
