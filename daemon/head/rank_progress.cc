#include "daemon/head/rank_progress.h"

#include <algorithm>
#include <cstdio>

namespace traintl {
namespace {

using nlohmann::json;

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

std::string Fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string NodeOf(const std::vector<std::string>& nodes, int rank) {
  return rank >= 0 && static_cast<size_t>(rank) < nodes.size() ? nodes[rank] : "";
}

std::string RankList(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

}  // namespace

void RankProgress::Update(int rank, const events::Progress& p, TimePoint received) {
  if (rank < 0 || static_cast<size_t>(rank) >= ranks_.size()) return;
  Rank& r = ranks_[static_cast<size_t>(rank)];
  r.heard = true;
  r.last = p;
  r.received = received;
  if (p.in_collective) {
    // Clamped: a worker's number, converted to integer nanoseconds (1e300 s would overflow,
    // which is undefined behaviour). A day is beyond any collective timeout.
    const double waiting_s = std::clamp(p.waiting_s, 0.0, 86400.0);
    r.waiting_since = received - std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                     std::chrono::duration<double>(waiting_s));
  }
  // One busy time per step (a progress message may come without a new step).
  if (p.steps > r.busy_steps && p.steps > 1) {
    r.busy.push_back(p.busy_s);
    while (r.busy.size() > kWindow) r.busy.pop_front();
  }
  r.busy_steps = std::max(r.busy_steps, p.steps);
}

std::vector<RankProgress::Straggler> RankProgress::Stragglers() const {
  std::vector<Straggler> out;
  std::vector<double> medians(ranks_.size(), -1);
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (ranks_[i].busy.size() >= kMinSteps)
      medians[i] = Median({ranks_[i].busy.begin(), ranks_[i].busy.end()});
  }
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (medians[i] < 0) continue;
    std::vector<double> peers;
    for (size_t j = 0; j < ranks_.size(); ++j)
      if (j != i && medians[j] >= 0) peers.push_back(medians[j]);
    if (peers.empty()) continue;
    const double peer = Median(peers);
    // A floor keeps microsecond steps from calling noise a straggler.
    if (peer <= 0 || medians[i] < kSlower * peer || medians[i] - peer < 0.005) continue;
    out.push_back(Straggler{static_cast<int>(i), medians[i], peer, medians[i] / peer});
  }
  return out;
}

std::optional<RankProgress::Stall> RankProgress::Stalled(TimePoint now) const {
  int64_t top = 0;
  std::vector<double> step_times;
  for (const Rank& r : ranks_) {
    if (!r.heard) return std::nullopt;  // a rank not heard of yet: too early to tell
    top = std::max(top, r.last.collective_seq);
    if (r.last.step_s > 0) step_times.push_back(r.last.step_s);
  }
  if (top == 0) return std::nullopt;
  Stall s;
  s.collective = top;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const Rank& r = ranks_[i];
    if (r.last.collective_seq == top && r.last.in_collective) {
      s.waiting.push_back(static_cast<int>(i));
      s.for_s = std::max(s.for_s, Seconds(now - r.waiting_since));
    }
  }
  if (s.waiting.empty()) return std::nullopt;
  const double threshold = std::max(kMinStallS, kStallSteps * Median(step_times));
  if (s.for_s < threshold) return std::nullopt;
  bool blocked_behind = false;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const Rank& r = ranks_[i];
    if (r.last.collective_seq == top && r.last.in_collective) continue;
    // Waiting in an earlier collective, and still saying so: blocked by the same rank as
    // the others (a ring collective stopped half-way leaves ranks one collective apart),
    // not the cause. A frozen one falls silent and is named below once it has.
    if (r.last.in_collective && Seconds(now - r.received) <= kSilentS) {
      s.waiting.push_back(static_cast<int>(i));
      blocked_behind = true;
      continue;
    }
    s.lagging.push_back(static_cast<int>(i));
  }
  std::sort(s.waiting.begin(), s.waiting.end());
  if (s.lagging.empty() && blocked_behind) return std::nullopt;  // too early to tell
  if (s.lagging.empty()) {
    // Every rank says it waits in `top`: the silent ones (frozen while waiting) are those
    // the others wait for, provided some waiting rank still speaks.
    std::vector<int> speaking, silent;
    for (int i : s.waiting)
      (Seconds(now - ranks_[static_cast<size_t>(i)].received) > kSilentS ? silent : speaking)
          .push_back(i);
    if (silent.empty() || speaking.empty()) return std::nullopt;  // the network, not a rank
    s.waiting = std::move(speaking);
    s.lagging = std::move(silent);
  }
  return s;
}

json RankProgress::View(TimePoint now, const std::vector<std::string>& rank_nodes) const {
  json ranks = json::array();
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const Rank& r = ranks_[i];
    if (!r.heard) continue;
    ranks.push_back({{"rank", i},
                     {"node", NodeOf(rank_nodes, static_cast<int>(i))},
                     {"steps", r.last.steps},
                     {"step_s", r.last.step_s},
                     {"busy_s", r.last.busy_s},
                     {"collective_seq", r.last.collective_seq},
                     {"in_collective", r.last.in_collective},
                     {"waiting_s", r.last.in_collective ? Seconds(now - r.waiting_since) : 0.0},
                     {"age_s", Seconds(now - r.received)}});
  }
  if (ranks.empty()) return nullptr;
  json stragglers = json::array();
  for (const auto& s : Stragglers())
    stragglers.push_back({{"rank", s.rank},
                          {"node", NodeOf(rank_nodes, s.rank)},
                          {"busy_s", s.busy_s},
                          {"peers_busy_s", s.peers_busy_s},
                          {"slower", s.slower}});
  json stalled = nullptr;
  if (auto s = Stalled(now)) {
    stalled = {{"collective", s->collective},
               {"waiting", s->waiting},
               {"lagging", s->lagging},
               {"for_s", s->for_s}};
  }
  return {{"ranks", ranks}, {"stragglers", stragglers}, {"stalled", stalled}};
}

std::string RankProgress::Summary(TimePoint now, const std::vector<std::string>& nodes) const {
  std::string out;
  if (auto s = Stalled(now)) {
    std::string lagging;
    for (int r : s->lagging)
      lagging += (lagging.empty() ? "" : ", ") + std::to_string(r) + " (" + NodeOf(nodes, r) + ")";
    out = "collective " + std::to_string(s->collective) + " stalled: rank(s) " +
          RankList(s->waiting) + " wait for rank(s) " + lagging + ", which are not in it";
  }
  for (const auto& s : Stragglers()) {
    if (!out.empty()) out += "; ";
    out += "rank " + std::to_string(s.rank) + " (" + NodeOf(nodes, s.rank) +
           ") is a straggler: " + Fixed(s.slower, 1) + "x the others' busy time per step (" +
           Fixed(s.busy_s * 1000, 0) + " ms vs " + Fixed(s.peers_busy_s * 1000, 0) + " ms)";
  }
  return out;
}

}  // namespace traintl
