#include "worker/data/http_client.h"

#include <chrono>
#include <utility>

namespace traintl {
namespace data {

HttpBodyReader::HttpBodyReader(std::string url, std::unique_ptr<http::ClientStream> stream,
                               bool at_end)
    : url_(std::move(url)), stream_(std::move(stream)), at_end_(at_end) {}

HttpBodyReader::~HttpBodyReader() = default;

Result<std::unique_ptr<HttpBodyReader>> HttpBodyReader::Open(const std::string& url,
                                                             uint64_t offset,
                                                             const HttpOptions& options,
                                                             const std::atomic<bool>* cancel) {
  TRAINTL_ASSIGN_OR_RETURN(http::Url u, http::ParseUrl(url));
  http::ClientRequest request;
  request.host = u.host;
  request.port = u.port;
  request.target = u.target;
  if (u.tls) request.tls.emplace();
  request.range_from = offset;
  http::ClientOptions o;
  o.connect_timeout = std::chrono::milliseconds(0);  // idle_timeout bounds each step
  o.idle_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(options.timeout_s));
  o.max_redirects = options.max_redirects;
  o.cancel = cancel;
  o.user_agent = "traintl-worker";
  auto opened = http::ClientStream::Open(request, o);
  if (!opened.ok()) {
    const Status& s = opened.status();
    // A connection dropped after connecting may well work next time: no Internal here.
    return Status(
        s.code() == Status::Code::kInvalidArgument ? s.code() : Status::Code::kUnavailable,
        "GET " + url + ": " + s.message());
  }
  std::unique_ptr<http::ClientStream> stream = std::move(*opened);
  const int status = stream->status();
  const std::string what =
      "GET " + stream->url() + ": " + std::to_string(status) + " " + stream->reason();
  if (status == 404 || status == 410) {
    return Status::NotFound(what + " (no such file on the server)");
  }
  if (status >= 500) return Status::Unavailable(what);
  // 416: nothing to read, when the offset is at or past the end; one for an offset inside
  // the file would end a read early without a word. Without the file's size (RFC 9110: a
  // server SHOULD send it) it is taken as the end.
  const bool at_end = status == 416;
  if (at_end && stream->total_size() && *stream->total_size() > offset) {
    return Status::InvalidArgument(what + " for the bytes from " + std::to_string(offset) +
                                   ", which are within the file (Content-Range '" +
                                   stream->header("Content-Range") + "')");
  }
  if (!at_end && status != 200 && status != 206) return Status::InvalidArgument(what);
  std::unique_ptr<HttpBodyReader> reader(new HttpBodyReader(url, std::move(stream), at_end));
  reader->options_ = options;
  reader->cancel_ = cancel;
  reader->pos_ = offset;
  reader->range_honoured_ = reader->stream_->range_honoured();
  reader->total_size_ = reader->stream_->total_size();
  // A weak ETag ("W/...") promises equivalent content, not the same bytes.
  const std::string etag = reader->stream_->header("ETag");
  const std::string modified = reader->stream_->header("Last-Modified");
  if (!etag.empty() && etag.rfind("W/", 0) != 0) {
    reader->validator_ = "etag:" + etag;
  } else if (!modified.empty()) {
    reader->validator_ = "modified:" + modified;
  }
  return reader;
}

bool SameVersion(std::optional<uint64_t> size_a, const std::string& validator_a,
                 std::optional<uint64_t> size_b, const std::string& validator_b) {
  if (size_a && size_b && *size_a != *size_b) return false;
  return validator_a.empty() || validator_b.empty() || validator_a == validator_b;
}

Result<size_t> HttpBodyReader::Read(char* buf, size_t len) {
  bool continued = false;  // the stream was just continued: it must give bytes
  for (;;) {
    if (at_end_ || len == 0) return size_t{0};
    auto n = stream_->Read(buf, len);
    if (!n.ok()) return Status::Unavailable("GET " + url_ + ": " + n.status().message());
    if (*n > 0) {
      pos_ += *n;
      return n;
    }
    // The body ended. A 206 covers the resource's bytes up to range_end (or fewer, when
    // the connection closed early); whatever is left takes another request.
    if (!stream_->range_end() || !total_size_ || pos_ >= *total_size_) return size_t{0};
    if (continued) {
      return Status::InvalidArgument("GET " + url_ + ": the server's answer for the bytes from " +
                                     std::to_string(pos_) + " was empty");
    }
    TRAINTL_RETURN_IF_ERROR(Continue());
    continued = true;
  }
}

Status HttpBodyReader::Continue() {
  const uint64_t from = pos_;
  TRAINTL_ASSIGN_OR_RETURN(std::unique_ptr<HttpBodyReader> next,
                           Open(url_, from, options_, cancel_));
  if (next->at_end_ || !next->stream_->range_end()) {
    return Status::InvalidArgument("GET " + url_ + ": the server answered part of the file (" +
                                   std::to_string(from) + " of " + std::to_string(*total_size_) +
                                   " bytes), then no range for the rest");
  }
  if (!SameVersion(total_size_, validator_, next->total_size_, next->validator_)) {
    return Status::FailedPrecondition(
        "GET " + url_ +
        ": the file changed on the server while it was read (its size or ETag / "
        "Last-Modified differ between requests: a file replaced, or servers behind one "
        "address that disagree)");
  }
  stream_ = std::move(next->stream_);
  return Status::Ok();
}

}  // namespace data
}  // namespace traintl
