#include "worker/data/batch_reader.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "worker/data/batch_reader_internal.h"
#include "worker/data/parquet_format.h"
#include "worker/data/parquet_pages.h"
#include "worker/data/shuffle_buffer.h"
#include "worker/data/text_formats.h"

namespace traintl {
namespace data {
namespace {

std::string Names(const Schema& schema) {
  std::string s;
  for (const auto& c : schema) s += (s.empty() ? "'" : ", '") + c.name + "'";
  return s;
}

int ParserThreads(const IterOptions& options) {
  if (options.num_threads > 0) return options.num_threads;
  return static_cast<int>(std::min(4u, std::max(1u, std::thread::hardware_concurrency())));
}

}  // namespace

BatchReader::BatchReader(std::shared_ptr<Dataset> dataset, IterOptions options)
    : dataset_(std::move(dataset)),
      options_(std::move(options)),
      max_in_flight_(ParserThreads(options_) + 2),
      unit_bytes_(static_cast<size_t>(max_in_flight_) + 1),
      parsed_blocks_(std::make_shared<FreeList<RowBlock>>(static_cast<size_t>(max_in_flight_))),
      batch_pool_(std::make_shared<FreeList<RowBlock>>(
          static_cast<size_t>(std::max(options_.prefetch_batches, 1)) + 2)) {}

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
    // Clang 14 (the fuzz build) cannot capture a structured binding.
    const std::string& wanted = name;
    auto it = std::find_if(r->schema_.begin(), r->schema_.end(),
                           [&](const ColumnSpec& c) { return c.name == wanted; });
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
  const int threads = ParserThreads(options);
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
  for (auto* cv : {&work_cv_, &parsed_cv_, &space_cv_, &ready_cv_, &room_cv_}) cv->notify_all();
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
  s.bytes_in_place = bytes_in_place_.load();
  s.rows = rows_.load();
  s.batches = batches_.load();
  return s;
}

// ---- parsers

Status BatchReader::ParseUnit(const Unit& unit, int64_t line, RowBlock* out, int64_t* lines,
                              parquet::DecodeScratch* scratch) const {
  const FileInfo& fi = dataset_->files()[static_cast<size_t>(unit.file)];
  out->Reset(schema_, std::max<int64_t>(unit.rows, 0));
  // A mapped Parquet unit is the whole file (its chunks are where the footer says); any
  // other unit is its records [begin, end) of its bytes, or of the mapped file.
  const bool whole_file = unit.mapping && dataset_->format() == Format::kParquet;
  const char* base = unit.mapping ? unit.mapping->data() : unit.bytes.data();
  const char* data = whole_file ? base : base + unit.begin;
  const size_t len = whole_file ? unit.mapping->size() : unit.end - unit.begin;
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
    case Format::kParquet:
      return DecodeParquetRows(fi, unit.row_group, ParquetLeaves(unit.file),
                               {data, len, unit.mapping != nullptr}, unit.skip_rows, unit.rows,
                               schema_, out, scratch);
  }
  return Status::Internal("unknown format");
}

void BatchReader::ParserMain() {
  parquet::DecodeScratch scratch;  // kept across units: no fresh pages to fault in
  for (;;) {
    std::unique_ptr<Unit> unit;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || !work_.empty(); });
      if (stop_) return;
      unit = std::move(work_.front());
      work_.pop_front();
    }
    auto p = std::make_unique<Parsed>();
    p->block = parsed_blocks_->Take();
    p->line = unit->line;
    Status st;
    try {
      // An unknown first line is given as 1 here; see Parsed::failed.
      st = ParseUnit(*unit, unit->line == kLineAfterPrevious ? 1 : unit->line, &p->block, &p->lines,
                     &scratch);
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
    if (unit != nullptr && unit->bytes.capacity() > 0) unit_bytes_.Give(std::move(unit->bytes));
    if (unit != nullptr && unit->mapping) {
      // Read: its pages leave this process's page tables (MappedFile::Release).
      if (unit->mapped_chunks.empty()) unit->mapping->Release(unit->begin, unit->end - unit->begin);
      for (const ByteRange& r : unit->mapped_chunks) unit->mapping->Release(r.offset, r.size);
    }
    unit.reset();
    {
      std::lock_guard<std::mutex> lock(mu_);
      parsed_[seq] = std::move(p);
    }
    parsed_cv_.notify_one();
  }
}

// ---- batcher

std::shared_ptr<const RowBlock> BatchReader::Lend(RowBlock block) const {
  // Back to the parsers' free list when the last slice goes, which may be after the reader.
  std::weak_ptr<FreeList<RowBlock>> pool = parsed_blocks_;
  return std::shared_ptr<const RowBlock>(new RowBlock(std::move(block)), [pool](RowBlock* b) {
    if (auto p = pool.lock()) p->Give(std::move(*b));  // never throws: see FreeList
    delete b;
  });
}

bool BatchReader::Deliver(std::unique_ptr<RowBlock> batch, int64_t accounted, Status status,
                          bool end) {
  std::unique_lock<std::mutex> lock(mu_);
  if (batch) {
    room_cv_.wait(lock, [&] {
      return stop_ || static_cast<int64_t>(ready_.size()) < options_.prefetch_batches;
    });
    if (stop_) return false;
    rows_ += batch->num_rows;
    ++batches_;
  }
  ready_.push_back({std::move(batch), accounted, std::move(status), end});
  lock.unlock();
  ready_cv_.notify_one();
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
  // A batch that lies whole inside a parsed block is a slice of it rather than a copy
  // (SliceRows), when the block is not much larger than a batch: a slice the caller keeps
  // keeps all of its block. Strings have no slices; shuffled rows are copied anyway.
  bool can_slice = !shuffle;
  for (const ColumnSpec& c : schema_) can_slice = can_slice && c.dtype != DType::kString;
  std::unique_ptr<RowBlock> batch;  // the one being filled; null until rows come for it
  int64_t batch_accounted = 0;
  // The lent block's bytes, which stay accounted until Next() returns its last slice.
  int64_t carried = 0;
  auto new_batch = [&] {
    batch = std::make_unique<RowBlock>(batch_pool_->Take());
    batch->Reset(schema_, options_.batch_size);
    batch_accounted = static_cast<int64_t>(batch->ByteSize());
    Account(batch_accounted);
  };
  // Hands the batch to the queue; its bytes stay accounted until Next() returns it.
  auto flush = [&]() -> bool {
    const int64_t bytes = static_cast<int64_t>(batch->ByteSize()) + carried;
    Account(bytes - batch_accounted - carried);
    carried = 0;
    return Deliver(std::move(batch), bytes);
  };
  auto finish = [&](Status st, bool end) {
    if (batch) Account(-batch_accounted);
    if (shuffle) Account(-shuffle_bytes);
    Deliver(nullptr, 0, std::move(st), end);
  };
  int64_t line = 1;  // the line after the last block's records
  for (int64_t next = 0;; ++next) {
    std::unique_ptr<Parsed> p;
    {
      std::unique_lock<std::mutex> lock(mu_);
      parsed_cv_.wait(lock, [&] { return stop_ || parsed_.count(next) > 0; });
      if (stop_) break;
      auto it = parsed_.find(next);
      p = std::move(it->second);
      parsed_.erase(it);
      --in_flight_;
    }
    space_cv_.notify_one();
    if (p->end_marker) {
      if (shuffle) {
        while (shuffle->size() > 0) {
          if (!batch) new_batch();
          shuffle->Drain(batch.get());
          if (batch->num_rows == options_.batch_size && !flush()) return;
        }
      }
      if (batch && batch->num_rows > 0 && !options_.drop_last) {
        if (!flush()) return;
      } else if (batch) {
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
    const int64_t n = p->block.num_rows;
    const bool slice = can_slice && n / kMaxSlicedBlockBatches <= options_.batch_size;
    std::shared_ptr<const RowBlock> lender;  // p->block, once a batch is a slice of it
    for (int64_t r = 0; r < n;) {
      if (slice && !batch && n - r >= options_.batch_size) {
        if (!lender) lender = Lend(std::move(p->block));
        batch = std::make_unique<RowBlock>();
        batch_accounted = 0;
        SliceRows(schema_, lender, r, r + options_.batch_size, batch.get());
        r += options_.batch_size;
        if (n - r < options_.batch_size) carried = p->accounted;  // its last slice
      } else {
        if (!batch) new_batch();
        const RowBlock& rows = lender ? *lender : p->block;
        if (shuffle) {
          if (shuffle->full()) {
            shuffle->Swap(rows, r, batch.get());
          } else {
            shuffle->Add(rows, r);
          }
          ++r;
        } else {
          const int64_t take = std::min(options_.batch_size - batch->num_rows, n - r);
          AppendRows(schema_, rows, r, r + take, batch.get());
          r += take;
        }
      }
      if (batch->num_rows == options_.batch_size && !flush()) return;
    }
    if (!lender) {
      Account(-p->accounted);
      parsed_blocks_->Give(std::move(p->block));
    }
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
    ready_cv_.wait(lock, [&] { return !ready_.empty(); });
    item = std::move(ready_.front());
    ready_.pop_front();
  }
  room_cv_.notify_one();
  if (item.batch) {
    Account(-item.accounted);
    return std::move(item.batch);
  }
  finished_ = true;
  final_status_ = item.status;
  if (!final_status_.ok()) return final_status_;
  return std::unique_ptr<RowBlock>();
}

}  // namespace data
}  // namespace traintl
