// BatchReader's reader stage for Parquet files: each row group of a segment becomes one
// unit holding the column chunks of the selected columns only (the others are neither read
// nor decompressed); the parsers decode them (DecodeParquetRows).
#include <algorithm>
#include <utility>

#include "worker/data/batch_reader.h"
#include "worker/data/batch_reader_internal.h"
#include "worker/data/parquet_format.h"

namespace traintl {
namespace data {

std::vector<int> BatchReader::ParquetLeaves(int file) const {
  const FileInfo& fi = dataset_->files()[static_cast<size_t>(file)];
  std::vector<int> leaves(schema_.size(), -1);
  for (size_t l = 0; l < fi.field_column.size(); ++l) {
    const int c = fi.field_column[l];
    if (c < 0) continue;
    const int out = out_of_schema_[static_cast<size_t>(c)];
    if (out >= 0) leaves[static_cast<size_t>(out)] = static_cast<int>(l);
  }
  return leaves;
}

Status BatchReader::ReadParquetSegment(const Segment& seg) {
  const FileInfo& fi = dataset_->files()[static_cast<size_t>(seg.file)];
  const auto& groups = fi.parquet->meta.row_groups;
  const std::vector<int> leaves = ParquetLeaves(seg.file);
  const SourceOptions source{dataset_->options().http, &stop_};
  int64_t skip = seg.skip_rows;
  int64_t left = seg.rows < 0 ? INT64_MAX : seg.rows;
  TRAINTL_ASSIGN_OR_RETURN(const std::shared_ptr<const MappedFile> mapping,
                           MapFile(seg.file, fi.parquet->file_size));
  int64_t first_row = 0;  // of row group g in the file
  for (size_t g = 0; g < seg.offset && g < groups.size(); ++g) first_row += groups[g].num_rows;
  for (size_t g = static_cast<size_t>(seg.offset); g < groups.size() && left > 0 && !stop_; ++g) {
    const int64_t n = groups[g].num_rows;
    if (skip >= n) {
      skip -= n;
      first_row += n;
      continue;
    }
    const int64_t take = std::min(left, n - skip);
    // The selected chunks, in output column order; adjacent ones are read as one range.
    std::vector<ByteRange> reads;
    uint64_t total = 0;
    for (int leaf : leaves) {
      const ByteRange r = ColumnChunkRange(groups[g].columns[static_cast<size_t>(leaf)].meta_data);
      if (!reads.empty() && reads.back().offset + reads.back().size == r.offset) {
        reads.back().size += r.size;
      } else {
        reads.push_back(r);
      }
      total += r.size;
    }
    auto unit = std::make_unique<Unit>();
    size_t at = 0;
    if (mapping) {
      for (const ByteRange& r : reads) TRAINTL_RETURN_IF_ERROR(mapping->Populate(r.offset, r.size));
      unit->mapping = mapping;
      at = static_cast<size_t>(total);
      bytes_read_ += static_cast<int64_t>(total);
      bytes_in_place_ += static_cast<int64_t>(total);
      // Page cache, not the reader's memory; accounted all the same, as the pages stay
      // resident while the unit waits.
      unit->accounted = static_cast<int64_t>(total);
      Account(unit->accounted);
      unit->mapped_chunks = std::move(reads);
      reads.clear();
    } else {
      unit->bytes = unit_bytes_.Take();
      unit->bytes.Resize(static_cast<size_t>(total));
      unit->accounted = static_cast<int64_t>(unit->bytes.capacity());
      Account(unit->accounted);
    }
    for (const ByteRange& r : reads) {
      Status st;
      auto src = OpenSource(fi.file, r.offset, source);
      if (src.ok()) {
        auto got = ReadFully(src->get(), unit->bytes.data() + at, static_cast<size_t>(r.size));
        if (!got.ok()) {
          st = got.status();
        } else if (*got != r.size) {
          st = Status::InvalidArgument(fi.file.name + ": row group " + std::to_string(g) +
                                       ": the file ended at byte " +
                                       std::to_string(r.offset + *got) +
                                       " inside a column chunk (was it changed while the job "
                                       "ran?)");
        }
      } else {
        st = src.status();
      }
      if (!st.ok()) {
        Account(-unit->accounted);
        return st;
      }
      bytes_read_ += static_cast<int64_t>(r.size);
      at += static_cast<size_t>(r.size);
    }
    unit->file = seg.file;
    unit->begin = 0;
    unit->end = at;
    unit->rows = take;
    unit->line = first_row + skip;  // the unit's first row in the file, for messages
    unit->offset = g;
    unit->row_group = static_cast<int>(g);
    unit->skip_rows = skip;
    if (!Emit(std::move(unit))) return Status::Ok();
    left -= take;
    skip = 0;
    first_row += n;
  }
  if (stop_) return Status::Ok();
  if (seg.rows >= 0 && left > 0) {
    return Status::InvalidArgument(fi.file.name + ": the file has " + std::to_string(left) +
                                   " rows fewer than its footer said when the job started "
                                   "(was it changed while the job ran?)");
  }
  return Status::Ok();
}

}  // namespace data
}  // namespace traintl
