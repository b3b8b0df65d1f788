// ForkWithDefaultSignals: fork() for a process that catches signals. Between fork and
// exec the child is a copy of the parent, handlers included: a signal sent to the child
// then (a stop that comes while a worker is being started) would run the parent's handler
// in the child, which writes into the parent's self-pipe and makes the parent believe it
// received the signal itself. Here the child starts with every signal blocked and every
// handler back to its default action, so such a signal waits, and acts on the child, once
// the child calls UnblockAllSignals (just before exec, or at once).
//
// Thread-safety: may be called from any thread; the child may only make async-signal-safe
// calls (UnblockAllSignals is one).
#pragma once

#include <sys/types.h>

namespace traintl {

// fork(): -1 (errno set) on failure, 0 in the child, the child's pid in the parent. The
// parent's signal mask is as it was before the call.
pid_t ForkWithDefaultSignals();

// Empties the calling thread's signal mask: pending signals are delivered now.
void UnblockAllSignals();

}  // namespace traintl
