// Loading a user's training library: dlopen, the ABI version check, and finding the entry
// point (named, or the only one exported). Every failure here means the library cannot be
// used (traintl-worker exit code 3, not retryable).
//
// Thread-safety: free functions; dlopen/dlerror are process-wide, so call them from one
// thread at a time.
#pragma once

#include <string>
#include <vector>

#include "common/elf_exports.h"
#include "common/result.h"
#include "traintl/abi.h"

namespace traintl {
namespace worker {

using ::traintl::ListExportedFunctions;  // common/elf_exports.h

struct TrainingLibrary {
  void* handle = nullptr;  // from dlopen; never closed
  traintl_entry_fn entry = nullptr;
  std::string function;  // the entry point's name, without the symbol prefix
};

// Loads `path` (RTLD_NOW | RTLD_LOCAL: the library's symbols stay its own), checks its ABI
// version and resolves `function`, or the single exported entry point when it is empty.
// The error message is one line saying what is wrong with the library.
// `name` is how messages call the library (the path the user submitted; "" = `path`): the
// file loaded may be the daemon's content-addressed copy, a name the user never gave.
Result<TrainingLibrary> LoadTrainingLibrary(const std::string& path, const std::string& function,
                                            const std::string& name = "");

}  // namespace worker
}  // namespace traintl
