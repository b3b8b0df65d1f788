#include "cli/working_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/format.h"
#include "common/code_archive.h"
#include "common/file_util.h"

namespace traintl {
namespace cli {

const char kPythonCheckScript[] = R"PY(
import ast, sys
path, fn = sys.argv[1], sys.argv[2]
try:
    tree = ast.parse(open(path, "rb").read(), path)
except SyntaxError as e:
    print("SyntaxError: %s (%s, line %s)" % (e.msg, e.filename, e.lineno))
    sys.exit(1)
names = set()
for node in ast.walk(tree):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        names.add(node.name)
    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
        names.add(node.id)
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        for a in node.names:
            names.add((a.asname or a.name).split(".")[0])
sys.exit(0 if fn in names or "*" in names else 2)
)PY";

namespace {

// Debian's interpreter, the one the workers run; the check is skipped without it.
constexpr char kPython[] = "/usr/bin/python3";

// Runs argv, returns its exit status (-1 when it could not run) and its stdout.
int RunCapture(const std::vector<std::string>& argv, std::string* out) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return -1;
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) ::dup2(null, STDERR_FILENO);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (out->size() < 64 * 1024) out->append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The module's file in `dir` ("a.b" -> a/b.py or a/b/__init__.py), "" when neither exists.
std::string ModuleFile(const std::string& dir, const std::string& module, std::string* tried) {
  std::string rel = module;
  for (char& c : rel)
    if (c == '.') c = '/';
  *tried = rel + ".py or " + rel + "/__init__.py";
  for (const std::string& candidate : {rel + ".py", rel + "/__init__.py"}) {
    if (IsFile(JoinPath(dir, candidate))) return JoinPath(dir, candidate);
  }
  return "";
}

// entrypoint.python against the working_dir; prints and returns false when it cannot work.
bool CheckPythonEntry(const JobSpec& spec, const std::string& dir, CliContext& ctx) {
  const std::string module = spec.python.substr(0, spec.python.find(':'));
  const std::string function = spec.python.substr(spec.python.find(':') + 1);
  std::string tried;
  std::string file = ModuleFile(dir, module, &tried);
  if (file.empty()) {
    *ctx.err << "traintl: invalid job spec: entrypoint.python: no module " << module
             << " in the working_dir " << spec.working_dir << " (looked for " << tried << ")\n";
    return false;
  }
  if (::access(kPython, X_OK) != 0) return true;
  std::string out;
  int rc = RunCapture({kPython, "-c", kPythonCheckScript, file, function}, &out);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  if (rc == 1) {
    *ctx.err << "traintl: invalid job spec: entrypoint.python: " << module
             << " does not compile: " << out << "\n";
    return false;
  }
  if (rc == 2) {
    *ctx.err << "traintl: invalid job spec: entrypoint.python: module " << module << " defines no "
             << function << " (" << file << ")\n";
    return false;
  }
  return true;
}

// A script named on the command line ("python3 train.py", "./run.sh") must be in the
// working_dir; a bare program name is looked up in the node's PATH, unknown here.
bool CheckCommand(const JobSpec& spec, const std::string& dir, CliContext& ctx) {
  const std::string& prog = spec.command[0];
  std::string script;
  std::string field = "entrypoint.command[0]";
  if (prog.find('/') != std::string::npos && prog[0] != '/') {
    script = prog;
  } else {
    std::string base = prog.substr(prog.rfind('/') + 1);
    if (base.rfind("python", 0) == 0 && spec.command.size() > 1) {
      const std::string& arg = spec.command[1];
      if (arg.size() > 3 && arg.compare(arg.size() - 3, 3, ".py") == 0 && arg[0] != '/' &&
          arg[0] != '-') {
        script = arg;
        field = "entrypoint.command[1]";
      }
    }
  }
  if (script.empty() || PathExists(JoinPath(dir, script))) return true;
  *ctx.err << "traintl: invalid job spec: " << field << ": " << script
           << " is not in the working_dir " << spec.working_dir << " (the command runs there)\n";
  return false;
}

}  // namespace

bool PackWorkingDir(const JobSpec& spec, const std::string& spec_path, CliContext& ctx,
                    PackedWorkingDir* out, int* exit_code) {
  *exit_code = kExitUsage;
  const std::string& dir = spec.working_dir;
  if (!IsDirectory(dir)) {
    *ctx.err << "traintl: invalid job spec: entrypoint.working_dir: " << dir
             << (PathExists(dir) ? " is not a directory" : ": no such directory")
             << " (resolved as " << AbsolutePath(dir) << ")\n";
    if (dir[0] != '/') {
      *ctx.err << "  A relative working_dir is resolved against the current directory.";
      std::string beside_spec = JoinPath(DirName(spec_path), dir);
      if (DirName(spec_path) != "." && IsDirectory(beside_spec)) {
        *ctx.err << " Did you mean " << beside_spec << "?";
      }
      *ctx.err << "\n";
    }
    return false;
  }
  if (spec.entry_kind == EntrypointKind::kPython && !CheckPythonEntry(spec, dir, ctx)) return false;
  if (spec.entry_kind == EntrypointKind::kCommand && !CheckCommand(spec, dir, ctx)) return false;
  PackOptions options;
  options.excludes = spec.excludes;
  auto packed = PackDirectory(dir, options);
  if (!packed.ok()) {
    *ctx.err << "traintl: cannot pack entrypoint.working_dir " << dir << ": "
             << packed.status().message() << "\n";
    return false;
  }
  out->bytes = std::move(packed->bytes);
  out->sha256 = std::move(packed->sha256);
  out->files = packed->files;
  return true;
}

}  // namespace cli
}  // namespace traintl
