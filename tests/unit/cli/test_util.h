// Shared helpers for the cli tests: a context over string streams and a fake clock, and
// temporary directories.
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <ctime>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "cli/context.h"
#include "common/file_util.h"

namespace traintl {
namespace cli {
namespace testing {

// 2024-01-02 03:04:05 UTC.
constexpr int64_t kT0 = 1704164645000;

struct TestContext {
  std::ostringstream out;
  std::ostringstream err;
  int64_t now = kT0;
  int64_t slept_ms = 0;
  CliContext ctx;

  explicit TestContext(HttpClient* client) {
    // Times in expected output are written in UTC.
    setenv("TZ", "UTC", 1);
    tzset();
    ctx.client = client;
    ctx.connection.address = "127.0.0.1:7450";
    ctx.connection.host = "127.0.0.1";
    ctx.connection.token = "tok";
    ctx.connection.token_source = "/data/token";
    ctx.connection.token_path = "/data/token";
    ctx.out = &out;
    ctx.err = &err;
    ctx.now_ms = [this] { return now; };
    ctx.sleep_ms = [this](int64_t ms) {
      now += ms;
      slept_ms += ms;
    };
  }
};

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/traintl-cli-test-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() { RemoveAll(path_).IgnoreError(); }
  const std::string& path() const { return path_; }
  std::string Write(const std::string& name, const std::string& content) const {
    std::string p = JoinPath(path_, name);
    REQUIRE(MakeDirs(DirName(p)).ok());
    REQUIRE(WriteFileAtomic(p, content, 0600).ok());
    return p;
  }

 private:
  std::string path_;
};

}  // namespace testing
}  // namespace cli
}  // namespace traintl
