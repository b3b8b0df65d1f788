// ServiceStatus: what traintld tells systemd about itself through a Notifier. READY=1
// once the node is up (its API listens, it is a member of a cluster it bootstrapped or
// joined, and a head is known), then a STATUS= line whenever its role or the head
// changes, so that `systemctl status traintld` says "role=head ..." or "role=agent
// head=...".
//
// Thread-safety: not thread-safe; call it from the daemon's event loop.
#pragma once

#include <string>

#include "daemon/systemd/sd_notify.h"

namespace traintl {
namespace systemd {

// The facts the status is made of; the daemon samples them on its event loop.
struct NodeState {
  bool api_listening = false;  // the HTTP API accepts connections
  std::string api_address;     // "host:port" it listens on
  bool member = false;         // bootstrapped a cluster or was added to one
  bool is_head = false;        // this node is the head (Raft leader, log caught up)
  std::string head;            // the head: node id or address; "" = unknown
};

class ServiceStatus {
 public:
  // `notifier` is not owned and must outlive this object.
  explicit ServiceStatus(Notifier* notifier) : notifier_(notifier) {}

  // Sends READY=1 with the status the first time `state` is ready, and afterwards a
  // STATUS= line whenever the text changes. Returns the message sent ("" when none was
  // needed), which the daemon may log.
  std::string Update(const NodeState& state);

  // True once READY=1 was sent.
  bool ready() const { return ready_; }
  // The last status text sent.
  const std::string& last_status() const { return last_; }

  // Whether `state` counts as started.
  static bool IsReady(const NodeState& state);
  // The one-line status text for `state`.
  static std::string Describe(const NodeState& state);

 private:
  Notifier* notifier_;
  bool ready_ = false;
  std::string last_;
};

}  // namespace systemd
}  // namespace traintl
