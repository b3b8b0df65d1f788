// CommandLog: where the head proposes state changes. The production implementation
// (RaftCommandLog) goes through the replicated Raft log; tests can apply commands to an
// FSM directly. Either way every state change is a command applied by the one FSM.
//
// Thread-safety: Propose may be called from the io_context thread only, and `done` runs
// on that thread too.
#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "proto/fsm_answers.h"

namespace traintl {

class RaftNode;

class CommandLog {
 public:
  virtual ~CommandLog() = default;
  // `done` gets the FSM's result object when it says {"ok":true}; FailedPrecondition with
  // its error when the FSM refused the command; Unavailable when it was not committed
  // (not leader, leadership lost: outcome unknown, shutting down).
  virtual void Propose(std::string command, std::function<void(Result<nlohmann::json>)> done) = 0;
};

// Proposes through a RaftNode and hands results back to the io_context thread.
class RaftCommandLog : public CommandLog {
 public:
  RaftCommandLog(boost::asio::io_context& io, RaftNode* raft) : io_(io), raft_(raft) {}
  void Propose(std::string command, std::function<void(Result<nlohmann::json>)> done) override;

 private:
  boost::asio::io_context& io_;
  RaftNode* const raft_;
};

// Adapts a callback of the command's typed answer (proto/fsm_answers.h) to Propose's
// `done`: a refusal or a failed commit arrives as the Status, an answer as its struct.
template <typename A>
std::function<void(Result<nlohmann::json>)> Answered(std::function<void(Result<A>)> done) {
  return [done = std::move(done)](Result<nlohmann::json> r) {
    if (!r.ok()) return done(r.status());
    done(cmd::AnswerFromJson<A>(*r));
  };
}

}  // namespace traintl
