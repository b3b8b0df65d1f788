#include "cli/plot.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "cli/format.h"

namespace traintl {
namespace cli {
namespace {

using nlohmann::json;

// ------------------------------------------------------------------------------------------
// The reports.

// Reported beside the training metrics but counters or the worker's identity, not worth a
// panel each by default; still drawn when named with --metric.
constexpr const char* kBookkeeping[] = {
    "epoch",   "rank",           "world_size",         "local_rank", "node_rank",
    "attempt", "restored_epoch", "training_iteration", "seq"};

struct Report {
  int attempt = 1;
  double x = 0;                   // on the plot's x axis (see PlotMetrics)
  const json* metrics = nullptr;  // an object
};

struct RankReports {
  int rank = 0;
  std::vector<Report> reports;
};

// A value that can be drawn: a JSON number (not a boolean) of sane magnitude, so that axis
// arithmetic cannot overflow.
std::optional<double> Plottable(const json& value) {
  if (!value.is_number()) return std::nullopt;
  const double v = value.get<double>();
  if (!std::isfinite(v) || std::fabs(v) > 1e100) return std::nullopt;
  return v;
}

std::optional<double> NumberField(const json& object, const char* key) {
  return Plottable(JsonField(object, key));
}

// Rank 0's reports from "history", the other ranks' from "ranks", ordered by rank; reports
// whose metrics are not an object are skipped, ranks without reports left out. Sets each
// report's x and *by_time (whether x is time rather than the report's index).
std::vector<RankReports> ReadRanks(const json& answer, bool* by_time) {
  std::vector<std::pair<int, const json*>> lists;
  const json& history = JsonField(answer, "history");
  if (history.is_array() && !history.empty()) lists.emplace_back(0, &history);
  const json& ranks = JsonField(answer, "ranks");
  if (ranks.is_object()) {
    for (auto it = ranks.begin(); it != ranks.end(); ++it) {
      const std::string& key = it.key();
      if (key.empty() || key.size() > 9 || key.find_first_not_of("0123456789") != std::string::npos)
        continue;
      const int rank = std::stoi(key);
      // Rank 0 is "history"'s: a copy of it under "ranks" would be drawn twice.
      const bool seen = std::any_of(lists.begin(), lists.end(),
                                    [rank](const auto& l) { return l.first == rank; });
      if (!seen && it->is_array() && !it->empty()) lists.emplace_back(rank, &*it);
    }
  }
  std::sort(lists.begin(), lists.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });

  std::vector<RankReports> out;
  double t_min = std::numeric_limits<double>::infinity();
  double t_max = -t_min;
  bool all_timed = true;
  for (const auto& [rank, list] : lists) {
    RankReports r;
    r.rank = rank;
    for (const json& h : *list) {
      const json& metrics = JsonField(h, "metrics");
      if (!metrics.is_object()) continue;
      Report report;
      report.attempt =
          static_cast<int>(std::clamp(NumberField(h, "attempt").value_or(1), -1e9, 1e9));
      report.metrics = &metrics;
      if (std::optional<double> t = NumberField(h, "time")) {
        report.x = *t;
        t_min = std::min(t_min, *t);
        t_max = std::max(t_max, *t);
      } else {
        all_timed = false;
      }
      r.reports.push_back(report);
    }
    if (!r.reports.empty()) out.push_back(std::move(r));
  }
  // Equal times (one report, or a clock that did not move) would put every point on one
  // vertical line; the order of the reports still tells the story.
  *by_time = all_timed && t_max > t_min;
  for (auto& r : out) {
    for (size_t i = 0; i < r.reports.size(); ++i) {
      r.reports[i].x = *by_time ? (r.reports[i].x - t_min) / 1000.0 : static_cast<double>(i);
    }
  }
  return out;
}

std::string Join(const std::set<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

Result<std::vector<std::string>> ChooseMetrics(const std::vector<RankReports>& ranks,
                                               const std::vector<std::string>& requested,
                                               const std::string& job) {
  std::set<std::string> available;
  std::set<std::string> unplottable;  // numbers only beyond what a chart shows
  for (const auto& r : ranks) {
    for (const auto& report : r.reports) {
      for (auto it = report.metrics->begin(); it != report.metrics->end(); ++it) {
        if (Plottable(it.value())) {
          available.insert(it.key());
        } else if (it.value().is_number()) {
          unplottable.insert(it.key());
        }
      }
    }
  }
  std::vector<std::string> out;
  if (!requested.empty()) {
    for (const auto& name : requested) {
      if (available.count(name) == 0 && unplottable.count(name) != 0) {
        return Status::InvalidArgument("metric '" + Printable(name) + "' of job " + job +
                                       " has no value a chart can show (all are infinite, NaN "
                                       "or beyond +-1e100)");
      }
      if (available.count(name) == 0) {
        return Status::InvalidArgument(
            "unknown metric '" + name + "': " +
            (available.empty() ? "job " + job + "'s reports have no numeric metrics"
                               : "job " + job + "'s reports have " + Printable(Join(available))));
      }
      if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
    }
    return out;
  }
  for (const auto& name : available) {
    if (std::none_of(std::begin(kBookkeeping), std::end(kBookkeeping),
                     [&](const char* b) { return name == b; }))
      out.push_back(name);
  }
  if (out.empty()) {
    return Status::InvalidArgument(
        available.empty() ? "job " + job + "'s reports have no numeric metrics to plot"
                          : "job " + job + "'s reports have only bookkeeping metrics (" +
                                Join(available) + "); name one with --metric");
  }
  return out;
}

// ------------------------------------------------------------------------------------------
// The drawing, as a scene that both the SVG writer and the PNG rasterizer render.

// Palette indices: the PNG is 4-bit indexed (half the size of 8-bit, as the file is stored
// uncompressed); the SVG writes the same colours.
enum : uint8_t { kBackground, kInk, kGrid, kMarker, kFirstRankColor };
constexpr std::array<uint32_t, 14> kPalette = {
    0xffffff, 0x333333, 0xe4e4e4, 0x808080,
    // Per rank, rank 0 first (the "tab10" colours, grey swapped for navy so that no rank
    // looks like a restart marker).
    0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd, 0x8c564b, 0xe377c2, 0x000080, 0xbcbd22,
    0x17becf};
constexpr int kRankColors = static_cast<int>(kPalette.size()) - kFirstRankColor;

// The 5x7 font: 7 rows per glyph, bit 4 the leftmost column, for ASCII 32..126.
constexpr uint8_t kFont[95][7] = {
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},  // space
    {0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x04},  // !
    {0x0A, 0x0A, 0x0A, 0x00, 0x00, 0x00, 0x00},  // "
    {0x0A, 0x0A, 0x1F, 0x0A, 0x1F, 0x0A, 0x0A},  // #
    {0x04, 0x0F, 0x14, 0x0E, 0x05, 0x1E, 0x04},  // $
    {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03},  // %
    {0x0C, 0x12, 0x14, 0x08, 0x15, 0x12, 0x0D},  // &
    {0x04, 0x04, 0x08, 0x00, 0x00, 0x00, 0x00},  // '
    {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02},  // (
    {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08},  // )
    {0x00, 0x04, 0x15, 0x0E, 0x15, 0x04, 0x00},  // *
    {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00},  // +
    {0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08},  // ,
    {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00},  // -
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C},  // .
    {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00},  // /
    {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E},  // 0
    {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E},  // 1
    {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F},  // 2
    {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E},  // 3
    {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02},  // 4
    {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E},  // 5
    {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E},  // 6
    {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08},  // 7
    {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E},  // 8
    {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C},  // 9
    {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00},  // :
    {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x04, 0x08},  // ;
    {0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02},  // <
    {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00},  // =
    {0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08},  // >
    {0x0E, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04},  // ?
    {0x0E, 0x11, 0x01, 0x0D, 0x15, 0x15, 0x0E},  // @
    {0x0E, 0x11, 0x11, 0x11, 0x1F, 0x11, 0x11},  // A
    {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E},  // B
    {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E},  // C
    {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C},  // D
    {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F},  // E
    {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10},  // F
    {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F},  // G
    {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11},  // H
    {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E},  // I
    {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C},  // J
    {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11},  // K
    {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F},  // L
    {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11},  // M
    {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11},  // N
    {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E},  // O
    {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10},  // P
    {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D},  // Q
    {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11},  // R
    {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E},  // S
    {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04},  // T
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E},  // U
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04},  // V
    {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A},  // W
    {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11},  // X
    {0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04},  // Y
    {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F},  // Z
    {0x0E, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0E},  // [
    {0x00, 0x10, 0x08, 0x04, 0x02, 0x01, 0x00},  // backslash
    {0x0E, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0E},  // ]
    {0x04, 0x0A, 0x11, 0x00, 0x00, 0x00, 0x00},  // ^
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F},  // _
    {0x08, 0x04, 0x02, 0x00, 0x00, 0x00, 0x00},  // `
    {0x00, 0x00, 0x0E, 0x01, 0x0F, 0x11, 0x0F},  // a
    {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1E},  // b
    {0x00, 0x00, 0x0E, 0x10, 0x10, 0x11, 0x0E},  // c
    {0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F},  // d
    {0x00, 0x00, 0x0E, 0x11, 0x1F, 0x10, 0x0E},  // e
    {0x06, 0x09, 0x08, 0x1C, 0x08, 0x08, 0x08},  // f
    {0x00, 0x00, 0x0F, 0x11, 0x0F, 0x01, 0x0E},  // g
    {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11},  // h
    {0x04, 0x00, 0x0C, 0x04, 0x04, 0x04, 0x0E},  // i
    {0x02, 0x00, 0x06, 0x02, 0x02, 0x12, 0x0C},  // j
    {0x08, 0x08, 0x09, 0x0A, 0x0C, 0x0A, 0x09},  // k
    {0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E},  // l
    {0x00, 0x00, 0x1A, 0x15, 0x15, 0x11, 0x11},  // m
    {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11},  // n
    {0x00, 0x00, 0x0E, 0x11, 0x11, 0x11, 0x0E},  // o
    {0x00, 0x00, 0x1E, 0x11, 0x1E, 0x10, 0x10},  // p
    {0x00, 0x00, 0x0D, 0x13, 0x0F, 0x01, 0x01},  // q
    {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10},  // r
    {0x00, 0x00, 0x0E, 0x10, 0x0E, 0x01, 0x1E},  // s
    {0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06},  // t
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0D},  // u
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x0A, 0x04},  // v
    {0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0A},  // w
    {0x00, 0x00, 0x11, 0x0A, 0x04, 0x0A, 0x11},  // x
    {0x00, 0x00, 0x11, 0x11, 0x0F, 0x01, 0x0E},  // y
    {0x00, 0x00, 0x1F, 0x02, 0x04, 0x08, 0x1F},  // z
    {0x02, 0x04, 0x04, 0x08, 0x04, 0x04, 0x02},  // {
    {0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04},  // |
    {0x08, 0x04, 0x04, 0x02, 0x04, 0x04, 0x08},  // }
    {0x00, 0x00, 0x08, 0x15, 0x02, 0x00, 0x00},  // ~
};

constexpr int kTextScale = 2;                // font pixels per glyph pixel
constexpr int kCharWidth = 6 * kTextScale;   // 5 columns and a gap
constexpr int kTextHeight = 7 * kTextScale;  // from the top of a capital to the baseline

constexpr int kWidth = 1000;
constexpr int kMargin = 16;
constexpr int kLegendRow = kTextHeight + 10;
constexpr int kSampleLength = 28;  // of a legend entry's line
constexpr int kTitleHeight = kTextHeight + 8;
constexpr int kMarkerRow = kTextHeight + 6;  // the restart markers' labels
constexpr int kPlotHeight = 220;
constexpr int kTickGap = 6;  // between an axis and its tick labels
// Below the x axis: clear of the lowest y tick label, which is centred on the axis.
constexpr int kXLabelGap = kTextHeight / 2 + kTickGap;
constexpr int kPanelGap = 24;  // below a panel's x tick labels
constexpr size_t kMaxLegendRanks = 16;

struct Point {
  double x = 0;
  double y = 0;
};

struct Line {
  Point a, b;
  uint8_t color = kInk;
  int width = 1;
  bool dashed = false;
};

struct Curve {
  std::vector<Point> points;
  uint8_t color = kInk;
  int width = 1;
  int rank = 0;
  int attempt = 1;
  std::string metric;
};

enum class Anchor { kStart, kMiddle, kEnd };

struct Text {
  Point at;  // at.y: the top of the capitals
  std::string text;
  uint8_t color = kInk;
  Anchor anchor = Anchor::kStart;
};

struct Scene {
  int width = 0;
  int height = 0;
  std::vector<Line> grid;  // under the curves
  std::vector<Curve> curves;
  std::vector<Line> lines;  // over the curves: axes, restart markers, legend samples
  std::vector<Text> texts;
};

// Code points, each drawn as one character cell.
int TextCells(const std::string& text) {
  int cells = 0;
  for (unsigned char c : text) cells += (c & 0xC0) != 0x80;
  return cells;
}

// The left edge of `t` as drawn.
double TextLeft(const Text& t) {
  const double width = TextCells(t.text) * kCharWidth;
  return t.at.x - (t.anchor == Anchor::kMiddle ? width / 2 : t.anchor == Anchor::kEnd ? width : 0);
}

// An axis from lo to hi with a tick every `step` (1, 2 or 5 times a power of ten).
struct Axis {
  double lo = 0;
  double hi = 1;
  double step = 1;

  std::vector<double> Ticks() const {
    std::vector<double> ticks;
    const int n = static_cast<int>(std::lround((hi - lo) / step));
    for (int k = 0; k <= n && k <= 100; ++k) ticks.push_back(lo + k * step);
    return ticks;
  }

  std::string Label(double v) const {
    if (std::fabs(v) < step * 1e-6) v = 0;  // not "-0" or "1e-17"
    char buf[48];
    if (step >= 1e-4 && std::max(std::fabs(lo), std::fabs(hi)) < 1e7) {
      // As many decimals as the step needs: 0.05 -> 2, 5 -> 0.
      const int decimals = std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
      std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    } else {
      std::snprintf(buf, sizeof buf, "%.4g", v);
    }
    return buf;
  }

  // The pixel for `v` on an axis drawn from p_lo (at lo) to p_hi (at hi).
  double Map(double v, double p_lo, double p_hi) const {
    return p_lo + (v - lo) / (hi - lo) * (p_hi - p_lo);
  }
};

Axis MakeAxis(double min, double max, int ticks, bool integers) {
  if (!(max > min)) {
    // One value: centre it.
    const double pad = min == 0 ? 1 : std::fabs(min) * 0.1;
    min -= pad;
    max += pad;
  }
  const double raw = (max - min) / ticks;
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  const double f = raw / magnitude;
  Axis axis;
  axis.step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * magnitude;
  if (integers) axis.step = std::max(axis.step, 1.0);
  axis.lo = std::floor(min / axis.step + 1e-9) * axis.step;
  axis.hi = std::ceil(max / axis.step - 1e-9) * axis.step;
  if (!(axis.hi > axis.lo)) axis.hi = axis.lo + axis.step;
  return axis;
}

Scene Layout(const std::string& job, const std::vector<RankReports>& ranks,
             const std::vector<std::string>& metrics, bool by_time, size_t* points) {
  Scene scene;
  scene.width = kWidth;

  // Where each attempt after the first began: its earliest report on any rank.
  std::map<int, double> attempt_start;
  double x_max = 0;
  for (const auto& r : ranks) {
    for (const auto& report : r.reports) {
      x_max = std::max(x_max, report.x);
      if (report.attempt <= 1) continue;
      auto [it, inserted] = attempt_start.emplace(report.attempt, report.x);
      if (!inserted) it->second = std::min(it->second, report.x);
    }
  }
  const Axis x_axis = MakeAxis(0, x_max > 0 ? x_max : 1, 8, !by_time);

  std::vector<Axis> y_axes;
  int y_label_cells = 1;
  for (const auto& metric : metrics) {
    double lo = std::numeric_limits<double>::infinity();
    double hi = -lo;
    for (const auto& r : ranks) {
      for (const auto& report : r.reports) {
        if (std::optional<double> v = NumberField(*report.metrics, metric.c_str())) {
          lo = std::min(lo, *v);
          hi = std::max(hi, *v);
        }
      }
    }
    if (!(hi >= lo)) lo = hi = 0;  // unreachable: a chosen metric has a value
    y_axes.push_back(MakeAxis(lo, hi, 5, false));
    for (double t : y_axes.back().Ticks())
      y_label_cells = std::max(y_label_cells, TextCells(y_axes.back().Label(t)));
  }
  const double left = kMargin + y_label_cells * kCharWidth + kTickGap + 2;
  const double right =
      kWidth - std::max(kMargin, TextCells(x_axis.Label(x_axis.hi)) * kCharWidth / 2 + 4);

  auto rank_color = [](size_t index) {
    return static_cast<uint8_t>(kFirstRankColor + index % kRankColors);
  };
  // Rank 0 stands out; the others are context.
  auto rank_width = [](int rank) { return rank == 0 ? 2 : 1; };

  // The legend: a sample of each rank's line, then the restart marker's.
  double y = kMargin;
  {
    double x = kMargin;
    // sample.width 0: no sample.
    auto entry = [&](const std::string& label, const Line& sample) {
      const double w = (sample.width > 0 ? kSampleLength + 8 : 0) + TextCells(label) * kCharWidth;
      if (x > kMargin && x + w > kWidth - kMargin) {
        x = kMargin;
        y += kLegendRow;
      }
      if (sample.width > 0) {
        const double mid = y + kTextHeight / 2.0;
        scene.lines.push_back(
            {{x, mid}, {x + kSampleLength, mid}, sample.color, sample.width, sample.dashed});
        x += kSampleLength + 8;
      }
      scene.texts.push_back({{x, y}, label, kInk, Anchor::kStart});
      x += TextCells(label) * kCharWidth + 28;
    };
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (i + 1 == kMaxLegendRanks && ranks.size() > kMaxLegendRanks) {
        entry("+" + std::to_string(ranks.size() - i) + " more ranks", Line{{}, {}, kInk, 0});
        break;
      }
      entry("rank " + std::to_string(ranks[i].rank),
            Line{{}, {}, rank_color(i), rank_width(ranks[i].rank)});
    }
    if (!attempt_start.empty()) entry("restart (attempt start)", Line{{}, {}, kMarker, 1, true});
    y += kLegendRow + 8;
  }

  *points = 0;
  for (size_t m = 0; m < metrics.size(); ++m) {
    const std::string& metric = metrics[m];
    const Axis& y_axis = y_axes[m];
    scene.texts.push_back({{left, y}, "job " + job + ": " + metric, kInk, Anchor::kStart});
    const double top = y + kTitleHeight + (attempt_start.empty() ? 0 : kMarkerRow);
    const double bottom = top + kPlotHeight;
    auto px = [&](double v) { return x_axis.Map(v, left, right); };
    auto py = [&](double v) { return y_axis.Map(v, bottom, top); };

    for (double t : y_axis.Ticks()) {
      scene.grid.push_back({{left, py(t)}, {right, py(t)}, kGrid, 1, false});
      scene.texts.push_back(
          {{left - kTickGap, py(t) - kTextHeight / 2.0}, y_axis.Label(t), kInk, Anchor::kEnd});
    }
    for (double t : x_axis.Ticks()) {
      scene.grid.push_back({{px(t), top}, {px(t), bottom}, kGrid, 1, false});
      scene.texts.push_back({{px(t), bottom + kXLabelGap}, x_axis.Label(t), kInk, Anchor::kMiddle});
    }

    // The other ranks first, so that rank 0 is drawn over them; one curve per attempt, as
    // a restart goes back to the last checkpoint and a line across it would mean nothing.
    for (size_t i = ranks.size(); i-- > 0;) {
      const RankReports& r = ranks[i];
      Curve curve;
      for (size_t k = 0; k <= r.reports.size(); ++k) {
        if (k == r.reports.size() ||
            (!curve.points.empty() && r.reports[k].attempt != curve.attempt)) {
          if (!curve.points.empty()) {
            *points += curve.points.size();
            scene.curves.push_back(curve);
          }
          curve.points.clear();
          if (k == r.reports.size()) break;
        }
        const Report& report = r.reports[k];
        std::optional<double> v = NumberField(*report.metrics, metric.c_str());
        if (!v) continue;
        if (curve.points.empty()) {
          curve.color = rank_color(i);
          curve.width = rank_width(r.rank);
          curve.rank = r.rank;
          curve.attempt = report.attempt;
          curve.metric = metric;
        }
        curve.points.push_back({px(report.x), py(*v)});
      }
    }

    // Restart markers, labelled in a row of their own above the plot, so that no label
    // hides a curve. A label that would run into the previous one is shortened to the
    // attempt's number, or left out: the dashed line and the legend still tell.
    double labels_end = -1e9;
    for (const auto& [attempt, start] : attempt_start) {
      const double x = px(start);
      scene.lines.push_back({{x, top}, {x, bottom}, kMarker, 1, true});
      for (std::string label : {"attempt " + std::to_string(attempt), std::to_string(attempt)}) {
        const double width = TextCells(label) * kCharWidth;
        const double label_left = std::clamp(x - width / 2, left, kWidth - kMargin - width);
        if (label_left < labels_end + kCharWidth) continue;
        scene.texts.push_back(
            {{label_left, top - kMarkerRow}, std::move(label), kMarker, Anchor::kStart});
        labels_end = label_left + width;
        break;
      }
    }
    for (const auto& [a, b] : {std::pair<Point, Point>{{left, top}, {right, top}},
                               {{right, top}, {right, bottom}},
                               {{right, bottom}, {left, bottom}},
                               {{left, bottom}, {left, top}}}) {
      scene.lines.push_back({a, b, kInk, 1, false});
    }
    y = bottom + kXLabelGap + kTextHeight + kPanelGap;
  }
  scene.texts.push_back({{(left + right) / 2, y},
                         by_time ? "seconds since the job's first report"
                                 : "report number (the reports have no distinct times)",
                         kInk,
                         Anchor::kMiddle});
  scene.height = static_cast<int>(y + kTextHeight + kMargin);
  return scene;
}

// ------------------------------------------------------------------------------------------
// SVG.

std::string Hex(uint8_t color) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%06x", kPalette[color]);
  return buf;
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// Text and attribute values: markup characters escaped, and the control characters that
// XML 1.0 forbids replaced (metric names are the job's own strings).
std::string XmlEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += static_cast<unsigned char>(c) < 0x20 ? '?' : c;
    }
  }
  return out;
}

std::string SvgLine(const Line& l) {
  return "<line x1=\"" + Num(l.a.x) + "\" y1=\"" + Num(l.a.y) + "\" x2=\"" + Num(l.b.x) +
         "\" y2=\"" + Num(l.b.y) + "\" stroke=\"" + Hex(l.color) + "\" stroke-width=\"" +
         std::to_string(l.width) + "\"" + (l.dashed ? " stroke-dasharray=\"6 4\"" : "") + "/>\n";
}

std::string Svg(const Scene& scene) {
  const std::string w = std::to_string(scene.width);
  const std::string h = std::to_string(scene.height);
  // font-size 20: a monospace font's capitals are then about kTextHeight tall and its
  // advance about kCharWidth, as the layout assumes.
  std::string out =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
      "width=\"" +
      w + "\" height=\"" + h + "\" viewBox=\"0 0 " + w + " " + h +
      "\" font-family=\"DejaVu Sans Mono, Menlo, Consolas, monospace\" "
      "font-size=\"20\">\n<rect width=\"100%\" height=\"100%\" fill=\"" +
      Hex(kBackground) + "\"/>\n";
  for (const auto& l : scene.grid) out += SvgLine(l);
  for (const auto& c : scene.curves) {
    out += "<polyline class=\"curve\" data-metric=\"" + XmlEscape(c.metric) + "\" data-rank=\"" +
           std::to_string(c.rank) + "\" data-attempt=\"" + std::to_string(c.attempt) +
           "\" fill=\"none\" stroke=\"" + Hex(c.color) + "\" stroke-width=\"" +
           std::to_string(c.width) + "\" stroke-linejoin=\"round\" points=\"";
    for (size_t i = 0; i < c.points.size(); ++i)
      out += (i ? " " : "") + Num(c.points[i].x) + "," + Num(c.points[i].y);
    out += "\"/>\n";
    // A lone point draws no line.
    if (c.points.size() == 1) {
      out += "<circle cx=\"" + Num(c.points[0].x) + "\" cy=\"" + Num(c.points[0].y) +
             "\" r=\"3\" fill=\"" + Hex(c.color) + "\"/>\n";
    }
  }
  for (const auto& l : scene.lines) out += SvgLine(l);
  for (const auto& t : scene.texts) {
    const char* anchor = t.anchor == Anchor::kStart    ? "start"
                         : t.anchor == Anchor::kMiddle ? "middle"
                                                       : "end";
    out += "<text x=\"" + Num(t.at.x) + "\" y=\"" + Num(t.at.y + kTextHeight) +
           "\" text-anchor=\"" + anchor + "\" fill=\"" + Hex(t.color) + "\">" + XmlEscape(t.text) +
           "</text>\n";
  }
  out += "</svg>\n";
  return out;
}

// ------------------------------------------------------------------------------------------
// PNG.

class Canvas {
 public:
  Canvas(int width, int height)
      : width_(width), height_(height), pixels_(static_cast<size_t>(width) * height, kBackground) {}

  // A square of `size` pixels around (x, y).
  void Dot(int x, int y, uint8_t color, int size) {
    const int from = -(size - 1) / 2;
    for (int dy = from; dy < from + size; ++dy) {
      for (int dx = from; dx < from + size; ++dx) Set(x + dx, y + dy, color);
    }
  }

  // Bresenham's line; dashed: 6 pixels on, 4 off.
  void DrawLine(Point a, Point b, uint8_t color, int width, bool dashed) {
    int x0 = Pixel(a.x), y0 = Pixel(a.y);
    const int x1 = Pixel(b.x), y1 = Pixel(b.y);
    const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
    const int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    int err = dx + dy;
    for (int step = 0;; ++step) {
      if (!dashed || step % 10 < 6) Dot(x0, y0, color, width);
      if (x0 == x1 && y0 == y1) break;
      const int e2 = 2 * err;
      if (e2 >= dy) {
        err += dy;
        x0 += sx;
      }
      if (e2 <= dx) {
        err += dx;
        y0 += sy;
      }
    }
  }

  void DrawText(const Text& t) {
    int x = Pixel(TextLeft(t));
    const int y = Pixel(t.at.y);
    for (unsigned char c : t.text) {
      if ((c & 0xC0) == 0x80) continue;  // one '?' per non-ASCII code point
      if (c < 32 || c > 126) c = '?';
      const uint8_t* glyph = kFont[c - 32];
      for (int row = 0; row < 7; ++row) {
        for (int col = 0; col < 5; ++col) {
          if ((glyph[row] >> (4 - col)) & 1) {
            for (int s = 0; s < kTextScale * kTextScale; ++s)
              Set(x + col * kTextScale + s % kTextScale, y + row * kTextScale + s / kTextScale,
                  t.color);
          }
        }
      }
      x += kCharWidth;
    }
  }

  // A 4-bit indexed PNG whose zlib stream holds stored (uncompressed) deflate blocks: valid
  // for every decoder, and no compression library to link.
  std::string Png() const {
    const size_t row_bytes = (static_cast<size_t>(width_) + 1) / 2;
    std::string raw;
    raw.reserve((row_bytes + 1) * height_);
    for (int y = 0; y < height_; ++y) {
      raw += '\0';  // filter type None
      const uint8_t* row = &pixels_[static_cast<size_t>(y) * width_];
      for (int x = 0; x < width_; x += 2) {
        raw += static_cast<char>(row[x] << 4 | (x + 1 < width_ ? row[x + 1] : 0));
      }
    }
    std::string zlib = "\x78\x01";  // deflate, 32 KiB window; 0x7801 % 31 == 0
    for (size_t pos = 0;;) {
      const size_t n = std::min<size_t>(65535, raw.size() - pos);
      const bool last = pos + n == raw.size();
      zlib += static_cast<char>(last ? 1 : 0);  // BFINAL, BTYPE 00: stored
      zlib += static_cast<char>(n & 0xff);
      zlib += static_cast<char>(n >> 8);
      zlib += static_cast<char>(~n & 0xff);
      zlib += static_cast<char>((~n >> 8) & 0xff);
      zlib.append(raw, pos, n);
      pos += n;
      if (last) break;
    }
    PutU32(&zlib, Adler32(raw));

    std::string header;
    PutU32(&header, static_cast<uint32_t>(width_));
    PutU32(&header, static_cast<uint32_t>(height_));
    header += std::string("\x04\x03\x00\x00\x00", 5);  // depth 4, indexed, no interlace
    std::string palette;
    for (uint32_t rgb : kPalette) {
      palette += static_cast<char>(rgb >> 16);
      palette += static_cast<char>((rgb >> 8) & 0xff);
      palette += static_cast<char>(rgb & 0xff);
    }
    std::string png("\x89PNG\r\n\x1a\n", 8);
    Chunk(&png, "IHDR", header);
    Chunk(&png, "PLTE", palette);
    Chunk(&png, "IDAT", zlib);
    Chunk(&png, "IEND", "");
    return png;
  }

 private:
  // Coordinates are in the canvas (or just off it); the clamp keeps a stray one from
  // overflowing the int.
  static int Pixel(double v) {
    return v == v ? static_cast<int>(std::lround(std::clamp(v, -1e6, 1e6))) : 0;
  }

  void Set(int x, int y, uint8_t color) {
    if (x >= 0 && y >= 0 && x < width_ && y < height_)
      pixels_[static_cast<size_t>(y) * width_ + x] = color;
  }

  static void PutU32(std::string* out, uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) *out += static_cast<char>((v >> shift) & 0xff);
  }

  static uint32_t Crc32(const std::string& data) {
    static const std::array<uint32_t, 256> kTable = [] {
      std::array<uint32_t, 256> table{};
      for (uint32_t n = 0; n < 256; ++n) {
        uint32_t c = n;
        for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
        table[n] = c;
      }
      return table;
    }();
    uint32_t crc = 0xffffffffu;
    for (unsigned char b : data) crc = kTable[(crc ^ b) & 0xff] ^ (crc >> 8);
    return crc ^ 0xffffffffu;
  }

  static uint32_t Adler32(const std::string& data) {
    uint32_t a = 1, b = 0;
    for (unsigned char c : data) {
      a = (a + c) % 65521;
      b = (b + a) % 65521;
    }
    return b << 16 | a;
  }

  static void Chunk(std::string* png, const char* type, const std::string& data) {
    PutU32(png, static_cast<uint32_t>(data.size()));
    const std::string body = type + data;
    *png += body;
    PutU32(png, Crc32(body));
  }

  int width_;
  int height_;
  std::vector<uint8_t> pixels_;
};

std::string Png(const Scene& scene) {
  Canvas canvas(scene.width, scene.height);
  for (const auto& l : scene.grid) canvas.DrawLine(l.a, l.b, l.color, l.width, l.dashed);
  for (const auto& c : scene.curves) {
    for (size_t i = 1; i < c.points.size(); ++i)
      canvas.DrawLine(c.points[i - 1], c.points[i], c.color, c.width, false);
    if (c.points.size() == 1) {
      canvas.Dot(static_cast<int>(std::lround(c.points[0].x)),
                 static_cast<int>(std::lround(c.points[0].y)), c.color, 5);
    }
  }
  for (const auto& l : scene.lines) canvas.DrawLine(l.a, l.b, l.color, l.width, l.dashed);
  for (const auto& t : scene.texts) canvas.DrawText(t);
  return canvas.Png();
}

}  // namespace

Result<PlotFormat> PlotFormatForPath(const std::string& path) {
  auto ends_with = [&](const char* ext) {
    const size_t n = std::strlen(ext);
    if (path.size() <= n) return false;
    for (size_t i = 0; i < n; ++i) {
      if (std::tolower(static_cast<unsigned char>(path[path.size() - n + i])) != ext[i])
        return false;
    }
    return true;
  };
  if (ends_with(".svg")) return PlotFormat::kSvg;
  if (ends_with(".png")) return PlotFormat::kPng;
  return Status::InvalidArgument("--plot FILE must end in .svg or .png, got '" + path + "'");
}

Result<PlotResult> PlotMetrics(const json& answer, const std::vector<std::string>& metrics,
                               PlotFormat format) {
  const std::string job = JsonString(answer, "job_id", "?");
  bool by_time = false;
  const std::vector<RankReports> ranks = ReadRanks(answer, &by_time);
  if (ranks.empty()) return Status::NotFound("job " + job + " has reported no metrics yet");
  TRAINTL_ASSIGN_OR_RETURN(std::vector<std::string> chosen, ChooseMetrics(ranks, metrics, job));
  PlotResult result;
  const Scene scene = Layout(job, ranks, chosen, by_time, &result.points);
  result.metrics = chosen.size();
  result.bytes = format == PlotFormat::kSvg ? Svg(scene) : Png(scene);
  return result;
}

}  // namespace cli
}  // namespace traintl
