// What BatchReader's stages pass between them: the reader's blocks (Unit) and the
// parsers' results (Parsed). Internal to batch_reader*.cc.
//
// Thread-safety: a Unit or Parsed is owned by one stage at a time; they are handed over
// under BatchReader::mu_.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "worker/data/batch_reader.h"
#include "worker/data/columns.h"
#include "worker/data/parquet_format.h"
#include "worker/data/source.h"

namespace traintl {
namespace data {

// Unit::line of a block whose first line the reader did not count: the line after the
// previous block's records (the batcher, which sees the blocks in order, knows it).
inline constexpr int64_t kLineAfterPrevious = -1;

// A segment with a row limit, cut where the row index says so: a counted head (the rest of
// the first chunk, when the segment starts inside it), the run of chunks it needs whole,
// read up to the start of the chunk after them (`end`) without a row count (the index
// counted them), and a counted tail (the part of the last chunk it needs). Returns
// {seg, UINT64_MAX} alone when the segment has no row limit or is not where `index` (in
// file order) has a chunk.
struct SegmentPiece {
  Segment seg;
  uint64_t end = UINT64_MAX;  // read up to this byte of the file at most
};
std::vector<SegmentPiece> SplitAtChunks(const Segment& seg, const std::vector<Chunk>& index);

// A block of whole records (or whole .npy rows) of one file, or the end of the epoch or
// an error, in epoch order (seq).
struct BatchReader::Unit {
  int64_t seq = 0;
  int file = 0;
  Buffer bytes;
  // The unit's records: [begin, end) of `bytes`, or, where `mapping` is set (a text file
  // read in place), of the mapped file, i.e. byte offsets.
  size_t begin = 0, end = 0;
  int64_t rows = 0;     // -1: not counted (a CSV block cut at its last newline, unscanned)
  int64_t line = 1;     // of the first record; kLineAfterPrevious: where the block before ended
  uint64_t offset = 0;  // of the first record in the file
  // A unit of a mapped file (MapFile: local, not .npy) is read where it is and `bytes` is
  // empty. Parquet: `bytes` holds column chunks of row group `row_group`, or `mapping` has
  // them where the footer says; the unit is its rows [skip_rows, skip_rows + rows).
  std::shared_ptr<const MappedFile> mapping;
  std::vector<ByteRange> mapped_chunks;  // Parquet, mapped: its column chunks (to Release)
  int row_group = 0;
  int64_t skip_rows = 0;
  Status status;
  bool end_marker = false;
  int64_t accounted = 0;
};

struct BatchReader::Parsed {
  RowBlock block;
  Status status;
  bool end_marker = false;
  int64_t accounted = 0;
  int64_t line = 1;   // the unit's
  int64_t lines = 0;  // newlines in the unit's records (CSV)
  // A unit that failed without knowing its first line, kept so that the batcher can
  // parse it again with the line and so name the right one in the error.
  std::unique_ptr<Unit> failed;
};

}  // namespace data
}  // namespace traintl
