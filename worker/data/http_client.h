// HttpBodyReader: streams the body of one HTTP(S) GET, optionally from a byte offset
// (a Range request), for the dataset reader: the shared client of common/http_client.h
// with no connection reuse, redirects followed, TLS verified against the system's CA
// store (OpenSSL's default paths; SSL_CERT_FILE / SSL_CERT_DIR override them).
//
// Range: when `offset` > 0 the request carries "Range: bytes=<offset>-". A server that
// ignores it (200 instead of 206) is still read correctly: the first `offset` bytes are
// skipped on the client. range_honoured() tells which happened (OpenSource refuses to skip
// more than HttpOptions::max_skipped_bytes). A 206 must start at the
// byte asked for (common/http_client.h); one that ends before the resource does (a server
// or proxy that caps ranges, or a connection closed early) is continued with another
// Range request from where it stopped, which must come from the same version of the
// resource (validator()), else FailedPrecondition.
//
// Errors: 404/410 are NotFound, other 4xx, a 2xx other than 200 and 206, and a 416 for an
// offset inside the resource are InvalidArgument (retrying cannot help); refused or
// dropped connections, timeouts and 5xx are Unavailable (a later attempt may succeed).
// Messages name the URL.
//
// Thread-safety: one object is used by one thread at a time; Cancel() may be called from
// any thread and makes a blocked Read() return Unavailable soon after.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/http_client.h"
#include "common/result.h"

namespace traintl {
namespace data {

struct HttpOptions {
  // Seconds without progress (connect, TLS handshake, headers, or any body read) before a
  // request fails as Unavailable. Default: 60.
  double timeout_s = 60;
  // Redirects (301, 302, 303, 307, 308) followed before giving up. Default: 5.
  int max_redirects = 5;
  // A server that ignores Range: the most bytes the client skips to reach an offset before
  // it refuses (OpenSource; InvalidArgument). Default: 256 MiB.
  uint64_t max_skipped_bytes = 256u << 20;
};

// Whether two answers for one URL may come from the same version of the file: their sizes
// and their validators (HttpBodyReader::validator()) agree wherever both say.
bool SameVersion(std::optional<uint64_t> size_a, const std::string& validator_a,
                 std::optional<uint64_t> size_b, const std::string& validator_b);

class HttpBodyReader {
 public:
  ~HttpBodyReader();
  HttpBodyReader(const HttpBodyReader&) = delete;
  HttpBodyReader& operator=(const HttpBodyReader&) = delete;

  // Sends the GET and reads the response head. `cancel`, when non-null, is polled while
  // waiting: once it is true, the pending operation fails as Unavailable.
  static Result<std::unique_ptr<HttpBodyReader>> Open(const std::string& url, uint64_t offset,
                                                      const HttpOptions& options,
                                                      const std::atomic<bool>* cancel = nullptr);

  // Reads up to `len` bytes of the body (from `offset`); 0 at its end.
  Result<size_t> Read(char* buf, size_t len);

  // Whether the server answered the Range request with 206 (always true for offset 0).
  bool range_honoured() const { return range_honoured_; }
  // The size of the whole resource when the server said (Content-Range or Content-Length).
  std::optional<uint64_t> total_size() const { return total_size_; }
  // What tells this version of the resource from others: the response's strong ETag
  // ("etag:<value>"), else its Last-Modified ("modified:<value>"); "" when it has neither.
  const std::string& validator() const { return validator_; }

 private:
  HttpBodyReader(std::string url, std::unique_ptr<http::ClientStream> stream, bool at_end);
  // Another Range request from pos_, after a 206 that ended before the resource did.
  Status Continue();

  std::string url_;
  HttpOptions options_;
  const std::atomic<bool>* cancel_ = nullptr;
  std::unique_ptr<http::ClientStream> stream_;
  bool at_end_;       // 416: the offset is at or past the end
  uint64_t pos_ = 0;  // the resource's byte the next Read gives
  bool range_honoured_ = true;
  std::optional<uint64_t> total_size_;
  std::string validator_;
};

}  // namespace data
}  // namespace traintl
