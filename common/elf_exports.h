// What an ELF shared object exports, read from the file: the dynamic symbol table parsed in
// place (mmap), nothing loaded or run. The CLI checks a training library with it before
// submitting (traintl validate); the worker finds a library's entry points with it.
//
// Thread-safety: free functions.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"

namespace traintl {

// Names of the functions the ELF shared object at `path` defines and exports (its .dynsym)
// that start with `prefix`, sorted and de-duplicated. InvalidArgument when the file is not
// an ELF shared object of this machine's word size and architecture (saying which), or
// has no dynamic symbol table; NotFound when it does not exist.
Result<std::vector<std::string>> ListExportedFunctions(const std::string& path,
                                                       const std::string& prefix);

}  // namespace traintl
