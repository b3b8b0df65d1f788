#include "worker/data/dataset.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "proto/job_spec.h"
#include "worker/data/index_cache.h"
#include "worker/data/parquet_format.h"
#include "worker/data/text_formats.h"

namespace traintl {
namespace data {
namespace {

// Bytes read from the head of every file but the first (which is read for inference).
constexpr size_t kHeadBytes = 64 << 10;

Result<std::string> ReadHead(const DataFile& file, size_t max_bytes, const HttpOptions& http,
                             const std::atomic<bool>* cancel, bool* whole) {
  TRAINTL_ASSIGN_OR_RETURN(auto src, OpenSource(file, 0, {http, cancel}));
  std::string head(max_bytes, '\0');
  TRAINTL_ASSIGN_OR_RETURN(size_t n, ReadFully(src.get(), head.data(), head.size()));
  head.resize(n);
  *whole = n < max_bytes || (src->size() && *src->size() == n);
  return head;
}

std::string Join(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "'" : ", '") + n + "'";
  return s;
}

}  // namespace

const char* FormatName(Format format) {
  switch (format) {
    case Format::kCsv:
      return "csv";
    case Format::kJsonl:
      return "jsonl";
    case Format::kNpy:
      return "npy";
    case Format::kParquet:
      return "parquet";
  }
  return "unknown";
}

bool operator==(const Segment& a, const Segment& b) {
  return a.file == b.file && a.offset == b.offset && a.line == b.line &&
         a.skip_rows == b.skip_rows && a.rows == b.rows;
}

uint64_t MixSeed(uint64_t a, uint64_t b) {
  SplitMix first(a);
  SplitMix second(first.Next() ^ b);
  return second.Next();
}

int64_t RowsPerRank(int64_t total_rows, int world_size, bool split) {
  if (!split || world_size <= 1) return total_rows;
  return (total_rows + world_size - 1) / world_size;
}

std::vector<Segment> PlanEpoch(const std::vector<Chunk>& chunks, int rank, int world_size,
                               bool split, bool shuffle, uint64_t seed, int64_t epoch) {
  std::vector<size_t> order;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (chunks[i].rows > 0) order.push_back(i);
  }
  if (order.empty()) return {};
  if (shuffle) {
    SplitMix rng(MixSeed(seed, static_cast<uint64_t>(epoch)));
    for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng.Below(i + 1)]);
  }
  std::vector<int64_t> starts(order.size());  // the first position of each chunk
  int64_t total = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    starts[k] = total;
    total += chunks[order[k]].rows;
  }
  const int64_t count = RowsPerRank(total, world_size, split);
  const int64_t start = split && world_size > 1 ? (static_cast<int64_t>(rank) * count) % total : 0;

  std::vector<Segment> out;
  size_t k =
      static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), start) - starts.begin()) -
      1;
  int64_t within = start - starts[k];
  size_t prev_chunk = chunks.size();  // the chunk the last segment ended at the end of
  for (int64_t left = count; left > 0;) {
    const size_t c = order[k];
    const Chunk& chunk = chunks[c];
    const int64_t take = std::min(left, chunk.rows - within);
    const bool continues = within == 0 && !out.empty() && prev_chunk + 1 == c &&
                           chunks[prev_chunk].file == chunk.file && out.back().rows >= 0;
    if (continues) {
      out.back().rows += take;
    } else {
      out.push_back({chunk.file, chunk.offset, chunk.line, within, take});
    }
    prev_chunk = within + take == chunk.rows ? c : chunks.size();
    left -= take;
    within = 0;
    k = (k + 1) % order.size();
  }
  return out;
}

Result<std::shared_ptr<Dataset>> Dataset::Open(const DatasetConfig& config,
                                               const ShardOptions& options,
                                               const std::atomic<bool>* cancel) {
  if (config.world_size < 1 || config.rank < 0 || config.rank >= config.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(config.rank) + " of " +
                                   std::to_string(config.world_size) + " is not a valid rank");
  }
  std::shared_ptr<Dataset> ds(new Dataset());
  ds->config_ = config;
  ds->options_ = options;
  std::vector<DataFile> files;
  TRAINTL_ASSIGN_OR_RETURN(files, ResolveDataFiles(config.uri));

  std::string format = config.format;
  const auto infer = [](const std::string& name) {
    DatasetSpec by_name;
    by_name.uri = name;
    return InferDatasetFormat(by_name);
  };
  if (format.empty()) format = infer(config.uri);
  if (format.empty()) format = infer(files.front().name);
  if (format == "csv") {
    ds->format_ = Format::kCsv;
  } else if (format == "jsonl") {
    ds->format_ = Format::kJsonl;
  } else if (format == "npy") {
    ds->format_ = Format::kNpy;
  } else if (format == "parquet") {
    ds->format_ = Format::kParquet;
  } else if (format.empty()) {
    return Status::InvalidArgument(
        config.uri + ": the format cannot be told from the file extension (" + files.front().name +
        "); set \"format\" to csv, jsonl, npy or parquet");
  } else {
    return Status::InvalidArgument("unknown format '" + format + "' (csv, jsonl, npy or parquet)");
  }
  if (!options.column_names.empty() && ds->format_ != Format::kCsv) {
    return Status::InvalidArgument("column_names applies to CSV files only");
  }
  for (auto& f : files) ds->files_.push_back(FileInfo{std::move(f), 0, 1, {}, {}, nullptr});
  TRAINTL_RETURN_IF_ERROR(ds->ReadLayouts(cancel));

  std::vector<std::string> unknown;
  for (const auto& [name, type] : options.column_types) {
    bool found = false;
    for (const auto& c : ds->schema_) found = found || c.name == name;
    if (!found) unknown.push_back(name);
  }
  if (!unknown.empty()) {
    std::vector<std::string> names;
    for (const auto& c : ds->schema_) names.push_back(c.name);
    return Status::InvalidArgument("column_types names " + Join(unknown) +
                                   ", which the data does not have (its columns: " + Join(names) +
                                   ")");
  }
  for (const auto& c : ds->schema_) {
    ds->inferred_.push_back(options.column_types.count(c.name) == 0);
  }
  if (ds->NeedsIndex(false)) TRAINTL_RETURN_IF_ERROR(ds->Index(cancel).status());
  return ds;
}

Status Dataset::ReadLayouts(const std::atomic<bool>* cancel) {
  const HttpOptions& http = options_.http;
  for (size_t i = 0; i < files_.size(); ++i) {
    FileInfo& fi = files_[i];
    const std::string& name = fi.file.name;
    const TextPos pos{&name, 1, 0};
    bool whole = false;
    if (format_ == Format::kParquet) {
      TRAINTL_RETURN_IF_ERROR(
          OpenParquetFile(i, options_.column_types, {http, cancel}, &files_, &schema_));
      continue;
    }
    if (format_ == Format::kNpy) {
      TRAINTL_ASSIGN_OR_RETURN(std::string head, ReadHead(fi.file, 4096, http, cancel, &whole));
      auto h = ParseNpyHeader(head.data(), head.size(), name);
      if (!h.ok() && !whole) {
        TRAINTL_ASSIGN_OR_RETURN(head,
                                 ReadHead(fi.file, kMaxNpyHeaderBytes + 16, http, cancel, &whole));
        h = ParseNpyHeader(head.data(), head.size(), name);
      }
      TRAINTL_RETURN_IF_ERROR(h.status());
      fi.npy = std::move(h).value();
      fi.data_offset = fi.npy.data_offset;
      // The data's size, to refuse a truncated file now rather than mid-epoch.
      TRAINTL_ASSIGN_OR_RETURN(auto src, OpenSource(fi.file, 0, {http, cancel}));
      if (auto size = src->size()) {
        const uint64_t need =
            fi.npy.data_offset + fi.npy.row_bytes() * static_cast<uint64_t>(fi.npy.rows());
        if (*size < need) {
          return Status::InvalidArgument(name + ": the file is truncated: its header says " +
                                         std::to_string(fi.npy.rows()) + " rows (" +
                                         std::to_string(need) + " bytes in all), the file has " +
                                         std::to_string(*size) + " bytes");
        }
      }
      std::vector<int64_t> inner(fi.npy.shape.begin() + 1, fi.npy.shape.end());
      if (i == 0) {
        ColumnSpec c;
        c.name = kNpyColumn;
        c.dtype = fi.npy.natural_dtype();
        c.shape = inner;
        auto t = options_.column_types.find(kNpyColumn);
        if (t != options_.column_types.end()) {
          if (t->second == DType::kString) {
            return Status::InvalidArgument(name + ": numeric .npy data cannot be read as strings");
          }
          c.dtype = t->second;
        }
        schema_ = {c};
      } else {
        const FileInfo& first = files_[0];
        std::vector<int64_t> first_inner(first.npy.shape.begin() + 1, first.npy.shape.end());
        if (inner != first_inner || fi.npy.natural_dtype() != first.npy.natural_dtype()) {
          auto describe = [](const NpyHeader& h) {
            std::string s = "'" + h.descr + "' rows of shape (";
            for (size_t d = 1; d < h.shape.size(); ++d) {
              s += std::to_string(h.shape[d]) + (h.shape.size() == 2      ? ","
                                                 : d + 1 < h.shape.size() ? ", "
                                                                          : "");
            }
            return s + ")";
          };
          return Status::InvalidArgument(name + " holds " + describe(fi.npy) + ", but " +
                                         first.file.name + " holds " + describe(first.npy) +
                                         ": every file of a dataset must hold rows of one "
                                         "dtype and shape");
        }
      }
      continue;
    }

    // JSON Lines files after the first need only their byte order mark checked.
    const size_t head_bytes = i == 0 ? std::max(options_.infer_bytes, kHeadBytes)
                              : format_ == Format::kJsonl ? 3
                                                          : kHeadBytes;
    TRAINTL_ASSIGN_OR_RETURN(std::string head, ReadHead(fi.file, head_bytes, http, cancel, &whole));
    if (format_ == Format::kJsonl) {
      fi.data_offset = Utf8BomLength(head.data(), head.size());
      fi.data_line = 1;
      if (i == 0) {
        const char* sample = head.data() + fi.data_offset;
        const size_t len = head.size() - fi.data_offset;
        TRAINTL_ASSIGN_OR_RETURN(
            ScanResult r, ScanRecords(sample, len, options_.infer_rows, whole, /*csv=*/false, pos));
        TRAINTL_ASSIGN_OR_RETURN(schema_, InferJsonlSchema(sample, r.consumed, options_.infer_rows,
                                                           options_.column_types, pos));
        if (schema_.empty()) {
          return Status::InvalidArgument(name + ": no JSON object with keys in its first rows " +
                                         "(the first file of a JSON Lines dataset must have rows)");
        }
      }
      continue;
    }

    // CSV.
    auto header = ParseCsvHeader(head.data(), head.size(), whole, options_.column_names, pos);
    if (!header.ok() && !whole && head.size() < kMaxRecordBytes) {
      TRAINTL_ASSIGN_OR_RETURN(head, ReadHead(fi.file, kMaxRecordBytes, http, cancel, &whole));
      header = ParseCsvHeader(head.data(), head.size(), whole, options_.column_names, pos);
    }
    TRAINTL_RETURN_IF_ERROR(header.status());
    fi.data_offset = header->data_offset;
    fi.data_line = header->data_line;
    if (i == 0) {
      const char* sample = head.data() + fi.data_offset;
      const size_t len = head.size() - fi.data_offset;
      const TextPos at{&name, fi.data_line, fi.data_offset};
      TRAINTL_ASSIGN_OR_RETURN(ScanResult r, ScanRecords(sample, len, options_.infer_rows, whole,
                                                         /*csv=*/true, at));
      TRAINTL_ASSIGN_OR_RETURN(
          schema_, InferCsvSchema(header->names, sample, r.consumed, options_.infer_rows,
                                  options_.column_types, at));
    }
    // Map this file's fields onto the schema (the first file's columns, in its order).
    std::vector<std::string> extra;
    fi.field_column.assign(header->names.size(), -1);
    std::vector<bool> present(schema_.size(), false);
    for (size_t f = 0; f < header->names.size(); ++f) {
      for (size_t c = 0; c < schema_.size(); ++c) {
        if (schema_[c].name == header->names[f]) {
          fi.field_column[f] = static_cast<int>(c);
          present[c] = true;
        }
      }
      if (fi.field_column[f] < 0) extra.push_back(header->names[f]);
    }
    std::vector<std::string> missing;
    for (size_t c = 0; c < schema_.size(); ++c) {
      if (!present[c]) missing.push_back(schema_[c].name);
    }
    if (!missing.empty()) {
      return Status::InvalidArgument(name + ": column " + Join(missing) + " is missing from " +
                                     "the header (" + files_[0].file.name + " has it)");
    }
    if (!extra.empty()) {
      return Status::InvalidArgument(name + ": column " + Join(extra) + " is not in " +
                                     files_[0].file.name +
                                     " (every file of a dataset must have the same columns)");
    }
  }
  return Status::Ok();
}

Result<std::vector<Chunk>> Dataset::ScanFile(int index, const std::atomic<bool>* cancel) const {
  const FileInfo& fi = files_[static_cast<size_t>(index)];
  std::vector<Chunk> chunks;
  const size_t chunk_bytes = std::max<size_t>(options_.chunk_bytes, 1);
  if (format_ == Format::kParquet) return ParquetChunks(index, *fi.parquet);
  if (format_ == Format::kNpy) {
    const int64_t rows = fi.npy.rows();
    const uint64_t row_bytes = std::max<uint64_t>(fi.npy.row_bytes(), 1);
    const int64_t per = std::max<int64_t>(1, static_cast<int64_t>(chunk_bytes / row_bytes));
    for (int64_t r = 0; r < rows; r += per) {
      chunks.push_back({index, fi.data_offset + static_cast<uint64_t>(r) * fi.npy.row_bytes(), 1,
                        std::min(per, rows - r)});
    }
    return chunks;
  }
  TRAINTL_ASSIGN_OR_RETURN(auto src, OpenSource(fi.file, fi.data_offset, {options_.http, cancel}));
  Buffer buf;
  size_t len = 0;
  uint64_t offset = fi.data_offset;
  int64_t line = fi.data_line;
  size_t want = chunk_bytes;
  for (;;) {
    if (cancel != nullptr && cancel->load()) return Status::Unavailable("cancelled");
    buf.Resize(len + want);
    TRAINTL_ASSIGN_OR_RETURN(size_t n, ReadFully(src.get(), buf.data() + len, want));
    len += n;
    const bool eof = n < want;
    const TextPos pos{&fi.file.name, line, offset};
    TRAINTL_ASSIGN_OR_RETURN(
        ScanResult r, ScanRecords(buf.data(), len, INT64_MAX, eof, format_ == Format::kCsv, pos));
    if (r.rows > 0) chunks.push_back({index, offset, line, r.rows});
    offset += r.consumed;
    line += r.lines;
    std::memmove(buf.data(), buf.data() + r.consumed, len - r.consumed);
    len -= r.consumed;
    if (eof) break;
    if (len > kMaxRecordBytes) {
      return Status::InvalidArgument(Located(pos, line, offset,
                                             "a record longer than 64 MiB (is the file really " +
                                                 std::string(FormatName(format_)) + "?)"));
    }
    // A record longer than the chunk: read more before scanning again.
    want = r.consumed == 0 ? std::max(want, len) : chunk_bytes;
  }
  return chunks;
}

Result<std::shared_ptr<const std::vector<Chunk>>> Dataset::Index(const std::atomic<bool>* cancel) {
  std::lock_guard<std::mutex> lock(index_mu_);
  if (index_) return index_;
  TRAINTL_ASSIGN_OR_RETURN(
      std::vector<Chunk> chunks,
      BuildSharedIndex(
          options_.index_dir, files_, format_, options_.chunk_bytes, options_.http,
          [&](int i) { return ScanFile(i, cancel); }, cancel, &index_stats_));
  index_ = std::make_shared<const std::vector<Chunk>>(std::move(chunks));
  return index_;
}

IndexStats Dataset::index_stats() const {
  std::lock_guard<std::mutex> lock(index_mu_);
  return index_stats_;
}

std::optional<int64_t> Dataset::TotalRows() const {
  if (format_ == Format::kNpy) {
    int64_t n = 0;
    for (const auto& f : files_) n += f.npy.rows();
    return n;
  }
  if (format_ == Format::kParquet) {
    int64_t n = 0;
    for (const auto& f : files_) {
      for (const auto& g : f.parquet->meta.row_groups) n += g.num_rows;
    }
    return n;
  }
  std::lock_guard<std::mutex> lock(index_mu_);
  if (!index_) return std::nullopt;
  int64_t n = 0;
  for (const auto& c : *index_) n += c.rows;
  return n;
}

}  // namespace data
}  // namespace traintl
