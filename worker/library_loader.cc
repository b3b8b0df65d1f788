#include "worker/library_loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "common/file_util.h"

namespace traintl {
namespace worker {
namespace {

constexpr size_t kPrefixLen = sizeof(TRAINTL_ENTRY_SYMBOL_PREFIX) - 1;

bool IsIdentifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string DlError() {
  const char* e = ::dlerror();
  return e != nullptr ? e : "unknown dlopen error";
}

}  // namespace

Result<TrainingLibrary> LoadTrainingLibrary(const std::string& path, const std::string& function,
                                            const std::string& name) {
  const std::string file = AbsolutePath(path);
  // What messages call it: the user's name for it, not the daemon's copy.
  const std::string shown = name.empty() ? file : name;
  if (!PathExists(file)) return Status::NotFound("library not found: " + shown);
  if (IsDirectory(file)) return Status::InvalidArgument("library is a directory: " + shown);
  // dlopen of a FIFO blocks until a writer comes, of a device reads it: refuse both first.
  // Opened without blocking; the check is about mistakes, and a file swapped after it is
  // still caught by the worker's load deadline.
  {
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    const bool regular = fd >= 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    if (fd >= 0) ::close(fd);
    if (!regular) return Status::InvalidArgument("library is not a regular file: " + shown);
  }

  ::dlerror();
  void* handle = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::string why = DlError();
    // dlerror() names the file it opened: say the user's name for it instead.
    if (!name.empty())
      for (size_t at; (at = why.find(file)) != std::string::npos;)
        why.replace(at, file.size(), name);
    return Status::FailedPrecondition("cannot load the library " + shown + ": " + why);
  }

  auto version_fn =
      reinterpret_cast<traintl_abi_version_fn>(::dlsym(handle, TRAINTL_ABI_VERSION_SYMBOL));
  if (version_fn == nullptr) {
    return Status::FailedPrecondition(
        "not a traintl training library (it does not export " TRAINTL_ABI_VERSION_SYMBOL
        "; include <traintl/train.h> and export the function with TRAINTL_ENTRYPOINT): " +
        shown);
  }
  const uint32_t version = version_fn();
  if (version != TRAINTL_ABI_VERSION) {
    return Status::FailedPrecondition("library was built for traintl ABI version " +
                                      std::to_string(version) + ", this worker supports " +
                                      std::to_string(TRAINTL_ABI_VERSION) + ": " + shown);
  }

  auto listed = ListExportedFunctions(file, TRAINTL_ENTRY_SYMBOL_PREFIX);
  std::vector<std::string> functions;
  if (listed.ok()) {
    for (const auto& symbol : *listed) functions.push_back(symbol.substr(kPrefixLen));
  }

  TrainingLibrary lib;
  lib.handle = handle;
  if (function.empty()) {
    if (!listed.ok()) {
      return Status::FailedPrecondition("cannot list the entry points of the library (" +
                                        listed.status().message() +
                                        "); name one in entrypoint.function");
    }
    if (functions.empty()) {
      return Status::FailedPrecondition(
          "the library exports no entry point (export one with TRAINTL_ENTRYPOINT): " + shown);
    }
    if (functions.size() > 1) {
      return Status::FailedPrecondition("the library exports several entry points (" +
                                        JoinNames(functions) +
                                        "); name one in entrypoint.function: " + shown);
    }
    lib.function = functions[0];
  } else {
    if (!IsIdentifier(function)) {
      return Status::InvalidArgument("entry point name \"" + function + "\" is not a C identifier");
    }
    lib.function = function;
  }

  const std::string symbol = TRAINTL_ENTRY_SYMBOL_PREFIX + lib.function;
  lib.entry = reinterpret_cast<traintl_entry_fn>(::dlsym(handle, symbol.c_str()));
  if (lib.entry == nullptr) {
    std::string exports = !listed.ok()        ? ""
                          : functions.empty() ? "; it exports none"
                                              : "; it exports: " + JoinNames(functions);
    return Status::NotFound("entry point \"" + lib.function + "\" not found in " + shown +
                            " (no symbol " + symbol + ")" + exports);
  }
  return lib;
}

}  // namespace worker
}  // namespace traintl
