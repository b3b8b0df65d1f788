// copy_methods_bench: what the asynchronous checkpoint's memory snapshot should copy with.
// Copies one file (page cache hot, as a checkpoint just written is) into an unlinked file
// on /dev/shm, as CheckpointSnapshot::Take does, by each method, and prints GB/s (median
// of --reps runs). Usage: copy_methods_bench [--mb 512] [--reps 3] [--dir /tmp] [--shm /dev/shm]
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "worker/checkpoint_snapshot.h"

namespace {

bool ReadWrite(int in, int out, size_t size, size_t buf_size) {
  std::vector<char> buf(buf_size);
  for (off_t off = 0; off < static_cast<off_t>(size);) {
    ssize_t n = ::pread(in, buf.data(), buf.size(), off);
    if (n <= 0) return false;
    for (ssize_t w = 0; w < n;) {
      ssize_t k = ::write(out, buf.data() + w, static_cast<size_t>(n - w));
      if (k <= 0) return false;
      w += k;
    }
    off += n;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  size_t mb = 512;
  int reps = 3;
  std::string dir = "/tmp", shm = "/dev/shm";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--mb") mb = std::strtoul(argv[i + 1], nullptr, 10);
    if (a == "--reps") reps = std::atoi(argv[i + 1]);
    if (a == "--dir") dir = argv[i + 1];
    if (a == "--shm") shm = argv[i + 1];
  }
  const size_t size = mb << 20;
  const std::string src = dir + "/copy_methods_bench." + std::to_string(::getpid());
  {
    std::vector<char> data(size);
    for (size_t i = 0; i < size; ++i) data[i] = static_cast<char>(i * 2654435761u >> 13);
    FILE* f = std::fopen(src.c_str(), "wb");
    if (f == nullptr || std::fwrite(data.data(), 1, size, f) != size || std::fclose(f) != 0) {
      std::perror("writing the source");
      return 1;
    }
  }
  const int in = ::open(src.c_str(), O_RDONLY);
  using Method = std::function<bool(int, int)>;
  const std::vector<std::pair<std::string, Method>> methods = {
      {"copy_file_range",
       [&](int i, int o) {
         loff_t off = 0;
         while (off < static_cast<loff_t>(size)) {
           ssize_t n = ::copy_file_range(i, &off, o, nullptr, size - off, 0);
           if (n <= 0) return false;
         }
         return true;
       }},
      {"sendfile",
       [&](int i, int o) {
         off_t off = 0;
         while (off < static_cast<off_t>(size)) {
           ssize_t n = ::sendfile(o, i, &off, size - off);
           if (n <= 0) return false;
         }
         return true;
       }},
      {"read+write 1 MiB", [&](int i, int o) { return ReadWrite(i, o, size, 1 << 20); }},
      {"read+write 16 MiB", [&](int i, int o) { return ReadWrite(i, o, size, 16 << 20); }},
      {"mmap src + write",
       [&](int i, int o) {
         void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED | MAP_POPULATE, i, 0);
         if (p == MAP_FAILED) return false;
         bool ok = true;
         for (size_t w = 0; w < size && ok;) {
           ssize_t k = ::write(o, static_cast<char*>(p) + w, size - w);
           ok = k > 0;
           w += k > 0 ? static_cast<size_t>(k) : 0;
         }
         ::munmap(p, size);
         return ok;
       }},
      {"mmap both + memcpy",
       [&](int i, int o) {
         if (::ftruncate(o, static_cast<off_t>(size)) != 0) return false;
         void* s = ::mmap(nullptr, size, PROT_READ, MAP_SHARED | MAP_POPULATE, i, 0);
         void* d = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, o, 0);
         if (s == MAP_FAILED || d == MAP_FAILED) return false;
         std::memcpy(d, s, size);
         ::munmap(s, size);
         ::munmap(d, size);
         return true;
       }},
      {"CopyFileContents (used)",
       [&](int i, int o) { return traintl::worker::CopyFileContents(i, o, size).ok(); }},
  };
  std::printf("%zu MiB from %s (page cache) to an O_TMPFILE on %s, median of %d\n", mb, dir.c_str(),
              shm.c_str(), reps);
  for (const auto& [name, method] : methods) {
    std::vector<double> gbps;
    bool ok = true;
    for (int r = 0; r < reps && ok; ++r) {
      const int out = ::open(shm.c_str(), O_TMPFILE | O_RDWR, 0600);
      const auto t0 = std::chrono::steady_clock::now();
      ok = out >= 0 && method(in, out);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (out >= 0) ::close(out);  // frees the copy before the next
      gbps.push_back(static_cast<double>(size) / s / 1e9);
    }
    std::sort(gbps.begin(), gbps.end());
    if (ok) {
      std::printf("  %-26s %6.2f GB/s\n", name.c_str(), gbps[gbps.size() / 2]);
    } else {
      std::printf("  %-26s fails here (%s)\n", name.c_str(), std::strerror(errno));
    }
  }
  ::close(in);
  ::unlink(src.c_str());
  return 0;
}
