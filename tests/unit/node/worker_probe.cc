// A stand-in for traintl-worker in WorkerPool tests: reports what it was started with to
// its stdout (the rank's log file) as JSON, then behaves as PROBE_MODE says:
//   exit (default)  send {"type":"done","ok":true} and exit 0
//   odd             send malformed and ill-typed messages, then done, and exit 0
//   flood           write to fd 3 without a newline until the agent closes it, exit 0
//   escape          fork A into a process group of its own; A forks B into a session of
//                   its own; both sleep forever; print {"a":A,"b":B} on a line, send
//                   done, and exit 0 (leftovers two levels down)
//   chatty          write 8 MiB of numbered 100-byte lines to stdout, then done, exit 0
//   big-error       send a done whose error is 1 MiB ("x" repeated, "END" last), exit 1
//   reports         send 200 reports (seq 0..199) without waiting for acks, then done, and
//                   exit 0
//   repeat-seq      send reports seq 0, 1 and 0 again, then sleep until killed
//   big-report      send report seq 0 with metrics of 64 KiB + 1 byte as JSON (one
//                   string), then sleep until killed
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

extern char** environ;

namespace {

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (static_cast<unsigned char>(c) < 32) continue;
    out.push_back(c);
  }
  return out + "\"";
}

void Send(const std::string& line) {
  std::string l = line + "\n";
  ssize_t unused = ::write(3, l.data(), l.size());
  (void)unused;
}

}  // namespace

int main(int argc, char** argv) {
  int pdeathsig = -1;
  ::prctl(PR_GET_PDEATHSIG, &pdeathsig);
  gid_t groups[64];
  int n = ::getgroups(64, groups);
  std::string context = argc >= 3 ? argv[2] : "";
  bool context_readable = ::access(context.c_str(), R_OK) == 0;
  char cwd[4096] = {};
  if (::getcwd(cwd, sizeof cwd) == nullptr) cwd[0] = '\0';
  std::string out = "{\"uid\":" + std::to_string(::getuid()) +
                    ",\"euid\":" + std::to_string(::geteuid()) +
                    ",\"gid\":" + std::to_string(::getgid()) +
                    ",\"egid\":" + std::to_string(::getegid()) + ",\"groups\":[";
  for (int i = 0; i < n; i++) out += (i ? "," : "") + std::to_string(groups[i]);
  out += "],\"pgid\":" + std::to_string(::getpgrp()) + ",\"pid\":" + std::to_string(::getpid()) +
         ",\"pdeathsig\":" + std::to_string(pdeathsig) +
         ",\"context_readable\":" + (context_readable ? "true" : "false") +
         ",\"cwd\":" + Quote(cwd) + ",\"env\":{";
  bool first = true;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    out += (first ? "" : ",") + Quote(kv.substr(0, eq)) + ":" + Quote(kv.substr(eq + 1));
    first = false;
  }
  out += "}}\n";
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);

  const char* mode = std::getenv("PROBE_MODE");
  std::string m = mode ? mode : "exit";
  if (m == "odd") {
    Send("not json");
    Send("[1,2]");
    Send("{\"type\":7}");
    Send("{\"type\":\"report\",\"seq\":\"1\"}");
    Send("{\"type\":\"report\",\"seq\":99999999999}");
    Send("{\"type\":\"report\",\"seq\":-4}");
    Send("{\"type\":\"done\",\"ok\":\"yes\",\"error\":7,\"retryable\":\"no\"}");
    Send("{\"type\":\"report\",\"seq\":3,\"metrics\":[1],\"checkpoint\":5}");
    Send("{\"type\":\"future-thing\"}");
    Send("{\"type\":\"done\",\"ok\":true}");
    return 0;
  }
  if (m == "escape") {
    int fds[2];
    if (::pipe(fds) != 0) return 2;
    const pid_t a = ::fork();
    if (a == 0) {
      ::setpgid(0, 0);
      const pid_t b = ::fork();
      if (b == 0) {
        ::setsid();
        for (;;) ::pause();
      }
      ssize_t unused = ::write(fds[1], &b, sizeof b);
      (void)unused;
      for (;;) ::pause();
    }
    pid_t b = -1;
    if (::read(fds[0], &b, sizeof b) != sizeof b) return 2;
    std::printf("{\"a\":%d,\"b\":%d}\n", static_cast<int>(a), static_cast<int>(b));
    std::fflush(stdout);
    Send("{\"type\":\"done\",\"ok\":true}");
    return 0;
  }
  if (m == "chatty") {
    for (int i = 0; i < 8 * 10486; ++i) std::printf("line %08d %88s\n", i, "x");
    std::fflush(stdout);
    Send("{\"type\":\"done\",\"ok\":true}");
    return 0;
  }
  if (m == "big-error") {
    Send("{\"type\":\"done\",\"ok\":false,\"error\":\"" + std::string(1 << 20, 'x') + "END\"}");
    return 1;
  }
  if (m == "repeat-seq") {
    for (int seq : {0, 1, 0})
      Send("{\"type\":\"report\",\"seq\":" + std::to_string(seq) +
           ",\"metrics\":{},\"checkpoint\":null}");
    for (;;) ::pause();
  }
  if (m == "big-report") {
    // {"m":"..."} is 8 bytes of syntax around the string.
    Send("{\"type\":\"report\",\"seq\":0,\"metrics\":{\"m\":\"" + std::string((64 << 10) - 7, 'x') +
         "\"},\"checkpoint\":null}");
    for (;;) ::pause();
  }
  if (m == "reports") {
    for (int seq = 0; seq < 200; ++seq) {
      const std::string r = "{\"type\":\"report\",\"seq\":" + std::to_string(seq) +
                            ",\"metrics\":{},\"checkpoint\":null}";
      Send(r);
    }
    Send("{\"type\":\"done\",\"ok\":true}");
    return 0;
  }
  if (m == "flood") {
    ::signal(SIGPIPE, SIG_IGN);
    std::string block(65536, 'x');
    for (;;) {
      ssize_t w = ::write(3, block.data(), block.size());
      if (w < 0 && errno != EINTR) return 0;  // the agent closed the channel
    }
  }
  Send("{\"type\":\"done\",\"ok\":true}");
  return 0;
}
