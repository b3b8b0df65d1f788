// Router: maps (method, path pattern) to handlers, e.g. GET "/v1/jobs/{job}/logs".
//
// A pattern is a '/'-separated list of literal segments and "{name}" captures; a capture
// matches exactly one non-empty path segment. Matching splits the raw (still encoded) path
// on '/' before decoding, so "%2F" stays inside a segment; a captured value is then refused
// with 400 when it is empty, contains '/' (from %2F) or is "." or ".." (also "%2e%2e"), so
// that no capture can name a file outside the directory a handler joins it to. Literal
// segments beat captures when two patterns match the same path.
//
// Thread-safety: Add() must finish before the Server starts (or run on its io_context
// thread); Match() is const and may run concurrently with other Match() calls.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/http/request.h"

namespace traintl::http {

class Responder;

// Called on the server's io_context thread. The handler answers through the Responder,
// now or later; a Responder released without an answer sends 500. An exception escaping
// the handler is caught and answered with 500.
using Handler = std::function<void(const Request&, std::shared_ptr<Responder>)>;

constexpr size_t kDefaultMaxBodyBytes = 1 << 20;

// Who may call a route (ServerOptions says what each credential is).
enum class Access {
  kAnyone,   // no credential: GET /healthz, the dashboard's login page
  kUser,     // the API token ("Authorization: Bearer <token>"), or a browser session
  kCluster,  // the cluster credential alone: the daemon-to-daemon routes (DESIGN §5)
};

struct RouteOptions {
  // Requests without the credential `access` needs get 401 (403 with the other kind's),
  // before the body is read. Default kUser.
  Access access = Access::kUser;
  // Larger bodies get 413, decided from Content-Length before the body is read, or while
  // reading a chunked body. Default 1 MiB.
  size_t max_body_bytes = kDefaultMaxBodyBytes;
};

struct Route {
  std::string method;
  std::string pattern;
  Handler handler;
  RouteOptions options;
  // One entry per pattern segment: the literal text, or the capture name when is_param.
  struct Segment {
    bool is_param = false;
    std::string text;
  };
  std::vector<Segment> segments;
};

struct RouteMatch {
  enum class Kind {
    kFound,             // route and params are set
    kNotFound,          // no pattern matches the path: 404
    kMethodNotAllowed,  // some pattern matches, not with this method: 405, see allow
    kBadRequest,        // malformed encoding or a refused capture: 400, see error
  };
  Kind kind = Kind::kNotFound;
  const Route* route = nullptr;
  std::map<std::string, std::string> params;
  std::string allow;  // "GET, POST" for kMethodNotAllowed
  std::string error;  // human-readable reason for kBadRequest
};

class Router {
 public:
  Router() = default;
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // Registers a route. A malformed pattern (not starting with '/', an empty or duplicate
  // capture name, '{' inside a literal) or a duplicate (method, pattern shape) is a
  // programming error and aborts.
  void Add(std::string method, std::string pattern, Handler handler, RouteOptions options = {});

  // Resolves `raw_path` (the request path before percent-decoding, without the query).
  RouteMatch Match(const std::string& method, std::string_view raw_path) const;

 private:
  // Appended to by Add before the server starts; read-only (Match) afterwards.
  std::vector<std::unique_ptr<Route>> routes_;
};

}  // namespace traintl::http
