#include "daemon/systemd/service_status.h"

namespace traintl {
namespace systemd {

bool ServiceStatus::IsReady(const NodeState& state) {
  return state.api_listening && state.member && (state.is_head || !state.head.empty());
}

std::string ServiceStatus::Describe(const NodeState& state) {
  if (!state.api_listening) return "starting";
  const std::string api = "; API on " + state.api_address;
  if (!state.member) return "waiting to join a cluster" + api;
  if (state.is_head) return "role=head" + api;
  if (state.head.empty()) return "role=agent head=unknown (electing a head)" + api;
  return "role=agent head=" + state.head + api;
}

std::string ServiceStatus::Update(const NodeState& state) {
  const std::string text = Describe(state);
  std::string sent;
  if (!ready_ && IsReady(state)) {
    ready_ = true;
    // Best effort, like every notification: a status systemd missed is sent again with
    // the next change.
    notifier_->Ready(text).IgnoreError();
    sent = "READY=1\nSTATUS=" + text;
  } else if (text != last_) {
    notifier_->SetStatus(text).IgnoreError();
    sent = "STATUS=" + text;
  }
  last_ = text;
  return sent;
}

}  // namespace systemd
}  // namespace traintl
