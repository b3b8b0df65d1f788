// Plots of a job's metrics for `traintl metrics JOB --plot FILE`: one panel per metric,
// stacked, with a curve per rank and attempt (rank 0 thick, the other ranks thin, one colour
// each, in a legend) against the time since the job's first report, each restart marked by
// a dashed line. Drawn as hand-written SVG or as a PNG rasterized here (a built-in 5x7 font,
// stored deflate blocks), so that the CLI needs no graphics or compression library.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace traintl {
namespace cli {

enum class PlotFormat { kSvg, kPng };

// The format that a --plot file name asks for by its extension (.svg or .png, any case);
// InvalidArgument naming the accepted extensions for any other.
Result<PlotFormat> PlotFormatForPath(const std::string& path);

struct PlotResult {
  std::string bytes;   // the file's content
  size_t points = 0;   // values drawn, over every panel, rank and attempt
  size_t metrics = 0;  // panels
};

// Draws `answer`, a GET /v1/jobs/{job}/metrics answer: rank 0's reports from "history" and,
// when present, the other ranks' from "ranks" ({"<rank>": [reports]}). `metrics` are the
// metrics to draw, in order; empty: every numeric metric of the reports except bookkeeping
// ones (epoch, rank, world_size, attempt, ...), by name. The x axis is seconds since the
// first report, or the report's index in its rank's list when the reports' times are all
// equal or missing. Errors: NotFound "job X has reported no metrics yet" when there is no
// report; InvalidArgument for a metric that no report has as a number (naming those that
// are), or when no metric is left to draw.
Result<PlotResult> PlotMetrics(const nlohmann::json& answer,
                               const std::vector<std::string>& metrics, PlotFormat format);

}  // namespace cli
}  // namespace traintl
