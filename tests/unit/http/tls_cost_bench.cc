// tls_cost_bench: what TLS costs on the API, measured in one run against the same server
// code with and without TLS (docs/SECURITY.md has the figures).
//
//   tls_cost_bench [--requests N] [--upload-mib M] [--uploads K]
//
// Status latency: N sequential GETs of a ~2 KiB JSON job detail, each on a new connection
// as the CLI makes them (so TLS pays its handshake every time), plain and TLS interleaved
// in rounds of 10 so that machine noise hits both alike. Upload throughput: K PUTs of an
// M MiB body whose SHA-256 the handler checks, as the blob upload does (without the disk
// write), again interleaved. Prints medians, p90s and the TLS/plain ratios, and one JSON
// line with everything.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "common/crypto.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "daemon/http/client.h"
#include "daemon/http/responder.h"
#include "daemon/http/router.h"
#include "daemon/http/server.h"
#include "tests/unit/http/test_certs.h"

namespace http = traintl::http;
using Clock = std::chrono::steady_clock;

namespace {

const char kToken[] = "bench-token-0123456789abcdef";

class BenchServer {
 public:
  BenchServer(const std::string& cert, const std::string& key) {
    http::ServerOptions o;
    o.port = 0;
    o.token = kToken;
    o.tls_cert_file = cert;
    o.tls_key_file = key;
    auto router = std::make_shared<http::Router>();
    nlohmann::json detail = {{"job_id", "3f9c2a1b7d4e"}, {"name", "digits-ddp"},
                             {"state", "RUNNING"},       {"attempt", 1},
                             {"num_workers", 2},         {"metrics", {{"loss", 0.25}}}};
    detail["attempts"] = nlohmann::json::array();
    detail["log_tail"] = std::string(1500, 'l');
    std::string body = detail.dump();
    router->Add("GET", "/v1/jobs/{job}",
                [body](const http::Request&, std::shared_ptr<http::Responder> r) {
                  r->Send(200, "application/json", body);
                });
    http::RouteOptions upload;
    upload.max_body_bytes = size_t{1} << 31;
    router->Add(
        "PUT", "/v1/blobs/{sha}",
        [](const http::Request& req, std::shared_ptr<http::Responder> r) {
          if (traintl::Sha256Hex(req.body) != req.params.at("sha")) {
            return r->SendError(400, "digest mismatch");
          }
          r->SendJson(201, {{"size", req.body.size()}});
        },
        upload);
    server_ = std::make_unique<http::Server>(io_, o, router);
    traintl::Status st = server_->Start();
    if (!st.ok()) {
      std::fprintf(stderr, "server: %s\n", st.ToString().c_str());
      std::exit(1);
    }
    port = server_->local_endpoint().port();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~BenchServer() {
    boost::asio::post(io_, [this] { server_->Stop(); });
    io_.stop();
    thread_.join();
  }
  uint16_t port = 0;

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_{
      io_.get_executor()};
  std::unique_ptr<http::Server> server_;
  std::thread thread_;
};

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * (v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  int requests = 400, upload_mib = 64, uploads = 6;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--requests") requests = std::atoi(argv[i + 1]);
    if (a == "--upload-mib") upload_mib = std::atoi(argv[i + 1]);
    if (a == "--uploads") uploads = std::atoi(argv[i + 1]);
  }
  traintl::SetLogLevel(traintl::LogLevel::kError);
  char tmpl[] = "/tmp/traintl-tlsbench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return 1;
  std::string dir = tmpl;
  auto pki = traintl::testing::MakeTestPki(dir);
  if (!pki.ok()) return 1;
  BenchServer plain("", ""), tls(pki->cert, pki->key);
  http::ClientTls client_tls;
  client_tls.ca_file = pki->ca_cert;
  const std::map<std::string, std::string> auth = {
      {"Authorization", std::string("Bearer ") + kToken}};

  auto timed = [&](bool use_tls, const std::string& method, const std::string& target,
                   const std::string& body) {
    auto t0 = Clock::now();
    auto r = http::Fetch("127.0.0.1", use_tls ? tls.port : plain.port, method, target, body, auth,
                         std::chrono::seconds(120), use_tls ? &client_tls : nullptr);
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (!r.ok() || r->status / 100 != 2) {
      std::fprintf(stderr, "request failed: %s\n",
                   r.ok() ? std::to_string(r->status).c_str() : r.status().ToString().c_str());
      std::exit(1);
    }
    return ms;
  };

  // Warm-up: first connections pay for page faults and lazy initialization.
  for (int i = 0; i < 20; i++) {
    timed(false, "GET", "/v1/jobs/3f9c", "");
    timed(true, "GET", "/v1/jobs/3f9c", "");
  }
  std::vector<double> plain_ms, tls_ms;
  for (int done = 0; done < requests; done += 10) {
    for (int i = 0; i < 10; i++) plain_ms.push_back(timed(false, "GET", "/v1/jobs/3f9c", ""));
    for (int i = 0; i < 10; i++) tls_ms.push_back(timed(true, "GET", "/v1/jobs/3f9c", ""));
  }

  std::string blob(static_cast<size_t>(upload_mib) << 20, '\0');
  for (size_t i = 0; i < blob.size(); i++) blob[i] = static_cast<char>((i * 2654435761u) >> 13);
  const std::string target = "/v1/blobs/" + traintl::Sha256Hex(blob);
  timed(false, "PUT", target, blob);
  timed(true, "PUT", target, blob);
  std::vector<double> plain_mbs, tls_mbs;
  const double mib = static_cast<double>(upload_mib);
  for (int i = 0; i < uploads; i++) {
    plain_mbs.push_back(mib / (timed(false, "PUT", target, blob) / 1000.0));
    tls_mbs.push_back(mib / (timed(true, "PUT", target, blob) / 1000.0));
  }

  const double p50_plain = Percentile(plain_ms, 0.5), p50_tls = Percentile(tls_ms, 0.5);
  const double p90_plain = Percentile(plain_ms, 0.9), p90_tls = Percentile(tls_ms, 0.9);
  const double up_plain = Percentile(plain_mbs, 0.5), up_tls = Percentile(tls_mbs, 0.5);
  std::printf("status latency (new connection per request, n=%d each)\n", requests);
  std::printf("  plain: p50 %.3f ms  p90 %.3f ms\n", p50_plain, p90_plain);
  std::printf("  tls  : p50 %.3f ms  p90 %.3f ms\n", p50_tls, p90_tls);
  std::printf("  ratio tls/plain: p50 %.2f  p90 %.2f\n", p50_tls / p50_plain, p90_tls / p90_plain);
  std::printf("upload throughput (%d MiB, SHA-256 checked, n=%d each)\n", upload_mib, uploads);
  std::printf("  plain: median %.1f MiB/s\n  tls  : median %.1f MiB/s\n", up_plain, up_tls);
  std::printf("  ratio tls/plain: %.2f\n", up_tls / up_plain);
  nlohmann::json out = {{"status_p50_ms", {{"plain", p50_plain}, {"tls", p50_tls}}},
                        {"status_p90_ms", {{"plain", p90_plain}, {"tls", p90_tls}}},
                        {"status_p50_ratio", p50_tls / p50_plain},
                        {"upload_mib_s", {{"plain", up_plain}, {"tls", up_tls}}},
                        {"upload_ratio", up_tls / up_plain},
                        {"requests", requests},
                        {"upload_mib", upload_mib},
                        {"uploads", uploads}};
  std::printf("%s\n", out.dump().c_str());
  traintl::RemoveAll(dir).IgnoreError();
  return 0;
}
