#include "worker/data/mapped_files.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

namespace traintl {
namespace data {
namespace {

// A reader maps a file per open shard file (a glob of many files is read one or two at a
// time per thread), so 256 slots are plenty; a fault in a mapping beyond them is unnamed.
constexpr int kSlots = 256;
constexpr size_t kNameBytes = 512;

struct Slot {
  std::atomic<bool> taken{false};
  // 0 while the slot is being filled or emptied: the handler skips it.
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  char name[kNameBytes] = {};
};

Slot g_slots[kSlots];
std::mutex g_install_mu;

// The handler's message, built without allocating (async-signal-safe): appends to a fixed
// buffer, cutting what does not fit.
class Line {
 public:
  void Add(const char* s) {
    while (*s != '\0' && n_ + 1 < sizeof buf_) buf_[n_++] = *s++;
  }
  void Add(uint64_t v) {
    char digits[24];
    int i = 0;
    do {
      digits[i++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    while (i > 0 && n_ + 1 < sizeof buf_) buf_[n_++] = digits[--i];
  }
  const char* data() const { return buf_; }
  size_t size() const { return n_; }

 private:
  char buf_[kNameBytes + 512];
  size_t n_ = 0;
};

// Fills `line` for a fault at `addr`; false when no registered mapping holds it.
bool Describe(uintptr_t addr, Line* line) {
  for (Slot& s : g_slots) {
    const uintptr_t begin = s.begin.load(std::memory_order_acquire);
    if (begin == 0 || addr < begin || addr >= s.end.load(std::memory_order_acquire)) continue;
    line->Add("traintl-worker: SIGBUS at byte ");
    line->Add(static_cast<uint64_t>(addr - begin));
    line->Add(" of data file ");
    line->Add(s.name);
    line->Add(
        ": the file is shorter than when it was opened (cut short or rewritten in place "
        "while the job read it); replace data files by renaming a new file over the old "
        "one\n");
    return true;
  }
  return false;
}

void OnSigbus(int sig, siginfo_t* info, void* ucontext) {
  (void)ucontext;
  const int saved_errno = errno;
  // A fault (si_code > 0) has its address in si_addr; kill() puts the sender there.
  Line line;
  if (info != nullptr && info->si_code > 0 &&
      Describe(reinterpret_cast<uintptr_t>(info->si_addr), &line)) {
    (void)!::write(STDERR_FILENO, line.data(), line.size());
  }
  // The default action, as without us: restored, then the fault happens again on return
  // (a SIGBUS sent by kill() is raised again) and ends the process with SIGBUS. Nothing is
  // chained: the handler is only ever installed over the default (EnsureInstalled).
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  if (info == nullptr || info->si_code <= 0) ::raise(sig);
  errno = saved_errno;
}

// Installs OnSigbus when SIGBUS has its default action (or is ignored, which a fault
// overrides anyway). Checked at every registration (a syscall per mapped file), not once:
// a handler it installed is gone after the first fault, or after code that set handlers of
// its own restored what it found (a test framework). A handler someone else installed is
// left alone: chaining to it, or it to us, could loop (Python's faulthandler re-raises
// through the handler it found).
void EnsureInstalled() {
  std::lock_guard<std::mutex> l(g_install_mu);
  struct sigaction current;
  if (::sigaction(SIGBUS, nullptr, &current) != 0) return;
  if (current.sa_flags & SA_SIGINFO) return;  // ours, or someone else's
  if (current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN) return;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = OnSigbus;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, nullptr);
}

}  // namespace

int RegisterMapping(const char* data, uint64_t size, const std::string& name) {
  EnsureInstalled();
  for (int i = 0; i < kSlots; ++i) {
    Slot& s = g_slots[i];
    bool expected = false;
    if (!s.taken.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) continue;
    const size_t n = std::min(name.size(), kNameBytes - 1);
    std::memcpy(s.name, name.data(), n);
    s.name[n] = '\0';
    const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
    s.end.store(begin + size, std::memory_order_release);
    s.begin.store(begin, std::memory_order_release);
    return i;
  }
  return -1;
}

void UnregisterMapping(int slot) {
  if (slot < 0 || slot >= kSlots) return;
  Slot& s = g_slots[slot];
  s.begin.store(0, std::memory_order_release);
  s.end.store(0, std::memory_order_release);
  s.taken.store(false, std::memory_order_release);
}

std::string DescribeMappingFault(const void* addr) {
  Line line;
  if (!Describe(reinterpret_cast<uintptr_t>(addr), &line)) return "";
  return std::string(line.data(), line.size());
}

}  // namespace data
}  // namespace traintl
