// The Raft listener's "host:port" address: parsing, the loopback test that decides
// whether a cluster secret is required, choosing a free port for port 0, and telling
// "address in use" apart from C-Raft's bare "I/O error". Internal to RaftNode.
//
// Thread-safety: free functions with no shared state.
#pragma once

#include <string>

#include "common/result.h"
#include "common/status.h"

namespace traintl::raft_internal {

// Splits "host:port"; port must be a decimal number in [0, 65535].
Status SplitHostPort(const std::string& address, std::string* host, int* port);

// True for "localhost" and IPv4 127.0.0.0/8 literals.
bool IsLoopbackHost(const std::string& host);

// A port of `host` (an IPv4 literal) that is free right now (bind to port 0, read it back,
// close). Another process could take it before raft listens on it; Start then fails with a
// clear error.
Result<int> PickFreePort(const std::string& host);

// True when "ipv4:port" cannot be bound because it is in use. C-Raft reports a failed
// listen as a bare "I/O error"; this tells the usual cause.
bool AddressInUse(const std::string& address);

}  // namespace traintl::raft_internal
