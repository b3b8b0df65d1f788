// Dataset: one dataset of a job spec ("datasets": name -> {uri, format, split}) as one rank
// reads it: its files, their layouts, the schema, and, when needed, a row index.
//
// Opening reads only the heads of the files (headers, and sample rows of the first file
// to infer column types), so it is cheap. The row index (every file cut into chunks of
// about ShardOptions::chunk_bytes at record boundaries, with their row counts) needs one
// scan of every file; it is built when a split dataset has more than one rank (so that
// ranks get row-balanced shards) and when a shuffled epoch first needs it.
//
// Sharding (PlanEpoch): the dataset's rows, in file order (or, when shuffling, in an order
// of chunks permuted per epoch, the same on every rank), are cut into world_size
// contiguous ranges of ceil(N / world_size) rows; the last ranges wrap around to the start
// so that every rank gets the same number of rows (at most world_size - 1 rows are read
// twice per epoch, as torch's DistributedSampler pads). Without split every rank reads
// every row.
//
// Thread-safety: a Dataset is immutable after Open except for the lazily built index,
// which is guarded; it may be shared by concurrent BatchReaders.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/thread_annotations.h"
#include "worker/data/columns.h"
#include "worker/data/npy.h"
#include "worker/data/source.h"

namespace traintl {
namespace data {

enum class Format { kCsv, kJsonl, kNpy, kParquet };
const char* FormatName(Format format);

struct ShardOptions {
  // CSV files without a header row: the names of their columns. Default: none (every CSV
  // file starts with a header row).
  std::vector<std::string> column_names;
  // Column types that replace the inferred ones (e.g. {"label": kInt64, "x": kFloat32}).
  // For .npy data the one column is "data". Default: none.
  std::map<std::string, DType> column_types;
  // Column types are inferred from at most this many rows at the start of the first file.
  // Default: 10000.
  int64_t infer_rows = 10000;
  // Bytes of the first file read for inference (at most). Default: 1 MiB.
  size_t infer_bytes = 1 << 20;
  // The row index cuts files into chunks of about this many bytes: the unit of shuffling
  // order and of seeking. Default: 1 MiB.
  size_t chunk_bytes = 1 << 20;
  HttpOptions http;
  // A directory where the ranks of a node share the row index, so that one of them scans
  // each file (index_cache.h); "" = not shared. DatasetService passes the context's
  // "data_index_dir" (the agent's <data_dir>/data_index), else <trial_dir>/.data_index.
  // Default: "".
  std::string index_dir;
};

// What building the row index did, per data file (index_cache.h).
struct IndexStats {
  int64_t files_scanned = 0;     // scanned (line-counted) by this Dataset
  int64_t files_loaded = 0;      // loaded from the shared index: another rank's scan
  int64_t files_stored = 0;      // scanned and stored in the shared index
  int64_t entries_rejected = 0;  // shared entries found corrupt or truncated (then rebuilt)
};

// Where the dataset is and which part of it this rank reads.
struct DatasetConfig {
  std::string name;
  std::string uri;
  std::string format;  // "" = from the extension of the URI or of the first file
  bool split = true;
  int rank = 0;
  int world_size = 1;
};

struct ParquetLayout;  // parquet_format.h

// One file of the dataset, as its head (or, for Parquet, its footer) describes it.
struct FileInfo {
  DataFile file;
  uint64_t data_offset = 0;  // the first byte of the first row
  int64_t data_line = 1;     // its line (text formats)
  // CSV: for each field of the file's records, the schema column it is; Parquet: for each
  // column (leaf) of the file.
  std::vector<int> field_column;
  NpyHeader npy;                                 // .npy only
  std::shared_ptr<const ParquetLayout> parquet;  // Parquet only
};

// A run of rows of one file, at a record boundary. Parquet: one row group, `offset` its
// index and `line` its first row (see parquet_format.h).
struct Chunk {
  int file = 0;
  uint64_t offset = 0;
  int64_t line = 1;
  int64_t rows = 0;
};

// What one rank reads of one file in an epoch: from `offset` (a record boundary on `line`),
// skip `skip_rows` rows, then read `rows` rows (-1: to the end of the file).
struct Segment {
  int file = 0;
  uint64_t offset = 0;
  int64_t line = 1;
  int64_t skip_rows = 0;
  int64_t rows = -1;
};
bool operator==(const Segment& a, const Segment& b);

// The rows each rank reads per epoch: ceil(total / world_size) when split, else total.
int64_t RowsPerRank(int64_t total_rows, int world_size, bool split);

// The segments `rank` reads in `epoch` (see the file comment). Adjacent chunks of a file
// become one segment. Pure.
std::vector<Segment> PlanEpoch(const std::vector<Chunk>& chunks, int rank, int world_size,
                               bool split, bool shuffle, uint64_t seed, int64_t epoch);

// A 64-bit mix of its inputs (splitmix64), for seeding.
uint64_t MixSeed(uint64_t a, uint64_t b);

// SplitMix64: a small, fast generator whose sequence is the same on every platform (unlike
// the standard distributions), so that every rank and node shuffles alike.
class SplitMix {
 public:
  explicit SplitMix(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n), n > 0 (the modulo bias is below 2^-40 for n < 2^24).
  uint64_t Below(uint64_t n) { return Next() % n; }

 private:
  uint64_t state_;
};

class Dataset {
 public:
  // Resolves the files, reads their heads, infers the schema; builds the row index when
  // the dataset is split over several ranks. `cancel` (may be null) aborts HTTP waits.
  static Result<std::shared_ptr<Dataset>> Open(const DatasetConfig& config,
                                               const ShardOptions& options,
                                               const std::atomic<bool>* cancel = nullptr);

  const DatasetConfig& config() const { return config_; }
  const ShardOptions& options() const { return options_; }
  Format format() const { return format_; }
  const Schema& schema() const { return schema_; }
  // Per schema column: whether its type was inferred (not given in column_types).
  const std::vector<bool>& inferred() const { return inferred_; }
  const std::vector<FileInfo>& files() const { return files_; }

  // True when reading needs the row index (split over several ranks, or shuffled).
  bool NeedsIndex(bool shuffle) const {
    return shuffle || (config_.split && config_.world_size > 1);
  }
  // The row index; built on the first call (one scan of every file), then cached.
  Result<std::shared_ptr<const std::vector<Chunk>>> Index(const std::atomic<bool>* cancel);
  // Total rows, when known without a scan (.npy) or once the index exists.
  std::optional<int64_t> TotalRows() const;
  // What building the index did (zeros before it is built).
  IndexStats index_stats() const;

 private:
  Dataset() = default;
  Status ReadLayouts(const std::atomic<bool>* cancel);
  Result<std::vector<Chunk>> ScanFile(int index, const std::atomic<bool>* cancel) const;

  DatasetConfig config_;
  ShardOptions options_;
  Format format_ = Format::kCsv;
  Schema schema_;
  std::vector<bool> inferred_;
  std::vector<FileInfo> files_;

  mutable std::mutex index_mu_;
  std::shared_ptr<const std::vector<Chunk>> index_ TRAINTL_GUARDED_BY(index_mu_);
  IndexStats index_stats_ TRAINTL_GUARDED_BY(index_mu_);
};

}  // namespace data
}  // namespace traintl
