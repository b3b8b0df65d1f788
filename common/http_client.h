// The one HTTP/1.1 client of traintl, on Boost.Beast: synchronous, one connection per
// request, HTTPS optional (certificate always verified), with timeouts, a cancel flag, a
// streamed (pulled) response body, Range requests and redirects. The daemon (Fetch), the
// CLI (BeastHttpClient) and the dataset reader (HttpBodyReader) are thin adapters over it.
//
// Errors (the message names no URL of the request, so that each caller words it for its
// users):
//   InvalidArgument  a method, target or header with CR/LF/spaces; an unreadable CA file;
//                    more redirects than ClientOptions::max_redirects; a redirect from
//                    https to http (this message names where it pointed); a 206 whose
//                    Content-Range does not start at ClientRequest::range_from.
//   Unavailable      no exchange happened: the host did not resolve, the connection was
//                    refused ("connection refused", exactly), the TLS handshake or the
//                    certificate check failed ("TLS handshake with host:port failed: ..."),
//                    a timeout before the request was sent, or the cancel flag.
//   Internal         the exchange broke after connecting: writing or reading failed, the
//                    response was malformed, or a timeout struck while it was under way.
// Any other HTTP status is a successful answer.
//
// Thread-safety: each ClientStream runs a private io_context on the calling thread; distinct
// objects may be used from any threads at once, one object by one thread at a time. Never
// call it from the thread running the io_context of a server it talks to (it would wait on
// itself until a timeout).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/result.h"

namespace traintl::http {

// HTTPS: the server's certificate must chain to a CA in `ca_file` and name the host (DNS
// name or IP address). TLS 1.2 or newer.
struct ClientTls {
  // PEM file of trusted CA certificates; "" uses the system's default store (OpenSSL's
  // default paths: SSL_CERT_FILE / SSL_CERT_DIR override them). Default "".
  std::string ca_file;
  // Name checked against the certificate (and sent as SNI when not an IP address); "" means
  // the request's host. Not carried over to a redirect's new host. Default "".
  std::string server_name;
};

// One request.
struct ClientRequest {
  // Any token; HEAD answers are read without a body. Default "GET".
  std::string method = "GET";
  std::string host;
  uint16_t port = 80;
  // Path and query, already percent-encoded. Default "/".
  std::string target = "/";
  // Extra fields (e.g. {"Authorization", "Bearer ..."}). Host, User-Agent, Connection and
  // Content-Length are set by the client. Default none.
  std::map<std::string, std::string> headers;
  // Sent with Content-Length (none when empty and the method is GET or HEAD).
  std::string body;
  // HTTPS when set. Default unset (plain HTTP).
  std::optional<ClientTls> tls;
  // When > 0, sent as "Range: bytes=<range_from>-". A server that ignores it (200) is still
  // read correctly: ClientStream drops the first range_from bytes itself. Default 0.
  uint64_t range_from = 0;
};

struct ClientOptions {
  // Bound on resolving, connecting and the TLS handshake together; 0 = none. Default 10 s.
  std::chrono::milliseconds connect_timeout{10000};
  // Bound on the whole exchange, from resolving to the last byte of the body (a body read
  // after Open counts too); 0 = none. Default 0.
  std::chrono::milliseconds timeout{0};
  // Bound on each wait for progress (connect, handshake, writing, each read); 0 = none. For
  // bodies too long for a total bound. Default 0.
  std::chrono::milliseconds idle_timeout{0};
  // Redirects (301, 302, 303, 307, 308 with a Location) followed for GET and HEAD; the
  // Authorization field is dropped when the host changes. 0: the 3xx is the answer.
  // Default 0.
  int max_redirects = 0;
  // Polled while waiting (every 50 ms): once true, the pending operation fails as
  // Unavailable "cancelled". Not owned. Default null.
  const std::atomic<bool>* cancel = nullptr;
  // Default "traintl".
  std::string user_agent = "traintl";
};

// A whole response.
struct ClientResponse {
  int status = 0;
  std::string body;
  // Lower-cased field names; repeated fields are joined with ", ".
  std::map<std::string, std::string> headers;

  // The value of header `name` (case-insensitive), or "" when absent.
  std::string header(const std::string& name) const;
};

// scheme://host[:port]/target, split. Only http and https; no credentials.
struct Url {
  bool tls = false;
  std::string host;    // without the brackets of an IPv6 literal
  uint16_t port = 0;   // 80 / 443 when not given
  std::string target;  // path and query, at least "/"; no fragment
};
// InvalidArgument (naming `url`) when it cannot be used.
Result<Url> ParseUrl(const std::string& url);

// An exchange whose response head has been read and whose body is read on demand.
class ClientStream {
 public:
  ~ClientStream();
  ClientStream(const ClientStream&) = delete;
  ClientStream& operator=(const ClientStream&) = delete;

  // Connects, sends `request` and reads the response head, following redirects as
  // `options` allow. If writing the request fails, the answer is still read when the
  // server sent one (it may refuse a body before reading it all: 401, 413).
  static Result<std::unique_ptr<ClientStream>> Open(const ClientRequest& request,
                                                    const ClientOptions& options = {});

  // Reads up to `len` bytes of the body as soon as some have arrived; 0 at its end.
  Result<size_t> Read(char* buf, size_t len);
  // Reads the rest of the body into `out` (appended).
  Status ReadAll(std::string* out);

  // The status and fields (no body).
  const ClientResponse& head() const { return head_; }
  int status() const { return head_.status; }
  std::string header(const std::string& name) const { return head_.header(name); }
  const std::string& reason() const { return reason_; }
  // "http(s)://host[:port]/target" of the request answered (after redirects).
  const std::string& url() const { return url_; }
  // Whether the body starts at range_from: true unless a server ignored the Range.
  bool range_honoured() const { return range_honoured_; }
  // The size of the whole resource when the server said (Content-Range, else
  // Content-Length of a 200).
  std::optional<uint64_t> total_size() const { return total_size_; }
  // A 206's last byte (Content-Range, inclusive), whose first byte Open checked is
  // range_from: a server may answer less than the rest of the resource.
  std::optional<uint64_t> range_end() const { return range_end_; }

 private:
  struct Impl;
  explicit ClientStream(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
  ClientResponse head_;
  std::string reason_;
  std::string url_;
  bool range_honoured_ = true;
  std::optional<uint64_t> total_size_;
  std::optional<uint64_t> range_end_;
};

// Open, then ReadAll: the whole response.
Result<ClientResponse> Exchange(const ClientRequest& request, const ClientOptions& options = {});

}  // namespace traintl::http
