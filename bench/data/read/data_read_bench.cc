// data_read_bench URI [ROUNDS [THREADS [BATCH [digest]]]]: reads every row of a dataset (CSV,
// JSON Lines, .npy or Parquet) as one rank through Dataset::Open + BatchReader, every column
// as float32 (batches of BATCH rows, default 4096 as bench_train.cc asks
// iter_torch_batches), and prints one JSON line per round: seconds, CPU seconds, rows, the
// bytes of the files and the bytes read. No LibTorch, so it isolates the data layer:
// bench/data/bench.py measures the whole path into tensors. With "digest", also a hash of
// every value read (FNV-1a of each batch's columns, in order), so that two files meant to
// hold the same rows (bench_parquet.py's CSV and Parquet) can be checked to read as the
// same float32 bits; the hashing is timed too, so not for timing.
#include <sys/resource.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "worker/data/batch_reader.h"
#include "worker/data/dataset.h"

using namespace traintl::data;

namespace {

double CpuSeconds() {
  struct rusage u;
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

uint64_t Fnv1a(uint64_t h, const char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(p[i]);
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s URI [ROUNDS [THREADS [BATCH [digest]]]]\n", argv[0]);
    return 2;
  }
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 0;
  const int batch = argc > 4 ? std::atoi(argv[4]) : 4096;
  const bool digest = argc > 5 && std::strcmp(argv[5], "digest") == 0;
  for (int round = 0; round < rounds; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = CpuSeconds();
    DatasetConfig config;
    config.name = "bench";
    config.uri = argv[1];
    auto ds = Dataset::Open(config, {});
    if (!ds.ok()) {
      std::fprintf(stderr, "%s\n", ds.status().message().c_str());
      return 1;
    }
    IterOptions o;
    o.batch_size = batch;
    o.num_threads = threads;
    for (const auto& c : (*ds)->schema()) o.column_types[c.name] = DType::kFloat32;
    auto reader = BatchReader::Start(*ds, o);
    if (!reader.ok()) {
      std::fprintf(stderr, "%s\n", reader.status().message().c_str());
      return 1;
    }
    int64_t rows = 0;
    double checksum = 0;
    uint64_t hash = 14695981039346656037ull;
    for (;;) {
      auto b = (*reader)->Next();
      if (!b.ok()) {
        std::fprintf(stderr, "%s\n", b.status().message().c_str());
        return 1;
      }
      if (!*b) break;
      rows += (*b)->num_rows;
      checksum += (*b)->columns[0].As<float>()[0];  // touch the data
      if (digest) {
        for (const auto& c : (*b)->columns) hash = Fnv1a(hash, c.values.data(), c.values.size());
      }
      // Handed back, as the worker's dataset service does when the training code lets go.
      BatchReader::GiveBack((*reader)->batch_pool().get(), std::move(**b));
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = CpuSeconds() - c0;
    char digest_text[64] = "";
    if (digest) {
      std::snprintf(digest_text, sizeof digest_text, ", \"digest\": \"%016llx\"",
                    static_cast<unsigned long long>(hash));
    }
    uint64_t file_bytes = 0;
    for (const auto& f : (*ds)->files()) {
      struct stat st;
      if (::stat(f.file.path.c_str(), &st) == 0) file_bytes += static_cast<uint64_t>(st.st_size);
    }
    std::printf(
        "{\"format\": \"%s\", \"seconds\": %.4f, \"cpu_seconds\": %.4f, \"rows\": %lld, "
        "\"file_bytes\": %llu, \"bytes_read\": %lld, \"peak_buffered_bytes\": %lld, "
        "\"checksum\": %.3f%s}\n",
        FormatName((*ds)->format()), seconds, cpu, static_cast<long long>(rows),
        static_cast<unsigned long long>(file_bytes),
        static_cast<long long>((*reader)->stats().bytes_read),
        static_cast<long long>((*reader)->stats().peak_buffered_bytes), checksum, digest_text);
    std::fflush(stdout);
  }
  return 0;
}
