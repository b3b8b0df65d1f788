#include "daemon/head/command_log.h"

#include <boost/asio/post.hpp>

#include "common/json_depth.h"
#include "daemon/consensus/raft_node.h"

namespace traintl {

Result<nlohmann::json> DecodeFsmResult(const std::string& text) {
  auto j = ParseJsonBounded(text);
  if (!j.is_object()) return Status::Internal("unreadable FSM result");
  if (j.value("ok", false) != true)
    return Status::FailedPrecondition(j.value("error", std::string("refused")));
  return j;
}

void RaftCommandLog::Propose(std::string command,
                             std::function<void(Result<nlohmann::json>)> done) {
  auto* io = &io_;
  raft_->Propose(std::move(command), [io, done = std::move(done)](Result<std::string> r) {
    // Runs on the raft loop thread: hop back to the io_context thread.
    boost::asio::post(*io, [done, r = std::move(r)]() {
      if (!r.ok()) {
        done(r.status());
      } else {
        done(DecodeFsmResult(*r));
      }
    });
  });
}

}  // namespace traintl
