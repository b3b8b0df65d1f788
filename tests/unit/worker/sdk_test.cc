// The header-only SDK (traintl/train.h) against a fake host, in-process.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include <traintl/train.h>

namespace {

struct FakeHost {
  std::string context = R"({"world_rank": 1, "world_size": 4, "local_rank": 1,
    "local_world_size": 2, "node_rank": 0, "attempt": 3, "job_id": "j1", "job_name": "n",
    "trial_dir": "/t", "master_addr": "10.0.0.1", "master_port": 29517,
    "collective_timeout_s": 60, "use_gpu": true, "datasets": {"train": {"uri": "file:///d"}},
    "config": {"lr": 0.5}})";
  const char* checkpoint = nullptr;
  int stop = 0;
  bool fail_report = false;
  std::vector<std::pair<std::string, std::string>> reports;
};

const char* GetContext(void* h) { return static_cast<FakeHost*>(h)->context.c_str(); }
int Report(void* h, const char* metrics, const char* ckpt, char* err, size_t len) {
  auto* host = static_cast<FakeHost*>(h);
  if (host->fail_report) {
    std::strncpy(err, "rejected", len);
    return 1;
  }
  host->reports.emplace_back(metrics, ckpt != nullptr ? ckpt : "<none>");
  return 0;
}
const char* GetCheckpoint(void* h) { return static_cast<FakeHost*>(h)->checkpoint; }
int ShouldStop(void* h) { return static_cast<FakeHost*>(h)->stop; }
void Log(void*, int, const char*) {}

traintl_host_api MakeApi(FakeHost* host) {
  traintl_host_api api;
  std::memset(&api, 0, sizeof api);
  api.struct_size = sizeof api;
  api.abi_version = TRAINTL_ABI_VERSION;
  api.host = host;
  api.get_context_json = GetContext;
  api.report = Report;
  api.get_checkpoint = GetCheckpoint;
  api.should_stop = ShouldStop;
  api.log = Log;
  return api;
}

int Run(const traintl_host_api* api, std::string* err, void (*fn)(const nlohmann::json&)) {
  char buf[256];
  std::memset(buf, 'x', sizeof buf);
  int rc = traintl::internal::RunEntry(api, buf, sizeof buf, fn);
  *err = rc == TRAINTL_ENTRY_OK ? "" : buf;
  return rc;
}

}  // namespace

TEST_CASE("the SDK serves the host's context, checkpoint, reports and stop flag") {
  FakeHost host;
  traintl_host_api api = MakeApi(&host);
  std::string err;
  static double lr;
  REQUIRE(Run(&api, &err, [](const nlohmann::json& config) {
            lr = config.at("lr").get<double>();
            auto ctx = traintl::get_context();
            CHECK(ctx.world_rank() == 1);
            CHECK(ctx.world_size() == 4);
            CHECK(ctx.local_rank() == 1);
            CHECK(ctx.local_world_size() == 2);
            CHECK(ctx.node_rank() == 0);
            CHECK(ctx.attempt() == 3);
            CHECK(ctx.job_id() == "j1");
            CHECK(ctx.job_name() == "n");
            CHECK(ctx.trial_dir() == "/t");
            CHECK(ctx.master_addr() == "10.0.0.1");
            CHECK(ctx.master_port() == 29517);
            CHECK(ctx.collective_timeout_s() == 60);
            CHECK(ctx.use_gpu());
            CHECK(ctx.datasets()["train"]["uri"] == "file:///d");
            CHECK_FALSE(traintl::get_checkpoint().has_value());
            CHECK_FALSE(traintl::should_stop());
            traintl::report({{"loss", 0.25}});
            traintl::report({{"loss", 0.125}}, traintl::Checkpoint::from_directory("/ck"));
          }) == TRAINTL_ENTRY_OK);
  CHECK(lr == 0.5);
  REQUIRE(host.reports.size() == 2);
  CHECK(nlohmann::json::parse(host.reports[0].first) == nlohmann::json{{"loss", 0.25}});
  CHECK(host.reports[0].second == "<none>");
  CHECK(host.reports[1].second == "/ck");

  host.checkpoint = "/restore";
  host.stop = 1;
  REQUIRE(Run(&api, &err, [](const nlohmann::json&) {
            auto ckpt = traintl::get_checkpoint();
            REQUIRE(ckpt.has_value());
            CHECK(ckpt->path() == "/restore");
            CHECK(traintl::should_stop());
          }) == TRAINTL_ENTRY_OK);
}

TEST_CASE("exceptions never cross the entry point") {
  FakeHost host;
  traintl_host_api api = MakeApi(&host);
  std::string err;
  CHECK(Run(&api, &err, [](const nlohmann::json&) { throw std::runtime_error("boom"); }) ==
        TRAINTL_ENTRY_FAILED);
  CHECK(err == "boom");
  CHECK(Run(&api, &err, [](const nlohmann::json&) { throw 42; }) == TRAINTL_ENTRY_FAILED);
  CHECK(err == "unknown exception");
  CHECK(Run(&api, &err, [](const nlohmann::json&) { traintl::report(nlohmann::json::array()); }) ==
        TRAINTL_ENTRY_FAILED);
  CHECK(err.find("metrics must be a JSON object") != std::string::npos);
  host.fail_report = true;
  CHECK(Run(&api, &err, [](const nlohmann::json&) {
          traintl::report({{"a", 1}});
        }) == TRAINTL_ENTRY_FAILED);
  CHECK(err == "traintl::report failed: rejected");
  // A message longer than the buffer is truncated, not overrun.
  CHECK(Run(&api, &err, [](const nlohmann::json&) {
          throw std::runtime_error(std::string(1000, 'm'));
        }) == TRAINTL_ENTRY_FAILED);
  CHECK(err == std::string(255, 'm'));
}

TEST_CASE("an incompatible host is refused") {
  FakeHost host;
  traintl_host_api api = MakeApi(&host);
  std::string err;
  auto noop = [](const nlohmann::json&) {};
  api.abi_version = 2;
  CHECK(Run(&api, &err, noop) == TRAINTL_ENTRY_INCOMPATIBLE);
  api.abi_version = TRAINTL_ABI_VERSION;
  api.struct_size = offsetof(traintl_host_api, log);  // a host without the last field
  CHECK(Run(&api, &err, noop) == TRAINTL_ENTRY_INCOMPATIBLE);
  CHECK(Run(nullptr, &err, noop) == TRAINTL_ENTRY_INCOMPATIBLE);
}

TEST_CASE("the SDK outside an entry point throws") {
  traintl::internal::current_host_api = nullptr;
  CHECK_THROWS_AS(traintl::get_context(), std::logic_error);
  CHECK_THROWS_AS(traintl::should_stop(), std::logic_error);
}

TEST_CASE("a host older than the async release: async_upload reports synchronously") {
  FakeHost host;
  traintl_host_api api = MakeApi(&host);
  // The struct as the release before report_async compiled it.
  api.struct_size = offsetof(traintl_host_api, report_async);
  api.report_async = nullptr;
  std::string err;
  REQUIRE(Run(&api, &err, [](const nlohmann::json&) {
            traintl::report({{"loss", 0.5}}, traintl::Checkpoint::from_directory("/ck"),
                            traintl::ReportOptions{.async_upload = true});
            traintl::wait_for_reports();  // nothing to wait for
            CHECK_THROWS_WITH(traintl::report_deferred({{"loss", 0.5}}),
                              Catch::Contains("older than this library"));
          }) == TRAINTL_ENTRY_OK);
  REQUIRE(host.reports.size() == 1);
  CHECK(host.reports[0].second == "/ck");
}

namespace {

struct AsyncHost : FakeHost {
  std::vector<std::string> calls;
};

int ReportAsync(void* h, const char* metrics, const char* ckpt, const char* options, char* err,
                size_t len) {
  static_cast<AsyncHost*>(h)->calls.push_back(std::string("async ") + ckpt);
  return 0;
}
int ReportDeferred(void* h, const char* metrics, const char* options, int64_t* ticket, char* dir,
                   size_t dir_len, char* err, size_t len) {
  static_cast<AsyncHost*>(h)->calls.push_back("deferred");
  *ticket = 7;
  std::strncpy(dir, "/staging/seq_7/rank_0", dir_len);
  return 0;
}
int ReportDeferredDone(void* h, int64_t ticket, const char* error, char* err, size_t len) {
  static_cast<AsyncHost*>(h)->calls.push_back("done " + std::to_string(ticket) + " " +
                                              (error != nullptr ? error : "ok"));
  return 0;
}

}  // namespace

TEST_CASE("async_upload and deferred reports go through the appended host functions") {
  static AsyncHost host;
  traintl_host_api api = MakeApi(&host);
  api.report_async = ReportAsync;
  api.report_deferred = ReportDeferred;
  api.report_deferred_done = ReportDeferredDone;
  std::string err;
  REQUIRE(Run(&api, &err, [](const nlohmann::json&) {
            traintl::report({{"loss", 0.5}}, traintl::Checkpoint::from_directory("/ck"),
                            traintl::ReportOptions{.async_upload = true});
            traintl::report({{"loss", 0.5}}, traintl::Checkpoint::from_directory("/sync"),
                            traintl::ReportOptions{});
            auto pending = traintl::report_deferred({{"loss", 0.25}});
            CHECK(pending.dir() == "/staging/seq_7/rank_0");
            pending.done();
            CHECK_THROWS_AS(pending.done(), std::logic_error);
            {
              auto dropped = traintl::report_deferred({{"loss", 0.125}});
            }  // destroyed without done(): failed
          }) == TRAINTL_ENTRY_OK);
  CHECK(host.calls == std::vector<std::string>{"async /ck", "deferred", "done 7 ok", "deferred",
                                               "done 7 the DeferredCheckpoint was destroyed "
                                               "before done()"});
  REQUIRE(host.reports.size() == 1);
  CHECK(host.reports[0].second == "/sync");
}
