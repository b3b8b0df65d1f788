// The web dashboard's files (daemon/dashboard/assets and the vendored uPlot in
// third_party/uplot), built into the daemon by cmake/embed_files.cmake so that it serves
// them with nothing fetched from elsewhere at run time.
//
// Thread-safety: immutable after the first call.
#pragma once

#include <string_view>
#include <vector>

namespace traintl {

struct EmbeddedFile {
  std::string_view name;          // base name, e.g. "app.js"
  std::string_view content_type;  // e.g. "text/javascript; charset=utf-8"
  std::string_view data;
};

const std::vector<EmbeddedFile>& DashboardFiles();

}  // namespace traintl
