// A python or command job's working_dir, as `traintl submit` ships it: checked where it can
// be (the module exists and compiles, the function is defined, a script named on the
// command line is there), then packed into one content-addressed archive
// (common/code_archive.h) that the daemon stores as a blob and every node unpacks once.
//
// Thread-safety: free functions; they print to the context's streams.
#pragma once

#include <string>

#include "cli/context.h"
#include "proto/job_spec.h"

namespace traintl {
namespace cli {

// Python source that checks one module file: argv[1] the file, argv[2] the function. Exit 0
// when fine, 1 with "SyntaxError: ..." on stdout, 2 when nothing defines the function.
extern const char kPythonCheckScript[];

struct PackedWorkingDir {
  std::string bytes;
  std::string sha256;
  int64_t files = 0;
};

// Checks and packs spec.working_dir (resolved against the current directory). On failure
// prints why, naming the spec field, and returns false with *exit_code set.
bool PackWorkingDir(const JobSpec& spec, const std::string& spec_path, CliContext& ctx,
                    PackedWorkingDir* out, int* exit_code);

}  // namespace cli
}  // namespace traintl
