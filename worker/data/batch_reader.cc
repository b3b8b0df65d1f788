#include "worker/data/batch_reader.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "worker/data/text_formats.h"

namespace traintl {
namespace data {

namespace {

// Longest record (or carried start of one) a text block may hold.
constexpr size_t kMaxRecordBytes = 64u << 20;

}  // namespace

// A block of whole records (or whole .npy rows) of one file, or the end of the epoch or
// an error, in epoch order (seq).
struct BatchReader::Unit {
  int64_t seq = 0;
  int file = 0;
  Buffer bytes;
  size_t begin = 0, end = 0;  // the records within `bytes`
  int64_t rows = 0;           // -1: not counted (a CSV block cut at its last newline, unscanned)
  int64_t line = 1;           // of bytes[begin]; kLineAfterPrevious: where the block before ended
  uint64_t offset = 0;        // of bytes[begin] in the file
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

namespace {

// Unit::line of a block whose first line the reader did not count: the line after the
// previous block's records (the batcher, which sees the blocks in order, knows it).
constexpr int64_t kLineAfterPrevious = -1;

// Rows held back and released in random order: a fixed number of row slots per column.
class ShuffleBuffer {
 public:
  ShuffleBuffer(const Schema& schema, int64_t capacity, uint64_t seed)
      : schema_(schema),
        capacity_(capacity),
        rng_(seed),
        numeric_(schema.size()),
        strings_(schema.size()) {
    for (size_t c = 0; c < schema.size(); ++c) {
      if (schema[c].dtype == DType::kString) {
        strings_[c].resize(static_cast<size_t>(capacity));
      } else {
        numeric_[c].Resize(schema[c].RowBytes() * static_cast<size_t>(capacity));
      }
    }
  }

  int64_t size() const { return size_; }
  bool full() const { return size_ == capacity_; }
  int64_t ByteSize() const {
    int64_t n = 0;
    for (const auto& b : numeric_) n += static_cast<int64_t>(b.capacity());
    return n + static_cast<int64_t>(capacity_) * static_cast<int64_t>(sizeof(std::string)) *
                   static_cast<int64_t>(strings_.size());
  }

  // Stores row r of `src` in a free slot (not full()).
  void Add(const RowBlock& src, int64_t r) { Put(size_++, src, r); }
  // Moves a random row to `dst`, then stores row r of `src` in its slot (full()).
  void Swap(const RowBlock& src, int64_t r, RowBlock* dst) {
    const int64_t j = static_cast<int64_t>(rng_.Below(static_cast<uint64_t>(capacity_)));
    Take(j, dst);
    Put(j, src, r);
  }
  // Moves a random row to `dst` and shrinks the buffer (size() > 0).
  void Drain(RowBlock* dst) {
    const int64_t j = static_cast<int64_t>(rng_.Below(static_cast<uint64_t>(size_)));
    Take(j, dst);
    --size_;
    if (j != size_) Move(size_, j);
  }

 private:
  void Put(int64_t slot, const RowBlock& src, int64_t r) {
    for (size_t c = 0; c < schema_.size(); ++c) {
      const ColumnData& s = src.columns[c];
      if (schema_[c].dtype == DType::kString) {
        const int64_t* o = s.Offsets();
        strings_[c][static_cast<size_t>(slot)].assign(s.values.data() + o[r],
                                                      static_cast<size_t>(o[r + 1] - o[r]));
      } else {
        const size_t rb = schema_[c].RowBytes();
        std::memcpy(numeric_[c].data() + rb * static_cast<size_t>(slot),
                    s.values.data() + rb * static_cast<size_t>(r), rb);
      }
    }
  }
  void Take(int64_t slot, RowBlock* dst) {
    for (size_t c = 0; c < schema_.size(); ++c) {
      ColumnData& d = dst->columns[c];
      if (schema_[c].dtype == DType::kString) {
        const std::string& s = strings_[c][static_cast<size_t>(slot)];
        d.AppendString(s.data(), s.size());
      } else {
        const size_t rb = schema_[c].RowBytes();
        d.values.Append(numeric_[c].data() + rb * static_cast<size_t>(slot), rb);
      }
    }
    ++dst->num_rows;
  }
  void Move(int64_t from, int64_t to) {
    for (size_t c = 0; c < schema_.size(); ++c) {
      if (schema_[c].dtype == DType::kString) {
        strings_[c][static_cast<size_t>(to)].swap(strings_[c][static_cast<size_t>(from)]);
      } else {
        const size_t rb = schema_[c].RowBytes();
        std::memcpy(numeric_[c].data() + rb * static_cast<size_t>(to),
                    numeric_[c].data() + rb * static_cast<size_t>(from), rb);
      }
    }
  }

  const Schema& schema_;
  const int64_t capacity_;
  SplitMix rng_;
  std::vector<Buffer> numeric_;
  std::vector<std::vector<std::string>> strings_;
  int64_t size_ = 0;
};

std::string Names(const Schema& schema) {
  std::string s;
  for (const auto& c : schema) s += (s.empty() ? "'" : ", '") + c.name + "'";
  return s;
}

}  // namespace

BatchReader::BatchReader(std::shared_ptr<Dataset> dataset, IterOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {}

Result<std::unique_ptr<BatchReader>> BatchReader::Start(std::shared_ptr<Dataset> dataset,
                                                        const IterOptions& options) {
  if (options.batch_size < 1) return Status::InvalidArgument("batch_size must be >= 1");
  if (options.prefetch_batches < 1) {
    return Status::InvalidArgument("prefetch_batches must be >= 1");
  }
  if (options.shuffle && options.shuffle_buffer_rows < 1) {
    return Status::InvalidArgument("shuffle_buffer_rows must be >= 1");
  }
  if (options.num_threads < 0 || options.num_threads > 64) {
    return Status::InvalidArgument("num_threads must be in [0, 64]");
  }
  if (options.block_bytes < 1024) return Status::InvalidArgument("block_bytes must be >= 1024");
  std::unique_ptr<BatchReader> r(new BatchReader(std::move(dataset), options));
  const Schema& all = r->dataset_->schema();
  r->out_of_schema_.assign(all.size(), -1);
  if (options.columns.empty()) {
    r->schema_ = all;
    for (size_t i = 0; i < all.size(); ++i) r->out_of_schema_[i] = static_cast<int>(i);
  } else {
    for (const auto& name : options.columns) {
      size_t i = 0;
      while (i < all.size() && all[i].name != name) ++i;
      if (i == all.size()) {
        return Status::InvalidArgument("no column '" + name + "' (the columns are " + Names(all) +
                                       ")");
      }
      if (r->out_of_schema_[i] >= 0) {
        return Status::InvalidArgument("column '" + name + "' is selected twice");
      }
      r->out_of_schema_[i] = static_cast<int>(r->schema_.size());
      r->schema_.push_back(all[i]);
    }
  }
  for (size_t i = 0; i < all.size(); ++i) {
    if (r->out_of_schema_[i] >= 0) r->inferred_.push_back(r->dataset_->inferred()[i]);
  }
  for (const auto& [name, type] : options.column_types) {
    auto it = std::find_if(r->schema_.begin(), r->schema_.end(),
                           [&](const ColumnSpec& c) { return c.name == name; });
    if (it == r->schema_.end()) {
      return Status::InvalidArgument("column_types names '" + name +
                                     "', which is not among the columns read (" +
                                     Names(r->schema_) + ")");
    }
    const bool numeric_only = r->dataset_->format() != Format::kCsv;
    if (numeric_only && (it->dtype == DType::kString) != (type == DType::kString)) {
      return Status::InvalidArgument("column '" + name + "' is " + DTypeName(it->dtype) +
                                     " and cannot be read as " + DTypeName(type));
    }
    it->dtype = type;
    r->inferred_[static_cast<size_t>(it - r->schema_.begin())] = false;
  }
  if (r->dataset_->format() == Format::kCsv) {
    for (const auto& fi : r->dataset_->files()) {
      std::vector<FieldPlan> plan(fi.field_column.size());
      for (size_t f = 0; f < plan.size(); ++f) {
        const int c = fi.field_column[f];
        if (c < 0) continue;
        plan[f].out = r->out_of_schema_[static_cast<size_t>(c)];
        plan[f].inferred = plan[f].out >= 0 && r->inferred_[static_cast<size_t>(plan[f].out)];
      }
      r->field_plans_.push_back(std::move(plan));
    }
  }
  int threads = options.num_threads;
  if (threads == 0) {
    threads = static_cast<int>(std::min(4u, std::max(1u, std::thread::hardware_concurrency())));
  }
  r->max_in_flight_ = threads + 2;
  r->threads_.emplace_back(&BatchReader::ReaderMain, r.get());
  for (int i = 0; i < threads; ++i) r->threads_.emplace_back(&BatchReader::ParserMain, r.get());
  r->threads_.emplace_back(&BatchReader::BatcherMain, r.get());
  return r;
}

BatchReader::~BatchReader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void BatchReader::Account(int64_t delta) {
  const int64_t now = buffered_bytes_.fetch_add(delta) + delta;
  int64_t peak = peak_bytes_.load();
  while (now > peak && !peak_bytes_.compare_exchange_weak(peak, now)) {
  }
}

IterStats BatchReader::stats() const {
  IterStats s;
  s.peak_buffered_bytes = peak_bytes_.load();
  s.buffered_bytes = buffered_bytes_.load();
  s.bytes_read = bytes_read_.load();
  s.rows = rows_.load();
  s.batches = batches_.load();
  return s;
}

// ---- reader

void BatchReader::ReaderMain() {
  Status st = ReadSegments();
  if (stop_) return;
  auto last = std::make_unique<Unit>();
  last->end_marker = st.ok();
  last->status = std::move(st);
  Emit(std::move(last));
}

bool BatchReader::Emit(std::unique_ptr<Unit> unit) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return stop_ || in_flight_ < max_in_flight_; });
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
  } else {
    work_.push_back(std::move(unit));
  }
  cv_.notify_all();
  return true;
}

Status BatchReader::ReadSegments() {
  std::vector<Segment> plan;
  const DatasetConfig& cfg = dataset_->config();
  if (dataset_->NeedsIndex(options_.shuffle)) {
    TRAINTL_ASSIGN_OR_RETURN(auto index, dataset_->Index(&stop_));
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
    } else {
      TRAINTL_RETURN_IF_ERROR(ReadTextSegment(seg));
    }
  }
  return Status::Ok();
}

Status BatchReader::ReadTextSegment(const Segment& seg) {
  const FileInfo& fi = dataset_->files()[static_cast<size_t>(seg.file)];
  const bool csv = dataset_->format() == Format::kCsv;
  TRAINTL_ASSIGN_OR_RETURN(auto src,
                           OpenSource(fi.file, seg.offset, {dataset_->options().http, &stop_}));
  int64_t skip = seg.skip_rows;
  int64_t left = seg.rows < 0 ? INT64_MAX : seg.rows;
  uint64_t offset = seg.offset;
  int64_t line = seg.line;
  Buffer carry;  // the start of a record that the last block cut
  bool eof = false;
  // A CSV segment read to the end of its file needs no row count up front: its blocks
  // without a quote (so without a quoted newline) are cut at their last newline and the
  // parsers count their rows, which saves the reader a pass over the bytes. The lines are
  // then counted by the parsers too, so blocks after the first have kLineAfterPrevious.
  const bool uncounted = csv && seg.rows < 0 && seg.skip_rows == 0;
  bool line_known = true;
  while (left > 0 && !stop_ && !(eof && carry.size() == 0)) {
    auto unit = std::make_unique<Unit>();
    const size_t want = eof ? 0 : options_.block_bytes;
    unit->bytes.Resize(carry.size() + want);
    if (carry.size() > 0) std::memcpy(unit->bytes.data(), carry.data(), carry.size());
    size_t len = carry.size();
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
      eof = *n < want;
    }
    const char* data = unit->bytes.data();
    size_t used = 0;
    if (uncounted && std::memchr(data, '"', len) == nullptr) {
      size_t cut = len;
      if (!eof) {
        const void* nl = memrchr(data, '\n', len);
        cut = nl == nullptr ? 0 : static_cast<size_t>(static_cast<const char*>(nl) - data) + 1;
      }
      carry.Clear();
      carry.Append(data + cut, len - cut);
      if (cut == 0) {
        Account(-unit->accounted);
        if (!eof && carry.size() > kMaxRecordBytes) {
          return Status::InvalidArgument(fi.file.name +
                                         ": a record longer than 64 MiB (byte offset " +
                                         std::to_string(offset) + ")");
        }
        continue;
      }
      unit->file = seg.file;
      unit->begin = 0;
      unit->end = cut;
      unit->rows = -1;
      unit->line = line_known ? line : kLineAfterPrevious;
      unit->offset = offset;
      line_known = false;
      offset += cut;
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
        unit->begin = used;
        unit->end = len;
        unit->rows = -1;
        unit->line = line_known ? line : kLineAfterPrevious;
        unit->offset = offset;
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
    carry.Clear();
    carry.Append(data + used, len - used);
    if (!eof && used == 0 && carry.size() > kMaxRecordBytes) {
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
      unit->begin = begin;
      unit->end = used;
      unit->rows = r.rows;
      unit->line = line_known ? line : kLineAfterPrevious;
      unit->offset = offset;
      left -= r.rows;
      line += r.lines;
      offset += r.consumed;
      if (!Emit(std::move(unit))) return Status::Ok();
    } else {
      // Blank lines only: a block after an uncounted one must still pass them on, since
      // the line of the next block is counted from the blocks before it.
      if (!line_known && r.lines > 0) {
        unit->file = seg.file;
        unit->begin = begin;
        unit->end = used;
        unit->rows = 0;
        unit->line = kLineAfterPrevious;
        unit->offset = offset;
        offset += r.consumed;
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

// ---- parsers

Status BatchReader::ParseUnit(const Unit& unit, int64_t line, RowBlock* out, int64_t* lines) const {
  const FileInfo& fi = dataset_->files()[static_cast<size_t>(unit.file)];
  out->Reset(schema_, std::max<int64_t>(unit.rows, 0));
  const char* data = unit.bytes.data() + unit.begin;
  const size_t len = unit.end - unit.begin;
  const TextPos pos{&fi.file.name, line, unit.offset};
  switch (dataset_->format()) {
    case Format::kCsv:
      return ParseCsvRows(data, len, unit.rows, field_plans_[static_cast<size_t>(unit.file)],
                          schema_, pos, out, lines);
    case Format::kJsonl:
      return ParseJsonlRows(data, len, unit.rows, schema_, inferred_, pos, out);
    case Format::kNpy:
      if (!schema_.empty()) {
        TRAINTL_RETURN_IF_ERROR(AppendNpyRows(fi.npy, data, unit.rows, schema_[0], fi.file.name,
                                              unit.offset, &out->columns[0]));
      }
      out->num_rows = unit.rows;
      return Status::Ok();
  }
  return Status::Internal("unknown format");
}

void BatchReader::ParserMain() {
  for (;;) {
    std::unique_ptr<Unit> unit;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !work_.empty(); });
      if (stop_) return;
      unit = std::move(work_.front());
      work_.pop_front();
    }
    auto p = std::make_unique<Parsed>();
    p->line = unit->line;
    Status st;
    try {
      // An unknown first line is given as 1 here; see Parsed::failed.
      st =
          ParseUnit(*unit, unit->line == kLineAfterPrevious ? 1 : unit->line, &p->block, &p->lines);
    } catch (const std::exception& e) {  // bad_alloc
      st = Status::ResourceExhausted(std::string("parsing a block: ") + e.what());
    }
    p->accounted = static_cast<int64_t>(p->block.ByteSize());
    Account(p->accounted - unit->accounted);
    const int64_t seq = unit->seq;
    // A failed block keeps the rows before the bad one (the parsers leave them in it).
    if (!st.ok()) {
      p->status = std::move(st);
      if (unit->line == kLineAfterPrevious) p->failed = std::move(unit);
    }
    unit.reset();
    {
      std::lock_guard<std::mutex> lock(mu_);
      parsed_[seq] = std::move(p);
    }
    cv_.notify_all();
  }
}

// ---- batcher

bool BatchReader::Deliver(std::unique_ptr<RowBlock> batch, Status status, bool end) {
  std::unique_lock<std::mutex> lock(mu_);
  if (batch) {
    cv_.wait(lock, [&] {
      return stop_ || static_cast<int64_t>(ready_.size()) < options_.prefetch_batches;
    });
    if (stop_) return false;
    rows_ += batch->num_rows;
    ++batches_;
  }
  ready_.push_back({std::move(batch), std::move(status), end});
  cv_.notify_all();
  return true;
}

void BatchReader::BatcherMain() {
  const DatasetConfig& cfg = dataset_->config();
  std::unique_ptr<ShuffleBuffer> shuffle;
  if (options_.shuffle) {
    shuffle = std::make_unique<ShuffleBuffer>(
        schema_, options_.shuffle_buffer_rows,
        MixSeed(MixSeed(options_.seed, static_cast<uint64_t>(options_.epoch)),
                static_cast<uint64_t>(cfg.rank) + 1));
    Account(shuffle->ByteSize());
  }
  const int64_t shuffle_bytes = shuffle ? shuffle->ByteSize() : 0;
  std::unique_ptr<RowBlock> batch;
  int64_t batch_accounted = 0;
  auto new_batch = [&] {
    batch = std::make_unique<RowBlock>();
    batch->Reset(schema_, options_.batch_size);
    batch_accounted = static_cast<int64_t>(batch->ByteSize());
    Account(batch_accounted);
  };
  // Hands the batch to the queue; its bytes stay accounted until Next() returns it.
  auto flush = [&]() -> bool {
    Account(static_cast<int64_t>(batch->ByteSize()) - batch_accounted);
    return Deliver(std::move(batch), Status::Ok(), false);
  };
  auto finish = [&](Status st, bool end) {
    if (batch) Account(-batch_accounted);
    if (shuffle) Account(-shuffle_bytes);
    Deliver(nullptr, std::move(st), end);
  };
  new_batch();
  int64_t line = 1;  // the line after the last block's records
  for (int64_t next = 0;; ++next) {
    std::unique_ptr<Parsed> p;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || parsed_.count(next) > 0; });
      if (stop_) break;
      auto it = parsed_.find(next);
      p = std::move(it->second);
      parsed_.erase(it);
      --in_flight_;
    }
    cv_.notify_all();
    if (p->end_marker) {
      if (shuffle) {
        while (shuffle->size() > 0) {
          shuffle->Drain(batch.get());
          if (batch->num_rows == options_.batch_size) {
            if (!flush()) return;
            new_batch();
          }
        }
      }
      if (batch->num_rows > 0 && !options_.drop_last) {
        if (!flush()) return;
      } else {
        Account(-batch_accounted);
      }
      batch.reset();
      finish(Status::Ok(), true);
      return;
    }
    const int64_t first_line = p->line == kLineAfterPrevious ? line : p->line;
    line = first_line + p->lines;
    if (p->failed != nullptr) {
      RowBlock again;
      Status st;
      try {
        st = ParseUnit(*p->failed, first_line, &again, nullptr);
      } catch (const std::exception&) {  // bad_alloc: keep the message with line 1
      }
      if (!st.ok()) p->status = std::move(st);
      p->failed.reset();
    }
    const RowBlock& rows = p->block;
    for (int64_t r = 0; r < rows.num_rows;) {
      if (shuffle) {
        if (shuffle->full()) {
          shuffle->Swap(rows, r, batch.get());
        } else {
          shuffle->Add(rows, r);
        }
        ++r;
      } else {
        const int64_t take = std::min(options_.batch_size - batch->num_rows, rows.num_rows - r);
        AppendRows(schema_, rows, r, r + take, batch.get());
        r += take;
      }
      if (batch->num_rows == options_.batch_size) {
        if (!flush()) return;
        new_batch();
      }
    }
    Account(-p->accounted);
    if (!p->status.ok()) {
      finish(std::move(p->status), false);
      return;
    }
  }
}

Result<std::unique_ptr<RowBlock>> BatchReader::Next() {
  if (finished_) {
    if (!final_status_.ok()) return final_status_;
    return std::unique_ptr<RowBlock>();
  }
  Ready item;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !ready_.empty(); });
    item = std::move(ready_.front());
    ready_.pop_front();
  }
  cv_.notify_all();
  if (item.batch) {
    Account(-static_cast<int64_t>(item.batch->ByteSize()));
    return std::move(item.batch);
  }
  finished_ = true;
  final_status_ = item.status;
  if (!final_status_.ok()) return final_status_;
  return std::unique_ptr<RowBlock>();
}

}  // namespace data
}  // namespace traintl
