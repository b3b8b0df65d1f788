#include "daemon/http/client.h"

namespace traintl::http {

bool RefusedUnread(const ClientResponse& r) {
  return r.status == 503 && r.header(kRefusedUnreadHeader) == "1";
}

Result<ClientResponse> Fetch(const std::string& host, uint16_t port, const std::string& method,
                             const std::string& target, const std::string& body,
                             const std::map<std::string, std::string>& headers,
                             std::chrono::milliseconds timeout, const ClientTls* tls) {
  ClientRequest request;
  request.method = method;
  request.host = host;
  request.port = port;
  request.target = target;
  request.headers = headers;
  request.body = body;
  if (tls) request.tls = *tls;
  ClientOptions options;
  options.connect_timeout = std::chrono::milliseconds(0);  // within `timeout`
  options.timeout = timeout;
  options.user_agent = "traintl-http";
  auto response = Exchange(request, options);
  if (response.ok()) return response;
  const Status& s = response.status();
  const std::string what = method + (tls ? " https://" : " http://") + host + ":" +
                           std::to_string(port) + target + ": " + s.message();
  // After connecting is no different from before here: a peer that did not answer.
  return Status(s.code() == Status::Code::kInvalidArgument ? s.code() : Status::Code::kUnavailable,
                what);
}

}  // namespace traintl::http
