#include "daemon/http/responder.h"

#include <cstdlib>

#include "common/logging.h"
#include "daemon/http/connection.h"

namespace traintl::http {

Responder::Responder(std::shared_ptr<internal::Connection> connection, uint64_t request_seq)
    : conn_(std::move(connection)), request_seq_(request_seq) {}

Responder::~Responder() {
  // During io_context destruction (or a misuse from another thread) the connection is
  // either closed already or cannot be touched safely; either way there is nobody to answer.
  if (!conn_ || !conn_->RunningInIoThread()) return;
  if (state_ == State::kNone) {
    if (!conn_->closed()) {
      LOG_ERROR << "http: a handler released its Responder without answering";
    }
    SendError(500, "internal error: the handler produced no response");
  } else if (state_ == State::kStreaming) {
    if (!conn_->closed()) {
      LOG_WARN << "http: a handler released its Responder mid-stream";
    }
    conn_->EndStream(request_seq_, /*complete=*/false);
  }
}

void Responder::CheckThread() const {
  if (!conn_->RunningInIoThread()) {
    LOG_ERROR << "http: Responder used off the server's io_context thread";
    std::abort();
  }
}

void Responder::SetHeader(std::string name, std::string value) {
  CheckThread();
  if (state_ != State::kNone) {
    LOG_WARN << "http: SetHeader after the response started; ignored";
    return;
  }
  headers_.emplace_back(std::move(name), std::move(value));
}

void Responder::Send(int status, std::string content_type, std::string body) {
  CheckThread();
  if (state_ != State::kNone) {
    LOG_WARN << "http: second response to one request; ignored";
    return;
  }
  state_ = State::kSent;
  conn_->Respond(request_seq_, status, headers_, content_type, std::move(body));
}

void Responder::SendJson(int status, const nlohmann::json& body) {
  std::string text;
  try {
    text = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } catch (const std::exception& e) {
    LOG_ERROR << "http: cannot serialize a JSON response: " << e.what();
    status = 500;
    text = R"({"error":"internal error: unserializable response"})";
  }
  Send(status, "application/json", std::move(text));
}

void Responder::SendError(int status, const std::string& message, nlohmann::json extra) {
  nlohmann::json body = extra.is_object() ? std::move(extra) : nlohmann::json::object();
  body["error"] = message;
  SendJson(status, body);
}

void Responder::BeginChunked(int status, std::string content_type) {
  CheckThread();
  if (state_ != State::kNone) {
    LOG_WARN << "http: BeginChunked after the response started; ignored";
    return;
  }
  state_ = State::kStreaming;
  conn_->BeginStream(request_seq_, status, headers_, content_type);
}

void Responder::WriteChunk(std::string data, std::function<void(bool ok)> on_written) {
  CheckThread();
  if (state_ != State::kStreaming) {
    LOG_WARN << "http: WriteChunk outside BeginChunked/EndChunked; ignored";
    conn_->PostCallback(std::move(on_written), false);
    return;
  }
  conn_->StreamChunk(request_seq_, std::move(data), std::move(on_written));
}

void Responder::EndChunked() {
  CheckThread();
  if (state_ != State::kStreaming) {
    LOG_WARN << "http: EndChunked without BeginChunked; ignored";
    return;
  }
  state_ = State::kEnded;
  conn_->EndStream(request_seq_, /*complete=*/true);
}

bool Responder::closed() const {
  CheckThread();
  return conn_->closed();
}

}  // namespace traintl::http
