// BatchReader: one epoch of one rank's shard of a Dataset, streamed as batches.
//
// Three stages run on background threads while the training code consumes batches:
//   reader   opens each segment of the epoch's plan (PlanEpoch) and cuts its bytes into
//            blocks of whole records (about block_bytes each), counting rows and lines
//            where it must (quotes, row limits); a CSV block without a quote in a
//            segment read to the end of its file, or in the whole index chunks of a
//            segment with a row limit of a local file (the index counted their rows:
//            SplitAtChunks), is cut at its last newline uncounted. A local CSV, JSON Lines
//            or Parquet file is mapped (MappedFile) and its blocks are windows of the
//            mapping, read in place; .npy and http(s) files are read into buffers;
//   parsers  num_threads threads turn blocks into columns (and count the uncounted);
//   batcher  puts the parsed rows, in order, into batches of batch_size rows (through the
//            local shuffle buffer when shuffling) and queues up to prefetch_batches of them;
//            it also works out the first line of uncounted blocks, for error messages.
// Memory stays bounded whatever the data size: at most num_threads + 2 blocks (raw or
// parsed) are in flight, plus the queued batches, the batch being filled and the shuffle
// buffer. The first batch is ready as soon as its rows are parsed.
//
// A batch that lies whole inside one parsed block of at most kMaxSlicedBlockBatches
// batches' rows, without shuffling and without string columns, is a slice of the block,
// not a copy (most batches of a Parquet row group; some of CSV blocks): a caller that
// keeps such a batch keeps its whole block alive (up to kMaxSlicedBlockBatches times a
// batch's memory); stats() count the block until Next() returns its last slice. Queued
// slices keep their blocks too, so the bound above grows by up to prefetch_batches blocks.
//
// Shuffling is a streaming shuffle: the order of the index chunks is permuted per epoch
// (the same on every rank, see PlanEpoch), and rows pass through a shuffle buffer of
// shuffle_buffer_rows rows from which they leave in random order. It is deterministic for
// a given (seed, epoch, rank, options) and mixes rows within a window, not globally.
//
// Errors (bad data, unreadable files) are returned by Next() in order: the batches before
// the bad row are delivered first. After an error, Next() keeps returning it.
//
// Thread-safety: Next() is called by one thread at a time; stats() from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "common/thread_annotations.h"
#include "worker/data/columns.h"
#include "worker/data/dataset.h"
#include "worker/data/free_list.h"
#include "worker/data/text_formats.h"

namespace traintl {
namespace data {

namespace parquet {
struct DecodeScratch;
}

struct IterOptions {
  // Rows per batch (the last one may be smaller). Default: 256.
  int64_t batch_size = 256;
  // Drop the last batch when it has fewer than batch_size rows. Default: false.
  bool drop_last = false;
  // Streaming shuffle (see the file comment). Default: false.
  bool shuffle = false;
  uint64_t seed = 0;
  // Seeds the shuffle together with `seed`. Default: 0.
  int64_t epoch = 0;
  // The columns to read, in this order; empty = every column. Default: empty.
  std::vector<std::string> columns;
  // Types to parse columns as in this epoch, replacing the shard's (e.g. float32 for a
  // float64 column: parsed straight into float32, no conversion pass). Numeric columns
  // take numeric types; CSV columns any. Default: none.
  std::map<std::string, DType> column_types;
  // Batches prepared ahead of the consumer. Default: 2.
  int prefetch_batches = 2;
  // Rows held by the shuffle buffer. Default: 10000.
  int64_t shuffle_buffer_rows = 10000;
  // Parser threads; 0 = min(4, hardware threads) (the worker's dataset service passes
  // min(4, cores / ranks on the node) instead). Default: 0.
  int num_threads = 0;
  // Bytes per block read and parsed as one unit. Default: 1 MiB.
  size_t block_bytes = 1 << 20;
  // Read local CSV, JSON Lines and Parquet files in place (mapped, see the file comment);
  // false reads them into buffers, as http(s) files are. Default: true.
  bool read_in_place = true;
};

struct IterStats {
  // The most bytes held at once by the pipeline (blocks, parsed columns, queued and
  // partly filled batches, shuffle buffer), counted by capacity.
  int64_t peak_buffered_bytes = 0;
  int64_t buffered_bytes = 0;
  // Bytes read from the files so far, and of those, read in place (mapped).
  int64_t bytes_read = 0;
  int64_t bytes_in_place = 0;
  int64_t rows = 0;
  int64_t batches = 0;
};

// See the file comment: larger parsed blocks are copied into batches.
inline constexpr int64_t kMaxSlicedBlockBatches = 32;

class BatchReader {
 public:
  // Starts the epoch. Fails (bad options, unknown columns) before any thread starts.
  static Result<std::unique_ptr<BatchReader>> Start(std::shared_ptr<Dataset> dataset,
                                                    const IterOptions& options);
  ~BatchReader();
  BatchReader(const BatchReader&) = delete;
  BatchReader& operator=(const BatchReader&) = delete;

  // The columns batches have.
  const Schema& schema() const { return schema_; }
  // The next batch; nullptr at the end of the epoch.
  Result<std::unique_ptr<RowBlock>> Next();
  IterStats stats() const;
  // Where a caller may give a batch it is done with (from any thread, also after the
  // reader is gone), so that later batches reuse its memory rather than fault in fresh
  // pages. Optional: a batch simply destroyed is fine. A slice (RowBlock::lender set) has
  // no memory of its own to reuse: GiveBack drops it instead (which frees its block).
  std::shared_ptr<FreeList<RowBlock>> batch_pool() const { return batch_pool_; }
  // Gives `batch` to `pool` (a batch_pool()), or drops it when it is a slice.
  static void GiveBack(FreeList<RowBlock>* pool, RowBlock batch) {
    if (!batch.lender) pool->Give(std::move(batch));
  }

 private:
  struct Unit;
  struct Parsed;

  BatchReader(std::shared_ptr<Dataset> dataset, IterOptions options);
  void ReaderMain();
  void ParserMain();
  void BatcherMain();
  Status ReadSegments();
  // Reads `seg` up to byte `end` of its file at most (a record boundary; UINT64_MAX = the
  // end of the file).
  Status ReadTextSegment(const Segment& seg, uint64_t end = UINT64_MAX);
  Status ReadNpySegment(const Segment& seg);
  // File `file` mapped (MappedFile, kept for the next segment of the same file), to be read
  // in place; null where it is not local or cannot be mapped (then read it into buffers).
  // `expected_size` as for MappedFile::Open.
  Result<std::shared_ptr<const MappedFile>> MapFile(int file, uint64_t expected_size);
  Status ReadParquetSegment(const Segment& seg);  // batch_reader_parquet.cc
  // Parquet: the leaf of file `file` that each output column is.
  std::vector<int> ParquetLeaves(int file) const;
  // Hands a block (or the end, or an error) to the parsers; false when stopping.
  bool Emit(std::unique_ptr<Unit> unit);
  // Parses `unit` as if its first line were `line`; *lines (when not null) gets the lines
  // its records took (CSV; 0 otherwise). `scratch` (may be null): the calling parser's
  // buffers for decoding Parquet pages.
  Status ParseUnit(const Unit& unit, int64_t line, RowBlock* out, int64_t* lines,
                   parquet::DecodeScratch* scratch = nullptr) const;
  // `block` shared by the batches that will be slices of it (SliceRows); it goes back to
  // parsed_blocks_ when the last of them does.
  std::shared_ptr<const RowBlock> Lend(RowBlock block) const;
  // Queues a finished batch (or the end / an error) for Next(); false when stopping.
  // `accounted`: the bytes the batch stays accounted for until Next() returns it.
  bool Deliver(std::unique_ptr<RowBlock> batch, int64_t accounted, Status status = Status::Ok(),
               bool end = false);
  void Account(int64_t delta);

  const std::shared_ptr<Dataset> dataset_;
  const IterOptions options_;
  Schema schema_;                                    // the output columns
  std::vector<int> out_of_schema_;                   // schema column -> output column, or -1
  std::vector<bool> inferred_;                       // per output column
  std::vector<std::vector<FieldPlan>> field_plans_;  // CSV: per file

  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;

  std::mutex mu_;
  // One per kind of waiter, so that a change wakes only the thread that waits for it (a
  // single condition variable woke all five kinds of threads on every block and batch:
  // thousands of needless context switches per epoch on a machine with few cores).
  std::condition_variable work_cv_;    // parsers: work_ not empty
  std::condition_variable parsed_cv_;  // batcher: parsed_ has the next block
  std::condition_variable space_cv_;   // reader: in_flight_ below max_in_flight_
  std::condition_variable ready_cv_;   // Next(): ready_ not empty
  std::condition_variable room_cv_;    // batcher: ready_ below prefetch_batches
  std::deque<std::unique_ptr<Unit>> work_ TRAINTL_GUARDED_BY(mu_);  // blocks for the parsers
  std::map<int64_t, std::unique_ptr<Parsed>> parsed_ TRAINTL_GUARDED_BY(mu_);  // by seq number
  int64_t next_seq_ TRAINTL_GUARDED_BY(mu_) = 0;   // of the next block the reader emits
  int64_t in_flight_ TRAINTL_GUARDED_BY(mu_) = 0;  // blocks emitted, not yet batched
  const int64_t max_in_flight_;                    // blocks: parser threads + 2
  struct Ready {
    std::unique_ptr<RowBlock> batch;
    int64_t accounted = 0;  // what Next() un-accounts: its bytes, or its block's (a slice)
    Status status;
    bool end = false;
  };
  std::deque<Ready> ready_ TRAINTL_GUARDED_BY(mu_);
  // Touched by Next() only (one caller at a time), never under mu_.
  bool finished_ = false;  // Next() saw the end or an error
  Status final_status_;
  // Touched by the reader thread only: the local file it mapped last (MapFile), kept for
  // the next segment of the same file (a shuffled epoch has a segment per row group or
  // index chunk).
  int mapped_file_ = -1;
  std::shared_ptr<const MappedFile> mapping_;

  // The memory of blocks the pipeline is done with, for the next ones: the reader takes
  // its blocks' bytes from unit_bytes_ and the parsers give them back; the parsers take
  // their output from parsed_blocks_ and the batcher gives it back. Both are taken before
  // anything new is made, so no more exist than are in flight at once.
  FreeList<Buffer> unit_bytes_;
  // Shared: a parsed block that batches are slices of (Lend) comes back when the last of
  // them is dropped, which may be after the reader is.
  const std::shared_ptr<FreeList<RowBlock>> parsed_blocks_;
  // Batches given back by the caller (batch_pool()); the batcher takes its new ones here.
  const std::shared_ptr<FreeList<RowBlock>> batch_pool_;

  std::atomic<int64_t> buffered_bytes_{0};
  std::atomic<int64_t> peak_bytes_{0};
  std::atomic<int64_t> bytes_read_{0};
  std::atomic<int64_t> bytes_in_place_{0};
  std::atomic<int64_t> rows_{0};
  std::atomic<int64_t> batches_{0};
};

}  // namespace data
}  // namespace traintl
