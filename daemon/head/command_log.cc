#include "daemon/head/command_log.h"

#include <boost/asio/post.hpp>

#include "daemon/consensus/raft_node.h"

namespace traintl {

void RaftCommandLog::Propose(std::string command,
                             std::function<void(Result<nlohmann::json>)> done) {
  auto* io = &io_;
  raft_->Propose(std::move(command), [io, done = std::move(done)](Result<std::string> r) {
    // Runs on the raft loop thread: hop back to the io_context thread.
    boost::asio::post(*io, [done, r = std::move(r)]() {
      if (!r.ok()) {
        done(r.status());
      } else {
        done(cmd::DecodeAnswerText(*r));
      }
    });
  });
}

}  // namespace traintl
