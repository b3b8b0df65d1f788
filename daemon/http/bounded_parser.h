// BoundedRequestParser: Beast's request parser with every input-dependent allocation and
// throw of its callbacks turned into a parse error.
//
// Beast 1.74 applies header_limit to the request header only. A chunked body's trailer
// fields and chunk extensions are not counted against it, and basic_fields::insert throws
// std::length_error for a field name or value of 65,534 bytes or more, an exception that
// escapes the Asio handler and ends the process. This parser caps trailer bytes, trailer
// fields and chunk-extension bytes (error::header_limit, answered 431) and never lets
// insert throw. The connection additionally bounds its read buffer, so the bytes Beast
// accumulates while looking for the end of a trailer stay bounded too.
//
// Thread-safety: as Beast's parser (none; one connection's strand uses it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

namespace traintl::http::internal {

struct TrailerLimits {
  // Bytes of all trailer fields together (names + values). Default: 16 KiB.
  size_t max_trailer_bytes = 16 * 1024;
  // Number of trailer fields. Default: 64.
  size_t max_trailer_fields = 64;
  // Bytes of one chunk's extensions. Default: 4 KiB.
  size_t max_chunk_extension_bytes = 4 * 1024;
};

class BoundedRequestParser
    : public boost::beast::http::request_parser<boost::beast::http::string_body> {
 public:
  explicit BoundedRequestParser(const TrailerLimits& limits) : limits_(limits) {}

  // True when the last error came from these limits (trailer or chunk extension), not from
  // the header limit Beast enforces itself.
  bool trailer_limit_hit() const { return trailer_limit_hit_; }

 private:
  using field = boost::beast::http::field;
  using string_view = boost::beast::string_view;
  using error_code = boost::beast::error_code;

  // Field values of 65,534+ bytes make basic_fields::insert throw.
  static constexpr size_t kMaxFieldBytes = 65533;

  void on_field_impl(field name, string_view name_string, string_view value,
                     error_code& ec) override {
    if (is_header_done()) {  // a trailer field
      trailer_bytes_ += name_string.size() + value.size();
      if (++trailer_fields_ > limits_.max_trailer_fields ||
          trailer_bytes_ > limits_.max_trailer_bytes) {
        trailer_limit_hit_ = true;
        ec = boost::beast::http::error::header_limit;
        return;
      }
    }
    if (name_string.size() > kMaxFieldBytes || value.size() > kMaxFieldBytes) {
      ec = boost::beast::http::error::header_limit;
      return;
    }
    try {
      get().insert(name, name_string, value);
    } catch (const std::exception&) {  // bad_alloc: refuse the request, keep the process
      ec = boost::beast::http::error::header_limit;
    }
  }

  void on_chunk_header_impl(std::uint64_t, string_view extensions, error_code& ec) override {
    if (extensions.size() > limits_.max_chunk_extension_bytes) {
      trailer_limit_hit_ = true;
      ec = boost::beast::http::error::header_limit;
    }
  }

  TrailerLimits limits_;
  size_t trailer_bytes_ = 0;
  size_t trailer_fields_ = 0;
  bool trailer_limit_hit_ = false;
};

}  // namespace traintl::http::internal
