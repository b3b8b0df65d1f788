// HttpClient: the CLI's view of the daemon's HTTP API (docs/API.md), as an interface so that
// verbs can be tested without a network. BeastHttpClient is the real implementation, over
// the shared client of common/http_client.h: one HTTP/1.1 (or HTTPS, with the server's
// certificate verified) connection per request, with timeouts.
//
// Thread-safety: an HttpClient is used from one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "common/result.h"

namespace traintl {
namespace cli {

struct HttpRequest {
  std::string method = "GET";  // GET, HEAD, PUT, POST
  std::string target;          // path and query, already percent-encoded
  std::string body;
  std::string content_type;  // sent only when non-empty
  // Total time for the request, in milliseconds. 0: the client's default; -1: none (used
  // by log following, which can idle for a long time).
  int64_t timeout_ms = 0;
};

struct HttpResponse {
  int status = 0;
  std::string content_type;
  // The whole body; for a streamed 2xx response, empty (the bytes went to the callback).
  std::string body;
};

class HttpClient {
 public:
  virtual ~HttpClient() = default;

  // Sends `request` and reads the whole response. Status codes other than 2xx are not
  // errors here: the caller maps them. Errors: Unavailable when no connection could be made
  // (the message says why, e.g. "connection refused"); Internal when the exchange broke
  // after connecting.
  virtual Result<HttpResponse> Send(const HttpRequest& request) = 0;

  // Like Send, but for a 2xx answer each piece of the body is handed to `on_data` as it
  // arrives (chunked transfer included) instead of being collected. Non-2xx bodies are
  // collected into the response, so that errors can be reported.
  virtual Result<HttpResponse> Stream(const HttpRequest& request,
                                      const std::function<void(std::string_view)>& on_data) = 0;
};

struct BeastHttpClientOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 7450;
  // Sent as "Authorization: Bearer <token>"; no header when empty.
  std::string token;
  // Time allowed to resolve the host, connect and (HTTPS) complete the TLS handshake.
  int64_t connect_timeout_ms = 10000;
  // Default total time of a request (HttpRequest::timeout_ms == 0).
  int64_t request_timeout_ms = 120000;
  // HTTPS (TLS 1.2+). The daemon's certificate must chain to a CA in `tls_ca_file` (PEM;
  // "" = the system's default store) and name `tls_server_name` ("" = `host`) as a DNS
  // name or IP address; otherwise no request is sent. Default false.
  bool tls = false;
  std::string tls_ca_file;
  std::string tls_server_name;
};

class BeastHttpClient : public HttpClient {
 public:
  explicit BeastHttpClient(BeastHttpClientOptions options) : options_(std::move(options)) {}

  Result<HttpResponse> Send(const HttpRequest& request) override;
  Result<HttpResponse> Stream(const HttpRequest& request,
                              const std::function<void(std::string_view)>& on_data) override;

 private:
  Result<HttpResponse> Exchange(const HttpRequest& request,
                                const std::function<void(std::string_view)>* on_data);

  BeastHttpClientOptions options_;
};

// Percent-encodes one path segment or query value: RFC 3986 unreserved characters pass,
// except "." (so that a job argument can never form a ".." path segment).
std::string UrlEncode(std::string_view text);

}  // namespace cli
}  // namespace traintl
