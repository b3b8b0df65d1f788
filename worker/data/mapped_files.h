// The data files this process has mapped (MappedFile), so that a SIGBUS, which is how a
// mapped file cut short while it is read shows itself, names the file instead of leaving
// the user with "killed by SIGBUS". Registering installs a SIGBUS handler where SIGBUS has
// its default action (a handler someone else installed is left alone). It writes one line
// to stderr (the rank's log, whose tail the job's failure shows) when the faulting address
// lies in a registered mapping, then restores the default action, so the process still
// ends with SIGBUS and the job restarts as its failure_config allows.
//
// Thread-safety: every function may be called from any thread; the handler only reads
// the table (lock-free slots), so it may run while another thread registers.
#pragma once

#include <cstdint>
#include <string>

namespace traintl {
namespace data {

// Registers [data, data + size) as the mapping of file `name`. Returns the slot to pass
// to UnregisterMapping, or -1 when every slot is taken (a fault there then goes unnamed).
int RegisterMapping(const char* data, uint64_t size, const std::string& name);
void UnregisterMapping(int slot);

// The line the handler writes for a fault at `addr`; "" when no registered mapping holds
// it. For tests.
std::string DescribeMappingFault(const void* addr);

}  // namespace data
}  // namespace traintl
