// libtraintl_python.so: the entry shim that runs a Python training function inside
// traintl-worker. It is a training library like any user's C++ one (traintl/abi.h): for a
// job whose entrypoint is {"python": "module:function", "working_dir": dir}, the worker
// loads it and calls its entry point `python`, which
//  - starts an embedded CPython (Debian's, so that its dist-packages - numpy, torch - are
//    found), without signal handlers (the worker owns signals) and with unbuffered stdio
//    (the rank's log file is read while the job runs);
//  - puts working_dir and the traintl package (<this library's directory>/python) first on
//    sys.path, enters working_dir, and attaches traintl._native to the worker's host API;
//  - hands over to traintl._entry.run, which imports the module, sets up torch.distributed
//    when the module uses torch, calls the function with train_loop_config and turns the
//    outcome into a TRAINTL_ENTRY_* code and message.
// The interpreter is never finalized: the worker ends with _exit, and threads of the
// training code (torch, data loaders) may still be running then.
//
// Thread-safety: the entry point is called once per process, from one thread.

// First: Python.h sets feature-test macros that the system headers must see.
#include <Python.h>

#include <dlfcn.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "traintl/abi.h"

namespace {

// Set by traintl._entry: 0, TRAINTL_ENTRY_FAILED or TRAINTL_ENTRY_INCOMPATIBLE.
struct Outcome {
  int code;
  std::string message;
  // A traceback's end matters most (the exception); a setup message's start does.
  bool keep_end;
};

Outcome Incompatible(std::string message) {
  return {TRAINTL_ENTRY_INCOMPATIBLE, std::move(message), false};
}

void CopyOut(const Outcome& outcome, char* err, size_t err_len) {
  if (err == nullptr || err_len == 0) return;
  const std::string& m = outcome.message;
  const size_t n = std::min(m.size(), err_len - 1);
  const size_t from = outcome.keep_end ? m.size() - n : 0;
  std::memcpy(err, m.data() + from, n);
  err[n] = '\0';
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// <directory of this library>/python: the traintl package's parent, in the build tree and
// when installed (lib/traintl/libtraintl_python.so, lib/traintl/python/traintl/).
std::string PackageDir() {
  Dl_info info;
  if (::dladdr(reinterpret_cast<void*>(&PackageDir), &info) == 0 || info.dli_fname == nullptr) {
    return "";
  }
  char resolved[PATH_MAX];
  const std::string path =
      ::realpath(info.dli_fname, resolved) != nullptr ? resolved : info.dli_fname;
  return DirName(path) + "/python";
}

// The message of the pending Python exception (clears it); "" when none is set.
std::string FetchPythonError() {
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);
  if (type == nullptr) return "";
  PyErr_NormalizeException(&type, &value, &tb);
  std::string text;
  PyObject* name = PyObject_GetAttrString(type, "__name__");
  if (name != nullptr && PyUnicode_Check(name)) text = PyUnicode_AsUTF8(name);
  Py_XDECREF(name);
  PyObject* str = value != nullptr ? PyObject_Str(value) : nullptr;
  if (str != nullptr && PyUnicode_Check(str)) {
    const char* s = PyUnicode_AsUTF8(str);
    if (s != nullptr && *s != '\0') text += std::string(": ") + s;
  }
  Py_XDECREF(str);
  PyErr_Clear();
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return text.empty() ? "unknown Python error" : text;
}

// Returns "" or why the interpreter could not start.
std::string StartInterpreter(const std::string& module) {
  PyPreConfig pre;
  PyPreConfig_InitPythonConfig(&pre);
  pre.parse_argv = 0;
  // UTF-8 for files and stdio whatever the locale; and the worker's locale (and
  // environment: another thread may read it) stays as it is.
  pre.utf8_mode = 1;
  pre.coerce_c_locale = 0;
  pre.coerce_c_locale_warn = 0;
  pre.configure_locale = 0;
  PyStatus status = Py_PreInitialize(&pre);
  if (PyStatus_Exception(status)) {
    return std::string("Python pre-initialization failed: ") +
           (status.err_msg != nullptr ? status.err_msg : "unknown error");
  }

  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  config.parse_argv = 0;
  config.install_signal_handlers = 0;
  config.buffered_stdio = 0;
  config.configure_c_stdio = 0;  // the worker's C stdio is its own
  std::string failure;
  auto check = [&](PyStatus s, const char* what) {
    if (failure.empty() && PyStatus_Exception(s)) {
      failure = std::string(what) + ": " + (s.err_msg != nullptr ? s.err_msg : "unknown error");
    }
  };
  // The prefix (/usr) is derived from the executable: stdlib and dist-packages are found.
  check(PyConfig_SetBytesString(&config, &config.program_name, TRAINTL_PYTHON_EXECUTABLE),
        "setting the program name");
  check(PyConfig_SetBytesString(&config, &config.executable, TRAINTL_PYTHON_EXECUTABLE),
        "setting the executable");
  char* argv[] = {const_cast<char*>(module.c_str()), nullptr};
  check(PyConfig_SetBytesArgv(&config, 1, argv), "setting sys.argv");
  if (failure.empty()) check(Py_InitializeFromConfig(&config), "starting Python");
  PyConfig_Clear(&config);
  return failure;
}

// Puts `dir` first on sys.path; returns "" or what failed.
std::string PrependToSysPath(const std::string& dir) {
  PyObject* path = PySys_GetObject("path");  // borrowed
  if (path == nullptr || !PyList_Check(path)) return "sys.path is not a list";
  PyObject* entry = PyUnicode_FromString(dir.c_str());
  if (entry == nullptr || PyList_Insert(path, 0, entry) != 0) {
    Py_XDECREF(entry);
    return "extending sys.path: " + FetchPythonError();
  }
  Py_DECREF(entry);
  return "";
}

// Makes sys.path start with working_dir, then the package, and attaches traintl._native
// to `api`. Returns "" or what failed.
std::string PrepareTraintl(const traintl_host_api* api, const std::string& working_dir,
                           const std::string& package_dir) {
  std::string failure = PrependToSysPath(package_dir);
  if (!failure.empty()) return failure;
  // Imported before working_dir joins sys.path: a traintl.py of the user's cannot hide it.
  PyObject* native = PyImport_ImportModule("traintl._native");
  if (native == nullptr) {
    return "cannot load the traintl Python package from " + package_dir + ": " + FetchPythonError();
  }
  PyObject* capsule =
      PyCapsule_New(const_cast<traintl_host_api*>(api), "traintl_host_api", nullptr);
  PyObject* result =
      capsule != nullptr ? PyObject_CallMethod(native, "_attach", "O", capsule) : nullptr;
  if (result == nullptr) failure = "attaching traintl._native to the worker: " + FetchPythonError();
  Py_XDECREF(result);
  Py_XDECREF(capsule);
  Py_DECREF(native);
  if (failure.empty()) {
    PyObject* train = PyImport_ImportModule("traintl.train");
    if (train == nullptr) failure = "cannot load traintl.train: " + FetchPythonError();
    Py_XDECREF(train);
  }
  if (failure.empty() && !working_dir.empty()) failure = PrependToSysPath(working_dir);
  return failure;
}

// Calls traintl._entry.run(module, function, working_dir) -> (code, message, keep_end).
Outcome RunEntry(const std::string& module, const std::string& function,
                 const std::string& working_dir) {
  PyObject* entry = PyImport_ImportModule("traintl._entry");
  if (entry == nullptr) {
    return Incompatible("cannot load traintl._entry: " + FetchPythonError());
  }
  PyObject* result = PyObject_CallMethod(entry, "run", "sss", module.c_str(), function.c_str(),
                                         working_dir.c_str());
  Py_DECREF(entry);
  if (result == nullptr) {
    // run() catches everything; only a bug of traintl's own lands here.
    return {TRAINTL_ENTRY_FAILED, "traintl._entry.run failed: " + FetchPythonError(), true};
  }
  Outcome outcome{TRAINTL_ENTRY_FAILED, "traintl._entry.run returned an unexpected value", false};
  int code = 0;
  const char* message = nullptr;
  int keep_end = 0;
  if (PyArg_ParseTuple(result, "isp", &code, &message, &keep_end)) {
    outcome = {code, message != nullptr ? message : "", keep_end != 0};
  } else {
    outcome.message += ": " + FetchPythonError();
  }
  Py_DECREF(result);
  return outcome;
}

// The worker _exits after the entry point returns: nothing may stay in a buffer.
void FlushStdio() {
  if (Py_IsInitialized()) {
    PyObject* type = nullptr;
    PyObject* value = nullptr;
    PyObject* tb = nullptr;
    PyErr_Fetch(&type, &value, &tb);
    for (const char* name : {"stdout", "stderr"}) {
      PyObject* stream = PySys_GetObject(name);  // borrowed
      if (stream == nullptr || stream == Py_None) continue;
      PyObject* r = PyObject_CallMethod(stream, "flush", nullptr);
      if (r == nullptr) PyErr_Clear();
      Py_XDECREF(r);
    }
    PyErr_Restore(type, value, tb);
  }
  std::fflush(stdout);
  std::fflush(stderr);
}

// Set by traintl_python_prewarm: the interpreter was started before this process knew
// its rank (a warm worker), with the environment it had then.
bool g_prewarmed = false;

// os.environ is a copy taken when Python started: a warm worker's environment changed
// since. Fills it from the C environment again, in place (modules hold the object), without
// putenv (the C environment is right already). Returns "" or what failed.
std::string RefreshEnviron(const std::string& argv0) {
  PyObject* os = PyImport_ImportModule("os");
  PyObject* environ_obj = os != nullptr ? PyObject_GetAttrString(os, "environ") : nullptr;
  PyObject* data = environ_obj != nullptr ? PyObject_GetAttrString(environ_obj, "_data") : nullptr;
  std::string failure;
  if (data == nullptr || !PyDict_Check(data)) {
    failure = "os.environ has no _data dict";
  } else {
    PyDict_Clear(data);
    for (char** e = environ; *e != nullptr && failure.empty(); ++e) {
      const char* eq = std::strchr(*e, '=');
      if (eq == nullptr) continue;
      // os.environ on POSIX keeps bytes: the encoded forms of the names and values.
      PyObject* k = PyBytes_FromStringAndSize(*e, eq - *e);
      PyObject* v = PyBytes_FromString(eq + 1);
      if (k == nullptr || v == nullptr || PyDict_SetItem(data, k, v) != 0)
        failure = "filling os.environ: " + FetchPythonError();
      Py_XDECREF(k);
      Py_XDECREF(v);
    }
  }
  if (failure.empty()) {
    PyObject* argv = PySys_GetObject("argv");  // borrowed
    PyObject* first = PyUnicode_DecodeFSDefault(argv0.c_str());
    if (argv != nullptr && PyList_Check(argv) && PyList_Size(argv) > 0 && first != nullptr) {
      PyList_SetItem(argv, 0, first);  // steals `first`
    } else {
      Py_XDECREF(first);
    }
  }
  Py_XDECREF(data);
  Py_XDECREF(environ_obj);
  Py_XDECREF(os);
  return failure;
}

Outcome Run(const traintl_host_api* api) {
  if (api == nullptr || api->abi_version != TRAINTL_ABI_VERSION ||
      !TRAINTL_HOST_API_HAS(api, log)) {
    return Incompatible("traintl: the worker's host API is incompatible with libtraintl_python");
  }
  const char* context_text = api->get_context_json(api->host);
  nlohmann::json context =
      nlohmann::json::parse(context_text != nullptr ? context_text : "", nullptr, false);
  if (!context.is_object()) return Incompatible("the worker's context is not a JSON object");
  auto python = context.find("python");
  if (python == context.end() || !python->is_string()) {
    return Incompatible("the context has no \"python\" entry point (\"module:function\")");
  }
  const std::string spec = python->get<std::string>();
  const size_t colon = spec.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == spec.size()) {
    return Incompatible("entrypoint.python must be \"module:function\", not \"" + spec + "\"");
  }
  const std::string module = spec.substr(0, colon);
  const std::string function = spec.substr(colon + 1);
  std::string working_dir;
  auto wd = context.find("working_dir");
  if (wd != context.end() && wd->is_string()) working_dir = wd->get<std::string>();

  // Extension modules (numpy, torch._C) resolve CPython's symbols globally; this library
  // was loaded RTLD_LOCAL, and libpython with it.
  if (::dlopen(TRAINTL_LIBPYTHON_SONAME, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL) == nullptr) {
    const char* e = ::dlerror();
    return Incompatible(std::string("cannot make ") + TRAINTL_LIBPYTHON_SONAME +
                        " global: " + (e != nullptr ? e : "unknown error"));
  }
  const std::string package_dir = PackageDir();
  if (package_dir.empty()) return Incompatible("cannot find libtraintl_python's own path");
  // Ray Train runs the function in its working_dir.
  if (!working_dir.empty() && ::chdir(working_dir.c_str()) != 0) {
    return Incompatible("cannot enter working_dir " + working_dir + ": " + std::strerror(errno));
  }
  // Python ignores SIGPIPE, and Python code expects it (a closed socket raises
  // BrokenPipeError rather than killing the rank); the worker's own writes use
  // MSG_NOSIGNAL, so this changes nothing for it.
  ::signal(SIGPIPE, SIG_IGN);

  PyGILState_STATE gil{};
  const bool started_here = !Py_IsInitialized();
  if (started_here) {
    std::string failure = StartInterpreter(module);
    if (!failure.empty()) return Incompatible(failure);
  } else {
    gil = PyGILState_Ensure();
  }
  Outcome outcome{TRAINTL_ENTRY_OK, "", false};
  std::string failure = g_prewarmed ? RefreshEnviron(module) : "";
  if (failure.empty()) failure = PrepareTraintl(api, working_dir, package_dir);
  if (!failure.empty()) {
    outcome = Incompatible(failure);
  } else {
    outcome = RunEntry(module, function, working_dir);
  }
  FlushStdio();
  // The GIL stays with this thread when it started the interpreter: the process ends
  // without returning to Python.
  if (!started_here) PyGILState_Release(gil);
  return outcome;
}

}  // namespace

// For a warm worker (worker/warm_start.h): starts the interpreter and imports `modules`
// (comma-separated; one that is not installed is skipped, a failing import reported),
// then releases the GIL for the entry point to take. 0, or 1 with `err` filled.
extern "C" __attribute__((visibility("default"))) int traintl_python_prewarm(const char* modules,
                                                                             char* err,
                                                                             size_t err_len) {
  std::string failure;
  if (Py_IsInitialized()) return 0;
  if (::dlopen(TRAINTL_LIBPYTHON_SONAME, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL) == nullptr) {
    const char* e = ::dlerror();
    failure = std::string("cannot make ") + TRAINTL_LIBPYTHON_SONAME +
              " global: " + (e != nullptr ? e : "unknown error");
  }
  if (failure.empty()) failure = StartInterpreter("python");
  if (failure.empty()) {
    g_prewarmed = true;
    const std::string list = modules != nullptr ? modules : "";
    size_t start = 0;
    while (start <= list.size()) {
      const size_t comma = std::min(list.find(',', start), list.size());
      const std::string name = list.substr(start, comma - start);
      start = comma + 1;
      if (name.empty()) continue;
      PyObject* m = PyImport_ImportModule(name.c_str());
      if (m != nullptr) {
        Py_DECREF(m);
      } else if (PyErr_ExceptionMatches(PyExc_ModuleNotFoundError)) {
        PyErr_Clear();
      } else {
        failure += (failure.empty() ? "" : "; ") + std::string("import ") + name + ": " +
                   FetchPythonError();
      }
    }
    PyEval_SaveThread();  // the GIL, for PyGILState_Ensure in the entry point
  }
  if (failure.empty()) return 0;
  if (err != nullptr && err_len > 0) {
    const size_t n = std::min(failure.size(), err_len - 1);
    std::memcpy(err, failure.data(), n);
    err[n] = '\0';
  }
  return 1;
}

extern "C" __attribute__((visibility("default"))) uint32_t traintl_abi_version(void) {
  return TRAINTL_ABI_VERSION;
}

extern "C" __attribute__((visibility("default"))) int traintl_entry_python(
    const traintl_host_api* api, char* err, size_t err_len) {
  Outcome outcome{TRAINTL_ENTRY_FAILED, "", false};
  try {
    outcome = Run(api);
  } catch (const std::exception& e) {
    outcome = {TRAINTL_ENTRY_FAILED, std::string("libtraintl_python: ") + e.what(), false};
  } catch (...) {
    outcome = {TRAINTL_ENTRY_FAILED, "libtraintl_python: unknown exception", false};
  }
  if (outcome.code != TRAINTL_ENTRY_OK) {
    if (outcome.message.empty()) outcome.message = "the Python entry point failed";
    CopyOut(outcome, err, err_len);
  } else if (err != nullptr && err_len > 0) {
    err[0] = '\0';
  }
  return outcome.code;
}
