// Request: one parsed HTTP request as a route handler sees it.
//
// The object passed to a handler lives only for the duration of the handler call; a
// handler that answers later (keeping its Responder) must copy what it needs.
// Thread-safety: a value type; no internal synchronization.
#pragma once

#include <map>
#include <string>

namespace traintl::http {

struct Request {
  std::string method;  // as received, e.g. "GET"
  std::string target;  // the raw request-target, e.g. "/v1/jobs/3f9c/logs?tail=10"
  std::string path;    // percent-decoded path without the query, e.g. "/v1/jobs/3f9c/logs"
  std::map<std::string, std::string> query;   // decoded; a repeated key keeps the last value
  std::map<std::string, std::string> params;  // decoded "{name}" captures of the route
  // Lower-cased field names; repeated fields are joined with ", ". Contains Authorization:
  // never log it.
  std::map<std::string, std::string> headers;
  // Mutable: a handler that goes on elsewhere (a library upload, hashed on another thread)
  // may move it out. The connection drops the request once the handler returns.
  mutable std::string body;
  std::string remote;  // "ip:port" of the peer

  // The value of header `name` (case-insensitive), or "" when absent.
  std::string header(const std::string& name) const;
};

// ASCII lower-casing for header names.
std::string AsciiLower(std::string s);

}  // namespace traintl::http
