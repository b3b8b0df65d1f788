#include "cli/http_client.h"

#include <chrono>

#include "common/http_client.h"

namespace traintl {
namespace cli {

Result<HttpResponse> BeastHttpClient::Send(const HttpRequest& request) {
  return Exchange(request, nullptr);
}

Result<HttpResponse> BeastHttpClient::Stream(const HttpRequest& request,
                                             const std::function<void(std::string_view)>& on_data) {
  return Exchange(request, &on_data);
}

Result<HttpResponse> BeastHttpClient::Exchange(
    const HttpRequest& request, const std::function<void(std::string_view)>* on_data) {
  http::ClientRequest r;
  r.method = request.method;
  r.host = options_.host;
  r.port = options_.port;
  r.target = request.target;
  r.body = request.body;
  if (!options_.token.empty()) r.headers["Authorization"] = "Bearer " + options_.token;
  if (!request.content_type.empty()) r.headers["Content-Type"] = request.content_type;
  if (options_.tls) r.tls = http::ClientTls{options_.tls_ca_file, options_.tls_server_name};
  http::ClientOptions o;
  o.connect_timeout = std::chrono::milliseconds(options_.connect_timeout_ms);
  const int64_t timeout_ms =
      request.timeout_ms == 0 ? options_.request_timeout_ms : request.timeout_ms;
  o.timeout = std::chrono::milliseconds(timeout_ms > 0 ? timeout_ms : 0);
  o.user_agent = "traintl/0.1.0";
  TRAINTL_ASSIGN_OR_RETURN(auto stream, http::ClientStream::Open(r, o));

  HttpResponse response;
  response.status = stream->status();
  response.content_type = stream->header("content-type");
  if (on_data == nullptr || response.status / 100 != 2) {
    TRAINTL_RETURN_IF_ERROR(stream->ReadAll(&response.body));
    return response;
  }
  char piece[16384];
  while (true) {
    TRAINTL_ASSIGN_OR_RETURN(size_t n, stream->Read(piece, sizeof piece));
    if (n == 0) return response;
    (*on_data)(std::string_view(piece, n));
  }
}

std::string UrlEncode(std::string_view text) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

}  // namespace cli
}  // namespace traintl
