// Fetch: one synchronous HTTP/1.1 (optionally HTTPS) request for tests and daemon-to-daemon
// calls, over the shared client of common/http_client.h (ClientTls and ClientResponse come
// from there).
//
// Thread-safety: Fetch runs its own private io_context and may be called from any thread
// concurrently - but never from the thread running the io_context of a Server it calls,
// which would wait on itself until the timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "common/http_client.h"
#include "common/result.h"

namespace traintl::http {

// Marks the answer a Server gives to a connection it refuses before reading any of its
// request (every connection busy, see ServerOptions::max_connections): 503 with this
// header set to "1". Such a request was provably not processed, so any request, a write
// included, may be sent again.
inline constexpr char kRefusedUnreadHeader[] = "X-Traintl-Refused-Unread";

// True when `r` is that answer.
bool RefusedUnread(const ClientResponse& r);

// Sends `method target` to host:port with `body` (Content-Length set from it) and the
// extra `headers` (e.g. {"Authorization", "Bearer ..."}), and reads the whole response.
// `timeout` bounds everything from name resolution to the last byte. With `tls`, the
// exchange is HTTPS (TLS 1.2+, certificate verified). Any HTTP status is a successful
// Result; errors: InvalidArgument (a header, method or target with CR/LF/spaces; an
// unreadable CA file), Unavailable (resolve/connect/IO failure, timeout, malformed
// response, a failed TLS handshake or certificate verification). Messages start with
// "METHOD http(s)://host:port/target: ".
Result<ClientResponse> Fetch(const std::string& host, uint16_t port, const std::string& method,
                             const std::string& target, const std::string& body = "",
                             const std::map<std::string, std::string>& headers = {},
                             std::chrono::milliseconds timeout = std::chrono::seconds(10),
                             const ClientTls* tls = nullptr);

}  // namespace traintl::http
