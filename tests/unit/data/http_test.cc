// Datasets over http:// from a local server on 127.0.0.1: whole files, split shards with
// Range requests (honoured or ignored by the server), chunked bodies, missing files.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "data_test_util.h"
#include "worker/data/dataset_service.h"
#include "worker/data/http_client.h"

using namespace traintl::data;
using namespace traintl::data::testing;
namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace ssl = net::ssl;

namespace {

// A self-signed certificate for IP 127.0.0.1 (valid until 2126) and its key, made with
//   openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 36500
//     -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1
constexpr char kTestCert[] =
    "-----BEGIN CERTIFICATE-----\n"
    "MIIBjzCCATagAwIBAgIUN8fubo7k8+gJsTGRAYQqclBNLj0wCgYIKoZIzj0EAwIw\n"
    "FDESMBAGA1UEAwwJMTI3LjAuMC4xMCAXDTI2MTEyOTE4NTcwNloYDzIxMjYxMTA1\n"
    "MTg1NzA2WjAUMRIwEAYDVQQDDAkxMjcuMC4wLjEwWTATBgcqhkjOPQIBBggqhkjO\n"
    "PQMBBwNCAASRZRuZORay4PVeevLLNmtghjIICAOoJ6NeTCxxSMdyw+zBxuLbr8ez\n"
    "wWtImbV0SFsRHgaXTg40mVY5gcgA5x5Jo2QwYjAdBgNVHQ4EFgQUNZSGr1t7L4UV\n"
    "B9GwVRbskeJrmMAwHwYDVR0jBBgwFoAUNZSGr1t7L4UVB9GwVRbskeJrmMAwDwYD\n"
    "VR0TAQH/BAUwAwEB/zAPBgNVHREECDAGhwR/AAABMAoGCCqGSM49BAMCA0cAMEQC\n"
    "IFrpG49u7KI9OnFyUgSYBY9LUripdyvVU4Y1rmTxK2agAiBpLV0VUBF1cVI6Pjku\n"
    "aALtB8gP8KZ7XUKUSw7Q70uZGA==\n"
    "-----END CERTIFICATE-----\n";
constexpr char kTestKey[] =
    "-----BEGIN PRIVATE KEY-----\n"
    "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgqlLJpH2MStVwuaAJ\n"
    "vGw3bKFM8QYyTKvrFBkvtBYIg9ehRANCAASRZRuZORay4PVeevLLNmtghjIICAOo\n"
    "J6NeTCxxSMdyw+zBxuLbr8ezwWtImbV0SFsRHgaXTg40mVY5gcgA5x5J\n"
    "-----END PRIVATE KEY-----\n";

// Serves the files of a directory, one request per connection.
class TestHttpServer {
 public:
  struct Options {
    bool ranges = true;    // honour Range (206); otherwise answer 200 with everything
    bool chunked = false;  // chunked transfer encoding instead of Content-Length
    bool tls = false;      // https with kTestCert
    std::string etag;      // "strong": an ETag of the file's bytes; "weak": W/ one; "": none
    size_t range_cap = 0;  // > 0: a 206 holds at most this many bytes (a capped range)
    bool etag_per_request = false;  // a new strong ETag on every answer (a changing file)
    bool refuse_ranges = false;     // 416 to every Range request, wherever it starts
    bool bare_416 = false;          // a 416 without Content-Range (the size it SHOULD say)
  };
  TestHttpServer(std::string root, Options options)
      : root_(std::move(root)),
        options_(options),
        acceptor_(ioc_, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0)),
        tls_(ssl::context::tls_server) {
    port_ = acceptor_.local_endpoint().port();
    if (options_.tls) {
      tls_.use_certificate_chain(net::buffer(kTestCert, sizeof kTestCert - 1));
      tls_.use_private_key(net::buffer(kTestKey, sizeof kTestKey - 1), ssl::context::pem);
    }
    thread_ = std::thread([this] { Run(); });
  }
  ~TestHttpServer() {
    stop_ = true;
    beast::error_code ec;
    tcp::socket s(ioc_);
    s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port_), ec);  // wakes accept
    thread_.join();
  }
  int port() const { return port_; }
  std::string url(const std::string& path) const {
    return std::string(options_.tls ? "https" : "http") + "://127.0.0.1:" + std::to_string(port_) +
           "/" + path;
  }
  std::vector<std::string> ranges() {
    std::lock_guard<std::mutex> lock(mu_);
    return ranges_;
  }

 private:
  void Run() {
    while (!stop_) {
      tcp::socket socket(ioc_);
      beast::error_code ec;
      acceptor_.accept(socket, ec);
      if (ec || stop_) continue;
      if (options_.tls) {
        beast::ssl_stream<tcp::socket&> stream(socket, tls_);
        stream.handshake(ssl::stream_base::server, ec);
        if (!ec) Serve(stream);
      } else {
        Serve(socket);
      }
    }
  }

  template <typename Stream>
  void Serve(Stream& socket) {
    beast::error_code ec;
    beast::flat_buffer buffer;
    http::request<http::string_body> req;
    http::read(socket, buffer, req, ec);
    if (ec) return;
    std::string target(req.target());
    auto text = traintl::ReadFile(root_ + target);
    http::response<http::string_body> res;
    res.version(11);
    res.set(http::field::connection, "close");
    if (!text.ok()) {
      res.result(http::status::not_found);
      res.body() = "not found";
    } else {
      std::string body = *text;
      if (!options_.etag.empty()) {
        const std::string tag = "\"" + std::to_string(std::hash<std::string>{}(body)) + "\"";
        res.set(http::field::etag, options_.etag == "weak" ? "W/" + tag : tag);
      }
      if (options_.etag_per_request) {
        res.set(http::field::etag, "\"v" + std::to_string(++answers_) + "\"");
      }
      auto range = req.find(http::field::range);
      if (range != req.end()) {
        std::lock_guard<std::mutex> lock(mu_);
        ranges_.emplace_back(range->value());
      }
      if (range != req.end() && options_.ranges) {
        // "bytes=N-" only: what the client sends.
        const std::string v(range->value());
        const uint64_t from = std::stoull(v.substr(6, v.find('-') - 6));
        const uint64_t size = body.size();
        if (from >= size || options_.refuse_ranges) {
          res.result(http::status::range_not_satisfiable);
          if (!options_.bare_416) {
            res.set(http::field::content_range, "bytes */" + std::to_string(size));
          }
          body.clear();
        } else {
          res.result(http::status::partial_content);
          const uint64_t end =
              options_.range_cap > 0 ? std::min<uint64_t>(size, from + options_.range_cap) : size;
          res.set(http::field::content_range, "bytes " + std::to_string(from) + "-" +
                                                  std::to_string(end - 1) + "/" +
                                                  std::to_string(size));
          body = body.substr(from, end - from);
        }
      } else {
        res.result(http::status::ok);
      }
      if (options_.ranges) res.set(http::field::accept_ranges, "bytes");
      res.body() = std::move(body);
    }
    if (options_.chunked) {
      res.chunked(true);
    } else {
      res.prepare_payload();
    }
    http::write(socket, res, ec);
    beast::get_lowest_layer(socket).shutdown(tcp::socket::shutdown_both, ec);
  }

  const std::string root_;
  const Options options_;
  net::io_context ioc_;
  tcp::acceptor acceptor_;
  ssl::context tls_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> ranges_;
  int answers_ = 0;  // etag_per_request's counter (the server's thread only)
};

net::io_context& ioc_for_port() {
  static net::io_context ioc;
  return ioc;
}

traintl::Result<std::string> ReadToEnd(HttpBodyReader& r) {
  std::string out;
  char buf[4096];
  for (;;) {
    auto n = r.Read(buf, sizeof buf);
    if (!n.ok()) return n.status();
    if (*n == 0) return out;
    out.append(buf, *n);
  }
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// 3 ranks split a CSV of ids 0..3000 at `url`: 1001 rows each, every row read (rows 0
// and 1 again as the last rank's padding).
void CheckThreeRanksReadAll(const std::string& url, const ShardOptions& so) {
  std::vector<int64_t> all;
  for (int rank = 0; rank < 3; ++rank) {
    IterOptions o;
    o.batch_size = 64;
    Epoch e = ReadEpoch(OpenDataset(url, rank, 3, true, so), o);
    INFO(e.status.message());
    REQUIRE(e.status.ok());
    CHECK(e.ids.size() == 1001);
    all.insert(all.end(), e.ids.begin(), e.ids.end());
  }
  std::sort(all.begin(), all.end());
  CHECK(all.size() == 3003);
  all.erase(std::unique(all.begin(), all.end()), all.end());
  CHECK(all == Iota(3001));
}

}  // namespace

TEST_CASE("http: a whole CSV file, with and without ranges, chunked or not") {
  TempDir dir;
  WriteIdCsv(dir / "train.csv", 0, 5000);  // ~90 KiB: several blocks
  for (bool ranges : {true, false}) {
    for (bool chunked : {false, true}) {
      INFO("ranges " << ranges << " chunked " << chunked);
      TestHttpServer server(dir.path(), {ranges, chunked, false, ""});
      auto ds = OpenDataset(server.url("train.csv"), 0, 1, true);
      CHECK(ds->files()[0].file.http);
      IterOptions o;
      o.batch_size = 100;
      o.block_bytes = 8192;
      Epoch e = ReadEpoch(ds, o);
      INFO(e.status.message());
      REQUIRE(e.status.ok());
      CHECK(e.ids == Iota(5000));
    }
  }
}

TEST_CASE("http: split shards seek with Range requests, or skip when the server ignores them") {
  TempDir dir;
  WriteIdCsv(dir / "train.csv", 0, 3001);
  for (bool ranges : {true, false}) {
    INFO("ranges " << ranges);
    TestHttpServer server(dir.path(), {ranges, false, false, ""});
    ShardOptions so;
    so.chunk_bytes = 4096;
    // 3 x 1001 rows: every row, and rows 0 and 1 again as the last rank's padding.
    CheckThreeRanksReadAll(server.url("train.csv"), so);
    // Ranks 1 and 2 asked for their part of the file only.
    const auto seen = server.ranges();
    CHECK(std::count_if(seen.begin(), seen.end(),
                        [](const std::string& r) { return r != "bytes=0-"; }) >= 2);
  }
}

TEST_CASE("http: a server that caps its ranges is read on, range by range") {
  TempDir dir;
  WriteIdCsv(dir / "train.csv", 0, 3001);
  TestHttpServer::Options capped;
  capped.range_cap = 1000;
  TestHttpServer server(dir.path(), capped);
  CheckThreeRanksReadAll(server.url("train.csv"), ShardOptions{});
  CHECK(server.ranges().size() > 30);  // ~50 KB in ranges of 1000 bytes

  // The bytes themselves, from an offset: every range continues where the last ended.
  const std::string text = *traintl::ReadFile(dir / "train.csv");
  auto r = HttpBodyReader::Open(server.url("train.csv"), 7, HttpOptions{});
  REQUIRE(r.ok());
  auto got = ReadToEnd(**r);
  REQUIRE(got.ok());
  CHECK(*got == text.substr(7));
}

TEST_CASE("http: a file that changes between ranges, or a 416 inside it, is an error") {
  TempDir dir;
  Write(dir / "f.csv", std::string(5000, 'a'));
  SECTION("a new ETag on the next range: FailedPrecondition") {
    TestHttpServer::Options o;
    o.range_cap = 1000;
    o.etag_per_request = true;
    TestHttpServer server(dir.path(), o);
    auto r = HttpBodyReader::Open(server.url("f.csv"), 10, HttpOptions{});
    REQUIRE(r.ok());
    auto n = ReadToEnd(**r);
    REQUIRE_FALSE(n.ok());
    CHECK(n.status().code() == traintl::Status::Code::kFailedPrecondition);
    CHECK_THAT(n.status().message(),
               Catch::Contains(server.url("f.csv")) && Catch::Contains("changed on the server"));
  }
  SECTION("416 for bytes the file has: InvalidArgument, not an empty read") {
    TestHttpServer::Options o;
    o.refuse_ranges = true;
    TestHttpServer server(dir.path(), o);
    auto r = HttpBodyReader::Open(server.url("f.csv"), 10, HttpOptions{});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == traintl::Status::Code::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains("which are within the file"));
    // At the end, 416 is the end.
    auto end = HttpBodyReader::Open(server.url("f.csv"), 5000, HttpOptions{});
    REQUIRE(end.ok());
    char c;
    CHECK(*(*end)->Read(&c, 1) == 0);
  }
  SECTION("416 without the file's size: taken as the end, as before") {
    TestHttpServer::Options o;
    o.refuse_ranges = true;
    o.bare_416 = true;
    TestHttpServer server(dir.path(), o);
    auto end = HttpBodyReader::Open(server.url("f.csv"), 5000, HttpOptions{});
    REQUIRE(end.ok());
    char c;
    CHECK(*(*end)->Read(&c, 1) == 0);
  }
}

TEST_CASE("http: a file replaced on the server between the requests of one read is an error") {
  TempDir dir;
  WriteIdCsv(dir / "train.csv", 0, 3001);
  // Every answer a new ETag: the second request of a read (rank 1's segment after the row
  // count; Parquet's chunks after its footer) meets another version of the file.
  TestHttpServer::Options changing;
  changing.etag_per_request = true;
  TestHttpServer server(dir.path(), changing);
  ShardOptions so;
  so.chunk_bytes = 4096;
  DatasetConfig c;
  c.name = "test";
  c.uri = server.url("train.csv");
  c.rank = 1;
  c.world_size = 2;
  IterOptions o;
  o.batch_size = 64;
  auto ds = Dataset::Open(c, so);  // its row count may already be the second request
  const traintl::Status st = ds.ok() ? ReadEpoch(*ds, o).status : ds.status();
  REQUIRE_FALSE(st.ok());
  CHECK(st.code() == traintl::Status::Code::kFailedPrecondition);
  CHECK_THAT(st.message(),
             Catch::StartsWith(server.url("train.csv") +
                               ": the file changed on the server while the job read it (first ") &&
                 Catch::Contains(" bytes etag:\"v"));
  // The same file with a stable ETag reads as ever.
  TestHttpServer::Options stable;
  stable.etag = "strong";
  TestHttpServer same(dir.path(), stable);
  Epoch ok = ReadEpoch(OpenDataset(same.url("train.csv"), 1, 2, true, so), o);
  INFO(ok.status.message());
  REQUIRE(ok.status.ok());
  CHECK(ok.ids.size() == 1501);
}

TEST_CASE("http: a server that ignores Range is skipped through only so far") {
  TempDir dir;
  WriteIdCsv(dir / "train.csv", 0, 3001);
  TestHttpServer server(dir.path(), {false, false, false, ""});
  ShardOptions so;
  so.chunk_bytes = 4096;             // an index chunk per 4 KiB: segments start mid-file
  so.http.max_skipped_bytes = 1000;  // the file has ~50 KB: rank 2's segment is past it
  DatasetConfig c;
  c.name = "test";
  c.uri = server.url("train.csv");
  c.rank = 2;
  c.world_size = 3;
  auto ds = Dataset::Open(c, so);
  IterOptions o;
  o.batch_size = 64;
  const traintl::Status st = ds.ok() ? ReadEpoch(*ds, o).status : ds.status();
  REQUIRE_FALSE(st.ok());
  CHECK(st.code() == traintl::Status::Code::kInvalidArgument);
  CHECK_THAT(st.message(), Catch::Contains("the server ignores Range requests, and reading from "
                                           "byte "));
}

TEST_CASE("http: split ranks share the row index when the server sends a strong ETag") {
  TempDir dir;
  WriteIdCsv(dir / "train.csv", 0, 3001);
  for (const std::string etag : {"strong", "weak", ""}) {
    INFO("etag " << etag);
    TestHttpServer server(dir.path(), {true, false, false, etag});
    ShardOptions so;
    so.chunk_bytes = 4096;
    so.index_dir = dir / ("idx-" + etag);
    std::vector<int64_t> all;
    int64_t scanned = 0, loaded = 0;
    for (int rank = 0; rank < 3; ++rank) {
      auto ds = OpenDataset(server.url("train.csv"), rank, 3, true, so);
      scanned += ds->index_stats().files_scanned;
      loaded += ds->index_stats().files_loaded;
      IterOptions o;
      o.batch_size = 64;
      Epoch e = ReadEpoch(ds, o);
      INFO(e.status.message());
      REQUIRE(e.status.ok());
      CHECK(e.ids.size() == 1001);
      all.insert(all.end(), e.ids.begin(), e.ids.end());
    }
    // Only a strong ETag says the bytes are the same (a weak one promises equivalence).
    CHECK(scanned == (etag == "strong" ? 1 : 3));
    CHECK(loaded == (etag == "strong" ? 2 : 0));
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    CHECK(all == Iota(3001));
    if (etag == "strong") {
      // The file changes (its ETag with it): scanned again.
      WriteIdCsv(dir / "train.csv", 0, 3002);
      auto ds = OpenDataset(server.url("train.csv"), 0, 3, true, so);
      CHECK(ds->index_stats().files_scanned == 1);
      CHECK(ds->TotalRows() == std::optional<int64_t>(3002));
      WriteIdCsv(dir / "train.csv", 0, 3001);
    }
  }
}

TEST_CASE("http: JSON Lines and .npy over http") {
  TempDir dir;
  std::string jsonl;
  for (int i = 0; i < 300; ++i) jsonl += "{\"id\": " + std::to_string(i) + ", \"v\": [1, 2]}\n";
  Write(dir / "d.jsonl", jsonl);
  TestHttpServer server(dir.path(), {true, true, false, ""});
  auto ds = OpenDataset(server.url("d.jsonl"), 1, 2, true);
  IterOptions o;
  o.batch_size = 32;
  Epoch e = ReadEpoch(ds, o);
  REQUIRE(e.status.ok());
  CHECK(e.ids.front() == 150);
  CHECK(e.ids.size() == 150);
}

TEST_CASE("http: Parquet reads the footer and the selected column chunks with Range requests") {
  const std::string fixtures = PARQUET_FIXTURES;
  const std::string name = "types_snappy_dict_v1.parquet";
  for (bool ranges : {true, false}) {
    INFO("ranges " << ranges);
    TestHttpServer server(fixtures, {ranges, false, false, ""});
    std::vector<int64_t> all;
    for (int rank = 0; rank < 2; ++rank) {
      auto ds = OpenDataset(server.url(name), rank, 2, true);
      CHECK(ds->format() == Format::kParquet);
      IterOptions o;
      o.batch_size = 16;
      o.columns = {"id", "s"};
      Epoch e = ReadEpoch(ds, o);
      INFO(e.status.message());
      REQUIRE(e.status.ok());
      CHECK(e.ids.size() == 30);
      all.insert(all.end(), e.ids.begin(), e.ids.end());
    }
    std::sort(all.begin(), all.end());
    CHECK(all == Iota(60));
    if (ranges) {
      // The file (< 64 KiB) is read whole for its footer; then each rank asks for the
      // selected column chunks of its row groups only (2 columns x 2 row groups).
      const auto seen = server.ranges();
      CHECK(std::count_if(seen.begin(), seen.end(),
                          [](const std::string& r) { return r != "bytes=0-"; }) >= 4);
    }
  }
  // A file larger than the 64 KiB tail read first: 100 KB of padding between the column
  // chunks and the footer (offsets are absolute, so the file stays valid). The footer
  // comes from a Range request for the last 64 KiB.
  {
    TempDir dir;
    auto bytes = traintl::ReadFile(fixtures + "/" + name);
    REQUIRE(bytes.ok());
    uint32_t footer_len = 0;
    std::memcpy(&footer_len, bytes->data() + bytes->size() - 8, 4);
    const size_t footer_start = bytes->size() - 8 - footer_len;
    const std::string padded =
        bytes->substr(0, footer_start) + std::string(100000, '\0') + bytes->substr(footer_start);
    Write(dir / "padded.parquet", padded);
    TestHttpServer server(dir.path(), {true, false, false, ""});
    auto ds = OpenDataset(server.url("padded.parquet"));
    IterOptions o;
    o.columns = {"id"};
    Epoch e = ReadEpoch(ds, o);
    INFO(e.status.message());
    REQUIRE(e.status.ok());
    CHECK(e.ids == Iota(60));
    const auto seen = server.ranges();
    CHECK(std::count(seen.begin(), seen.end(),
                     "bytes=" + std::to_string(padded.size() - 65536) + "-") == 1);
  }
  // Without a size (a chunked answer), the footer cannot be found.
  TestHttpServer chunked(fixtures, {true, true, false, ""});
  DatasetConfig c;
  c.name = "t";
  c.uri = chunked.url(name);
  auto ds = Dataset::Open(c, {});
  REQUIRE_FALSE(ds.ok());
  CHECK_THAT(ds.status().message(), Catch::Contains("did not say the file's size"));
}

TEST_CASE("http: a rank's stop cancels shard_open's wait for a server that does not answer") {
  // Listening, never accepting: the connection is made, no answer ever comes.
  tcp::acceptor silent(ioc_for_port(), tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
  const std::string url =
      "http://127.0.0.1:" + std::to_string(silent.local_endpoint().port()) + "/train.csv";
  std::atomic<bool> stop{true};  // the agent asked the rank to stop
  DatasetService service(
      nlohmann::json{{"world_rank", 0}, {"world_size", 1}, {"datasets", {{"d", {{"uri", url}}}}}},
      &stop);
  const traintl_dataset_api* api = service.api();
  char err[1024];
  traintl_dataset_shard* shard = nullptr;
  // Without the stop this would wait out the 600 s timeout and then say "timed out".
  CHECK(api->shard_open(api->ctx, "d", R"({"http_timeout_s": 600})", &shard, err, sizeof err) !=
        TRAINTL_DATA_OK);
  CHECK_THAT(std::string(err), Catch::Contains(url) && Catch::Contains("cancelled"));
}

TEST_CASE("http: a missing file is bad data, a refused connection is not") {
  TempDir dir;
  TestHttpServer server(dir.path(), {true, false, false, ""});
  DatasetService service(nlohmann::json{{"world_rank", 0},
                                        {"world_size", 1},
                                        {"datasets", {{"d", {{"uri", server.url("nope.csv")}}}}}});
  const traintl_dataset_api* api = service.api();
  char err[1024];
  traintl_dataset_shard* shard = nullptr;
  CHECK(api->shard_open(api->ctx, "d", nullptr, &shard, err, sizeof err) == TRAINTL_DATA_BAD);
  CHECK_THAT(std::string(err), Catch::Contains(server.url("nope.csv")));
  CHECK_THAT(std::string(err), Catch::Contains("404"));

  // A loopback port nobody listens on.
  tcp::acceptor probe(ioc_for_port(), tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
  const std::string url =
      "http://127.0.0.1:" + std::to_string(probe.local_endpoint().port()) + "/x.csv";
  probe.close();
  auto refused = HttpBodyReader::Open(url, 0, {});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == traintl::Status::Code::kUnavailable);
  CHECK_THAT(refused.status().message(), Catch::Contains(url));
}

TEST_CASE("https: verified against the CA store, refused when not trusted") {
  TempDir dir;
  WriteIdCsv(dir / "train.csv", 0, 2000);
  Write(dir / "ca.pem", kTestCert);
  TestHttpServer server(dir.path(), {true, false, true, ""});
  // Not trusted: the default CA store has no such certificate.
  ::setenv("SSL_CERT_FILE", (dir / "missing-ca.pem").c_str(), 1);
  auto untrusted = HttpBodyReader::Open(server.url("train.csv"), 0, {});
  REQUIRE_FALSE(untrusted.ok());
  CHECK_THAT(untrusted.status().message(), Catch::Contains("TLS handshake"));
  // Trusted through SSL_CERT_FILE (OpenSSL's default verify paths honour it).
  ::setenv("SSL_CERT_FILE", (dir / "ca.pem").c_str(), 1);
  for (int rank = 0; rank < 2; ++rank) {
    auto ds = OpenDataset(server.url("train.csv"), rank, 2, true);
    IterOptions o;
    o.batch_size = 100;
    Epoch e = ReadEpoch(ds, o);
    INFO(e.status.message());
    REQUIRE(e.status.ok());
    CHECK(e.ids.size() == 1000);
    CHECK(e.ids.front() == rank * 1000);
  }
  ::unsetenv("SSL_CERT_FILE");
}

TEST_CASE("a local file read in place gives the batches that reading it into buffers gives") {
  TempDir dir;
  // 64 pages exactly: the mapping ends where the file does, so a read past the end of the
  // file would fault.
  WriteAwkwardCsv(dir / "a.csv", 3000, /*long_record=*/true, 64 * 4096);
  {
    std::string jsonl;
    for (int i = 0; i < 2500; ++i) {
      jsonl += "{\"id\": " + std::to_string(i) + ", \"x\": " + std::to_string(i * 0.5) + "}\n";
      if (i % 40 == 0) jsonl += "\n";
    }
    Write(dir / "b.jsonl", jsonl);
  }
  TestHttpServer server(dir.path(), {true, false, false, ""});
  for (const char* name : {"a.csv", "b.jsonl"}) {
    for (size_t block : {size_t{1024}, size_t{8192}, size_t{1} << 20}) {
      for (bool shuffle : {false, true}) {
        for (int world : {1, 3}) {
          INFO(name << " block " << block << " shuffle " << shuffle << " world " << world);
          ShardOptions so;
          so.chunk_bytes = 4096;
          IterOptions o;
          o.batch_size = 50;
          o.block_bytes = block;
          o.shuffle = shuffle;
          o.seed = 3;
          for (int rank = 0; rank < world; ++rank) {
            auto local = OpenDataset("file://" + (dir / name), rank, world, true, so);
            auto remote = OpenDataset(server.url(name), rank, world, true, so);
            REQUIRE_FALSE(local->files()[0].file.http);
            Epoch in_place = ReadEpoch(local, o);
            IterOptions copied = o;
            copied.read_in_place = false;
            Epoch buffered = ReadEpoch(local, copied);
            Epoch over_http = ReadEpoch(remote, o);
            INFO(in_place.status.message()
                 << " / " << buffered.status.message() << " / " << over_http.status.message());
            REQUIRE(in_place.status.ok());
            REQUIRE(buffered.status.ok());
            REQUIRE(over_http.status.ok());
            CHECK(in_place.ids.size() > 0);
            CHECK(in_place.ids == buffered.ids);
            CHECK(in_place.batch_rows == buffered.batch_rows);
            CHECK(in_place.ids == over_http.ids);
            CHECK(in_place.batch_rows == over_http.batch_rows);
            // Each read the way it was asked to.
            CHECK(in_place.stats.bytes_in_place == in_place.stats.bytes_read);
            CHECK(in_place.stats.bytes_read > 0);
            CHECK(buffered.stats.bytes_in_place == 0);
            CHECK(over_http.stats.bytes_in_place == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("a local text file cut short after its index was built is an error, not a crash") {
  TempDir dir;
  WriteIdCsv(dir / "a.csv", 0, 4000);
  ShardOptions so;
  so.chunk_bytes = 4096;
  auto ds = OpenDataset("file://" + (dir / "a.csv"), 1, 2, true, so);
  REQUIRE(ds->Index(nullptr).ok());  // counted in full
  struct stat st;
  REQUIRE(::stat((dir / "a.csv").c_str(), &st) == 0);
  REQUIRE(::truncate((dir / "a.csv").c_str(), st.st_size / 3) == 0);
  IterOptions o;
  o.batch_size = 100;
  Epoch e = ReadEpoch(ds, o);
  REQUIRE_FALSE(e.status.ok());
  CHECK_THAT(e.status.message(), Catch::Contains("a.csv: the file has"));
  CHECK_THAT(e.status.message(), Catch::Contains("fewer than when it was indexed"));
  CHECK(e.stats.bytes_read == 0);
}
