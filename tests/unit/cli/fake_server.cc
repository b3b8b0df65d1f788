#include "fake_server.h"

#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace traintl {
namespace cli {
namespace testing {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

FakeServer::FakeServer(Handler handler)
    : handler_(std::move(handler)),
      acceptor_(ioc_, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0)) {
  port_ = acceptor_.local_endpoint().port();
  thread_ = std::thread([this] { Serve(); });
}

FakeServer::~FakeServer() {
  stopping_ = true;
  // Wakes the blocking accept() so that the thread sees stopping_.
  beast::error_code ec;
  tcp::socket poke(ioc_);
  poke.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port_), ec);
  thread_.join();
}

std::vector<RecordedRequest> FakeServer::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

void FakeServer::Serve() {
  while (!stopping_) {
    beast::error_code ec;
    tcp::socket socket(ioc_);
    acceptor_.accept(socket, ec);
    if (ec || stopping_) break;
    beast::flat_buffer buffer;
    for (;;) {
      http::request<http::string_body> req;
      http::read(socket, buffer, req, ec);
      if (ec) break;
      RecordedRequest rec;
      rec.method = std::string(req.method_string());
      rec.target = std::string(req.target());
      rec.body = req.body();
      rec.authorization = std::string(req[http::field::authorization]);
      rec.content_type = std::string(req[http::field::content_type]);
      {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.push_back(rec);
      }
      FakeResponse resp = handler_(rec);
      if (resp.chunks.empty()) {
        http::response<http::string_body> res{static_cast<http::status>(resp.status), 11};
        res.set(http::field::content_type, resp.content_type);
        res.body() = req.method() == http::verb::head ? "" : resp.body;
        res.prepare_payload();
        if (req.method() == http::verb::head) res.content_length(resp.body.size());
        res.keep_alive(req.keep_alive());
        http::serializer<false, http::string_body> sr{res};
        if (req.method() == http::verb::head) {
          http::write_header(socket, sr, ec);
        } else {
          http::write(socket, sr, ec);
        }
      } else {
        http::response<http::empty_body> res{static_cast<http::status>(resp.status), 11};
        res.set(http::field::content_type, resp.content_type);
        res.chunked(true);
        res.keep_alive(false);
        http::response_serializer<http::empty_body> sr{res};
        http::write_header(socket, sr, ec);
        for (size_t i = 0; i < resp.chunks.size() && !ec; ++i) {
          if (resp.before_chunk) resp.before_chunk(i);
          net::write(socket, http::make_chunk(net::buffer(resp.chunks[i])), ec);
        }
        if (!ec) net::write(socket, http::make_chunk_last(), ec);
      }
      if (ec || !req.keep_alive() || !resp.chunks.empty()) break;
    }
    socket.shutdown(tcp::socket::shutdown_both, ec);
  }
}

}  // namespace testing
}  // namespace cli
}  // namespace traintl
