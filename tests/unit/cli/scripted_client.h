// ScriptedClient: an HttpClient whose answers come from a test's function; records every
// request. For verb tests without a network.
//
// Thread-safety: single-threaded, like the verbs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cli/http_client.h"

namespace traintl {
namespace cli {
namespace testing {

class ScriptedClient : public HttpClient {
 public:
  using Handler = std::function<Result<HttpResponse>(const HttpRequest&)>;
  explicit ScriptedClient(Handler handler) : handler_(std::move(handler)) {}

  Result<HttpResponse> Send(const HttpRequest& request) override {
    requests.push_back(request);
    return handler_(request);
  }
  // Hands a 2xx body to on_data in two pieces, like a chunked answer.
  Result<HttpResponse> Stream(const HttpRequest& request,
                              const std::function<void(std::string_view)>& on_data) override {
    requests.push_back(request);
    auto r = handler_(request);
    if (!r.ok() || r->status / 100 != 2) return r;
    std::string body = std::move(r->body);
    r->body.clear();
    size_t half = body.size() / 2;
    on_data(std::string_view(body).substr(0, half));
    on_data(std::string_view(body).substr(half));
    return r;
  }

  std::vector<HttpRequest> requests;

 private:
  Handler handler_;
};

inline HttpResponse Json(int status, const std::string& body) {
  HttpResponse r;
  r.status = status;
  r.content_type = "application/json";
  r.body = body;
  return r;
}

}  // namespace testing
}  // namespace cli
}  // namespace traintl
