#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "common/logging.h"

namespace {

// What `log` writes to stderr (fd 2), captured through a temp file.
template <typename F>
std::string CaptureStderr(F log) {
  char path[] = "/tmp/traintl-logging-test-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  const int saved = ::dup(STDERR_FILENO);
  REQUIRE(::dup2(fd, STDERR_FILENO) == STDERR_FILENO);
  log();
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  std::string out;
  char buf[4096];
  ::lseek(fd, 0, SEEK_SET);
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  ::unlink(path);
  return out;
}

}  // namespace

TEST_CASE("a log line quoting a job cannot forge or hide lines") {
  const std::string out = CaptureStderr(
      [] { LOG_WARN << "job failed: x\r2026-12-05T00:00:00.000Z I job SUCCEEDED\x1b[K\nnext"; });
  REQUIRE(!out.empty());
  CHECK(out.find('\r') == std::string::npos);
  CHECK(out.find('\x1b') == std::string::npos);
  CHECK(out.find("x\\x0d2026-12-05T00:00:00.000Z I job SUCCEEDED\\x1b[K next\n") !=
        std::string::npos);
  CHECK(out.find('\n') == out.size() - 1);  // one event, one line
}
