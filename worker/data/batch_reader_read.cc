// BatchReader's reader stage: cuts the epoch's segments into blocks of whole records.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <utility>

#include "worker/data/batch_reader.h"
#include "worker/data/batch_reader_internal.h"
#include "worker/data/text_formats.h"

namespace traintl {
namespace data {

std::vector<SegmentPiece> SplitAtChunks(const Segment& seg, const std::vector<Chunk>& index) {
  if (seg.rows < 0) return {{seg, UINT64_MAX}};
  auto it = std::lower_bound(index.begin(), index.end(), seg, [](const Chunk& c, const Segment& s) {
    return c.file < s.file || (c.file == s.file && c.offset < s.offset);
  });
  if (it == index.end() || it->file != seg.file || it->offset != seg.offset ||
      seg.skip_rows >= it->rows) {
    return {{seg, UINT64_MAX}};
  }
  std::vector<SegmentPiece> out;
  const int64_t need = seg.skip_rows + seg.rows;  // rows from the start of chunk *it
  size_t i = static_cast<size_t>(it - index.begin());
  int64_t before = 0;  // rows of the chunks from *it to index[i]
  if (seg.skip_rows > 0) {
    const int64_t take = std::min(it->rows - seg.skip_rows, seg.rows);
    out.push_back({{seg.file, seg.offset, seg.line, seg.skip_rows, take}, UINT64_MAX});
    before = it->rows;
    ++i;
    if (before >= need) return out;
  }
  size_t j = i;
  int64_t whole = before;
  while (j < index.size() && index[j].file == seg.file && whole + index[j].rows <= need) {
    whole += index[j].rows;
    ++j;
  }
  const bool more = j < index.size() && index[j].file == seg.file;
  if (whole < need && !more) return {{seg, UINT64_MAX}};  // more rows than the index has
  if (j > i) {
    out.push_back(
        {{seg.file, index[i].offset, index[i].line, 0, -1}, more ? index[j].offset : UINT64_MAX});
  }
  if (whole < need) {
    out.push_back({{seg.file, index[j].offset, index[j].line, 0, need - whole}, UINT64_MAX});
  }
  return out;
}

void BatchReader::ReaderMain() {
  Status st;
  try {
    st = ReadSegments();
  } catch (const std::exception& e) {  // bad_alloc: a block larger than memory allows
    st = Status::ResourceExhausted(std::string("reading a block: ") + e.what());
  }
  if (stop_) return;
  auto last = std::make_unique<Unit>();
  last->end_marker = st.ok();
  last->status = std::move(st);
  Emit(std::move(last));
}

bool BatchReader::Emit(std::unique_ptr<Unit> unit) {
  std::unique_lock<std::mutex> lock(mu_);
  space_cv_.wait(lock, [&] { return stop_ || in_flight_ < max_in_flight_; });
  if (stop_) {
    lock.unlock();
    Account(-unit->accounted);
    return false;
  }
  ++in_flight_;
  unit->seq = next_seq_++;
  if (unit->end_marker || !unit->status.ok()) {
    auto p = std::make_unique<Parsed>();
    p->end_marker = unit->end_marker;
    p->status = unit->status;
    parsed_[unit->seq] = std::move(p);
    lock.unlock();
    parsed_cv_.notify_one();
  } else {
    work_.push_back(std::move(unit));
    lock.unlock();
    work_cv_.notify_one();
  }
  return true;
}

Status BatchReader::ReadSegments() {
  std::vector<Segment> plan;
  const DatasetConfig& cfg = dataset_->config();
  std::shared_ptr<const std::vector<Chunk>> index;
  if (dataset_->NeedsIndex(options_.shuffle)) {
    TRAINTL_ASSIGN_OR_RETURN(index, dataset_->Index(&stop_));
    plan = PlanEpoch(*index, cfg.rank, cfg.world_size, cfg.split, options_.shuffle, options_.seed,
                     options_.epoch);
  } else {
    for (size_t i = 0; i < dataset_->files().size(); ++i) {
      const FileInfo& fi = dataset_->files()[i];
      plan.push_back({static_cast<int>(i), fi.data_offset, fi.data_line, 0, -1});
    }
  }
  for (const Segment& seg : plan) {
    if (stop_) return Status::Ok();
    if (dataset_->format() == Format::kNpy) {
      TRAINTL_RETURN_IF_ERROR(ReadNpySegment(seg));
    } else if (dataset_->format() == Format::kParquet) {
      TRAINTL_RETURN_IF_ERROR(ReadParquetSegment(seg));
    } else if (dataset_->format() == Format::kCsv && index != nullptr &&
               !dataset_->files()[static_cast<size_t>(seg.file)].file.http) {
      // The whole chunks of the segment need no row count: the index has it. (Not over
      // HTTP: each piece is a request, which a server without Range support answers from
      // the start of the file.)
      for (const SegmentPiece& piece : SplitAtChunks(seg, *index)) {
        if (stop_) return Status::Ok();
        TRAINTL_RETURN_IF_ERROR(ReadTextSegment(piece.seg, piece.end));
      }
    } else {
      TRAINTL_RETURN_IF_ERROR(ReadTextSegment(seg));
    }
  }
  return Status::Ok();
}

Result<std::shared_ptr<const MappedFile>> BatchReader::MapFile(int file, uint64_t expected_size) {
  const DataFile& df = dataset_->files()[static_cast<size_t>(file)].file;
  if (df.http || !options_.read_in_place) return std::shared_ptr<const MappedFile>();
  if (mapped_file_ != file) {
    mapping_.reset();
    auto mapped = MappedFile::Open(df, expected_size);
    if (mapped.ok()) {
      mapping_ = std::move(*mapped);
    } else if (mapped.status().code() != Status::Code::kUnavailable) {
      mapped_file_ = -1;
      return mapped.status();  // gone, or not the file the job started with
    }
    mapped_file_ = file;
  }
  return mapping_;
}

Status BatchReader::ReadTextSegment(const Segment& seg, uint64_t end) {
  const FileInfo& fi = dataset_->files()[static_cast<size_t>(seg.file)];
  const bool csv = dataset_->format() == Format::kCsv;
  // A local file is read in place (MappedFile): a block is a window of the mapping, and
  // the start of a record that the last block cut is where the next window starts. Else
  // blocks are read into buffers, and that start is copied to the next one (`carry`).
  TRAINTL_ASSIGN_OR_RETURN(const std::shared_ptr<const MappedFile> mapping,
                           MapFile(seg.file, MappedFile::kAnySize));
  std::unique_ptr<ByteSource> src;
  if (mapping == nullptr) {
    TRAINTL_ASSIGN_OR_RETURN(src,
                             OpenSource(fi.file, seg.offset, {dataset_->options().http, &stop_}));
  } else {
    end = std::min<uint64_t>(end, mapping->size());
    if (seg.offset > end) {
      return Status::FailedPrecondition(fi.file.name + ": the file has " +
                                        std::to_string(mapping->size()) +
                                        " bytes, fewer than when it was indexed (was it changed "
                                        "while the job ran?)");
    }
  }
  int64_t skip = seg.skip_rows;
  int64_t left = seg.rows < 0 ? INT64_MAX : seg.rows;
  uint64_t offset = seg.offset;
  int64_t line = seg.line;
  Buffer carry;                  // buffers: the start of a record that the last block cut
  uint64_t window_end = offset;  // mapped: the end of what the last window held
  auto carried = [&]() -> size_t {
    return mapping != nullptr ? static_cast<size_t>(window_end - offset) : carry.size();
  };
  auto keep = [&](const char* from, size_t n) {  // the cut record's start, for the next block
    if (mapping != nullptr) return;              // it stays in the mapping, at `offset`
    carry.Clear();
    carry.Append(from, n);
  };
  // Mapped pages leave the page tables once read (MappedFile::Release): a unit's when it
  // is parsed, and here what no unit holds (skipped rows, blank lines, the read-ahead past
  // the segment's last record), so that a shuffled epoch's many segments do not leave the
  // whole file mapped. `released`: the end of the last unit handed over.
  uint64_t released = offset;
  auto hand_over = [&](const Unit& u) {
    if (mapping != nullptr && u.begin > released) mapping->Release(released, u.begin - released);
    released = std::max<uint64_t>(released, u.end);
  };
  struct ReleaseRest {
    std::function<void()> release;
    ~ReleaseRest() { release(); }
  } release_rest{[&] {
    if (mapping != nullptr && window_end > released) {
      // Up to its page's end: that page is nobody's now.
      static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
      mapping->Release(released, (window_end + page - 1) / page * page - released);
    }
  }};
  bool eof = mapping != nullptr && offset >= end;
  // A CSV segment read to the end of its file needs no row count up front: its blocks
  // without a quote (so without a quoted newline) are cut at their last newline and the
  // parsers count their rows, which saves the reader a pass over the bytes. The lines are
  // then counted by the parsers too, so blocks after the first have kLineAfterPrevious.
  const bool uncounted = csv && seg.rows < 0 && seg.skip_rows == 0;
  bool line_known = true;
  while (left > 0 && !stop_ && !(eof && carried() == 0)) {
    auto unit = std::make_unique<Unit>();
    // Up to `end` at most (a record boundary, so reaching it is like the end of the file).
    const size_t held = carried();
    const uint64_t at = offset + held;  // where the source is
    const size_t want = eof ? 0
                            : static_cast<size_t>(std::min<uint64_t>(options_.block_bytes,
                                                                     end > at ? end - at : 0));
    const char* data;
    size_t len = held;
    size_t base = 0;  // where data[0] is in the unit's bytes (mapped: in the file)
    if (mapping != nullptr) {
      TRAINTL_RETURN_IF_ERROR(mapping->Populate(at, want));
      unit->mapping = mapping;
      base = static_cast<size_t>(offset);
      data = mapping->data() + offset;
      len += want;
      window_end = at + want;
      bytes_read_ += static_cast<int64_t>(want);
      bytes_in_place_ += static_cast<int64_t>(want);
      eof = window_end >= end;
      // Page cache, not the reader's memory; accounted all the same, as the pages stay
      // resident while the unit waits.
      unit->accounted = static_cast<int64_t>(len);
      Account(unit->accounted);
    } else {
      unit->bytes = unit_bytes_.Take();
      unit->bytes.Resize(held + want);
      if (held > 0) std::memcpy(unit->bytes.data(), carry.data(), held);
      unit->accounted = static_cast<int64_t>(unit->bytes.capacity());
      Account(unit->accounted);
      if (!eof) {
        auto n = ReadFully(src.get(), unit->bytes.data() + len, want);
        if (!n.ok()) {
          Account(-unit->accounted);
          return n.status();
        }
        bytes_read_ += static_cast<int64_t>(*n);
        len += *n;
        eof = *n < want || at + *n >= end;
      }
      data = unit->bytes.data();
    }
    size_t used = 0;
    if (uncounted && std::memchr(data, '"', len) == nullptr) {
      size_t cut = len;
      if (!eof) {
        const void* nl = memrchr(data, '\n', len);
        cut = nl == nullptr ? 0 : static_cast<size_t>(static_cast<const char*>(nl) - data) + 1;
      }
      keep(data + cut, len - cut);
      if (cut == 0) {
        Account(-unit->accounted);
        if (!eof && len > kMaxRecordBytes) {
          return Status::InvalidArgument(fi.file.name +
                                         ": a record longer than 64 MiB (byte offset " +
                                         std::to_string(offset) + ")");
        }
        continue;
      }
      unit->file = seg.file;
      unit->begin = base;
      unit->end = base + cut;
      unit->rows = -1;
      unit->line = line_known ? line : kLineAfterPrevious;
      unit->offset = offset;
      line_known = false;
      offset += cut;
      hand_over(*unit);
      if (!Emit(std::move(unit))) return Status::Ok();
      continue;
    }
    if (skip > 0) {
      auto r = ScanRecords(data, len, skip, eof, csv, {&fi.file.name, line, offset});
      if (!r.ok()) {
        Account(-unit->accounted);
        return r.status();
      }
      skip -= r->rows;
      used = r->consumed;
      line += r->lines;
      offset += r->consumed;
    }
    ScanResult r;
    if (skip == 0) {
      auto scanned =
          ScanRecords(data + used, len - used, left, eof, csv, {&fi.file.name, line, offset});
      if (!scanned.ok() && csv) {
        // A quote left open at the end of the file. The parser, given the rest of the file
        // as one uncounted block, fails the same way after delivering the rows before it,
        // and names the right line also when this reader does not know it.
        unit->file = seg.file;
        unit->begin = base + used;
        unit->end = base + len;
        unit->rows = -1;
        unit->line = line_known ? line : kLineAfterPrevious;
        unit->offset = offset;
        hand_over(*unit);
        Emit(std::move(unit));
        return scanned.status();  // delivered only if that block parses after all
      }
      if (!scanned.ok()) {
        Account(-unit->accounted);
        return scanned.status();
      }
      r = *scanned;
    }
    const size_t begin = used;
    used += r.consumed;
    keep(data + used, len - used);
    if (!eof && used == 0 && len > kMaxRecordBytes) {
      Account(-unit->accounted);
      if (!line_known) {
        return Status::InvalidArgument(fi.file.name +
                                       ": a record longer than 64 MiB (byte offset " +
                                       std::to_string(offset) + ")");
      }
      return Status::InvalidArgument(
          Located({&fi.file.name, line, offset}, line, offset, "a record longer than 64 MiB"));
    }
    if (r.rows > 0) {
      unit->file = seg.file;
      unit->begin = base + begin;
      unit->end = base + used;
      unit->rows = r.rows;
      unit->line = line_known ? line : kLineAfterPrevious;
      unit->offset = offset;
      left -= r.rows;
      line += r.lines;
      offset += r.consumed;
      hand_over(*unit);
      if (!Emit(std::move(unit))) return Status::Ok();
    } else {
      // Blank lines only: a block after an uncounted one must still pass them on, since
      // the line of the next block is counted from the blocks before it.
      if (!line_known && r.lines > 0) {
        unit->file = seg.file;
        unit->begin = base + begin;
        unit->end = base + used;
        unit->rows = 0;
        unit->line = kLineAfterPrevious;
        unit->offset = offset;
        offset += r.consumed;
        hand_over(*unit);
        if (!Emit(std::move(unit))) return Status::Ok();
        continue;
      }
      line += r.lines;
      offset += r.consumed;
      Account(-unit->accounted);
    }
  }
  if (stop_) return Status::Ok();
  if (seg.rows >= 0 && (left > 0 || skip > 0)) {
    return Status::InvalidArgument(fi.file.name + ": the file ended " +
                                   std::to_string(left + skip) +
                                   " rows earlier than when it was indexed (was it changed "
                                   "while the job ran?)");
  }
  return Status::Ok();
}

Status BatchReader::ReadNpySegment(const Segment& seg) {
  const FileInfo& fi = dataset_->files()[static_cast<size_t>(seg.file)];
  const uint64_t row_bytes = fi.npy.row_bytes();
  const int64_t first_row =
      row_bytes == 0 ? 0 : static_cast<int64_t>((seg.offset - fi.data_offset) / row_bytes);
  int64_t row = first_row + seg.skip_rows;
  int64_t left = seg.rows < 0 ? fi.npy.rows() - row : seg.rows;
  uint64_t offset = fi.data_offset + static_cast<uint64_t>(row) * row_bytes;
  TRAINTL_ASSIGN_OR_RETURN(auto src,
                           OpenSource(fi.file, offset, {dataset_->options().http, &stop_}));
  const int64_t per_unit = std::max<int64_t>(
      1, static_cast<int64_t>(options_.block_bytes / std::max<uint64_t>(row_bytes, 1)));
  while (left > 0 && !stop_) {
    const int64_t rows = std::min(per_unit, left);
    const size_t bytes = static_cast<size_t>(rows) * row_bytes;
    auto unit = std::make_unique<Unit>();
    unit->bytes = unit_bytes_.Take();
    unit->bytes.Resize(bytes);
    unit->accounted = static_cast<int64_t>(unit->bytes.capacity());
    Account(unit->accounted);
    auto n = ReadFully(src.get(), unit->bytes.data(), bytes);
    if (!n.ok() || *n < bytes) {
      Account(-unit->accounted);
      if (!n.ok()) return n.status();
      return Status::InvalidArgument(
          fi.file.name + ": byte offset " + std::to_string(offset + *n) +
          ": the file ends inside row " +
          std::to_string(row + static_cast<int64_t>(*n / std::max<uint64_t>(row_bytes, 1))) +
          " (truncated?)");
    }
    bytes_read_ += static_cast<int64_t>(bytes);
    unit->file = seg.file;
    unit->begin = 0;
    unit->end = bytes;
    unit->rows = rows;
    unit->line = row;  // .npy: the row number, for messages
    unit->offset = offset;
    if (!Emit(std::move(unit))) return Status::Ok();
    left -= rows;
    row += rows;
    offset += bytes;
  }
  return Status::Ok();
}

}  // namespace data
}  // namespace traintl
