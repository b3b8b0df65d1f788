#include "worker/agent_channel.h"

#include <algorithm>

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <variant>

namespace traintl {
namespace worker {
namespace {

void WriteStderr(const std::string& line) {
  std::string text = "traintl-worker: " + line + "\n";
  ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
}

}  // namespace

AgentChannel::AgentChannel(int fd) : fd_(fd) {}

void AgentChannel::Start() {
  reader_ = std::thread([this] { ReadLoop(); });
  // The process ends with _exit, never by joining.
  reader_.detach();
}

Status AgentChannel::Send(const events::WorkerEvent& event) {
  const std::string line = events::Encode(event);
  std::lock_guard<std::mutex> lock(write_mu_);
  size_t off = 0;
  while (off < line.size()) {
    // MSG_NOSIGNAL: a vanished agent must show up as an error here, not as SIGPIPE.
    ssize_t n = ::send(fd_, line.data() + off, line.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == ENOTSOCK) n = ::write(fd_, line.data() + off, line.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Unavailable(std::string("writing to the agent channel: ") +
                                 std::strerror(errno));
    }
    off += static_cast<size_t>(n);
  }
  return Status::Ok();
}

void AgentChannel::WaitForAck(int64_t seq) {
  std::unique_lock<std::mutex> lock(ack_mu_);
  ack_cv_.wait(lock, [&] { return acked_.count(seq) != 0; });
  acked_.erase(seq);
}

bool AgentChannel::WaitForHeldAck(int64_t seq, std::chrono::milliseconds limit) {
  std::unique_lock<std::mutex> lock(ack_mu_);
  ack_cv_.wait_for(lock, limit, [&] { return acked_.count(seq) != 0 || stop_requested(); });
  return acked_.erase(seq) != 0;
}

void AgentChannel::ReadLoop() {
  std::string buffer;
  char chunk[4096];
  for (;;) {
    ssize_t n = ::read(fd_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      WriteStderr(n == 0 ? "the agent closed the channel; exiting"
                         : std::string("reading the agent channel failed (") +
                               std::strerror(errno) + "); exiting");
      std::fflush(stdout);
      ::_exit(kAgentGoneExitCode);
    }
    buffer.append(chunk, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = buffer.find('\n', start)) != std::string::npos; start = nl + 1) {
      HandleLine(buffer.substr(start, nl - start));
    }
    buffer.erase(0, start);
  }
}

void AgentChannel::HandleLine(const std::string& line) {
  if (line.empty()) return;
  Result<events::AgentMessage> message = events::DecodeAgentMessage(line);
  if (!message.ok()) {
    // A type this worker does not know is a newer agent's: ignored, like a malformed one.
    WriteStderr("ignoring a message from the agent: " + message.status().message());
    return;
  }
  if (const auto* ack = std::get_if<events::Ack>(&*message)) {
    {
      std::lock_guard<std::mutex> lock(ack_mu_);
      acked_.insert(ack->seq);
    }
    ack_cv_.notify_all();
  } else if (std::holds_alternative<events::Stop>(*message)) {
    {
      // Under the lock, so that a waiter cannot miss the wake-up between its check and wait.
      std::lock_guard<std::mutex> lock(ack_mu_);
      stop_requested_.store(true, std::memory_order_release);
    }
    ack_cv_.notify_all();
  } else if (const auto* regroup = std::get_if<events::Regroup>(&*message)) {
    {
      std::lock_guard<std::mutex> lock(ack_mu_);
      if (regroup->generation > regroup_.generation) regroup_ = *regroup;
    }
    ack_cv_.notify_all();
  }
}

int AgentChannel::WaitForRegroup(int min_generation, std::chrono::milliseconds limit) {
  std::unique_lock<std::mutex> lock(ack_mu_);
  ack_cv_.wait_for(lock, limit,
                   [&] { return regroup_.generation >= min_generation || stop_requested(); });
  if (regroup_.generation >= min_generation) return regroup_.generation;
  return stop_requested() ? -1 : 0;
}

events::Regroup AgentChannel::LatestRegroup() {
  std::lock_guard<std::mutex> lock(ack_mu_);
  return regroup_;
}

}  // namespace worker
}  // namespace traintl
