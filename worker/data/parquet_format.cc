#include "worker/data/parquet_format.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "worker/data/dataset.h"
#include "worker/data/parquet_pages.h"

namespace traintl {
namespace data {
namespace {

using parquet::Codec;
using parquet::Encoding;
using parquet::PhysicalType;
using parquet::Repetition;

// Bytes read from the end of a file in the first request: the footer of most files fits.
constexpr uint64_t kTailBytes = 64 << 10;
// More rows than this in one file are refused (2^48: far beyond any real file).
constexpr int64_t kMaxRows = int64_t{1} << 48;

Status Bad(const std::string& file, const std::string& why) {
  return Status::InvalidArgument(file + ": " + why);
}

Result<std::string> ReadRange(const DataFile& file, uint64_t offset, uint64_t size,
                              const SourceOptions& options) {
  TRAINTL_ASSIGN_OR_RETURN(auto src, OpenSource(file, offset, options));
  std::string out(static_cast<size_t>(size), '\0');
  TRAINTL_ASSIGN_OR_RETURN(size_t n, ReadFully(src.get(), out.data(), out.size()));
  if (n != size) {
    return Bad(file.name, "the file ended at byte " + std::to_string(offset + n) +
                              " while reading bytes " + std::to_string(offset) + " to " +
                              std::to_string(offset + size) + " (was it changed?)");
  }
  return out;
}

std::optional<DType> NaturalDType(int32_t type) {
  switch (static_cast<PhysicalType>(type)) {
    case PhysicalType::kBoolean:
    case PhysicalType::kInt64:
      return DType::kInt64;
    case PhysicalType::kInt32:
      return DType::kInt32;
    case PhysicalType::kFloat:
      return DType::kFloat32;
    case PhysicalType::kDouble:
      return DType::kFloat64;
    case PhysicalType::kByteArray:
      return DType::kString;
    default:
      return std::nullopt;
  }
}

bool SupportedCodec(int32_t codec) {
  switch (static_cast<Codec>(codec)) {
    case Codec::kUncompressed:
    case Codec::kSnappy:
    case Codec::kGzip:
    case Codec::kZstd:
      return true;
    default:
      return false;
  }
}

bool SupportedEncoding(int32_t encoding) {
  switch (static_cast<Encoding>(encoding)) {
    case Encoding::kPlain:
    case Encoding::kPlainDictionary:
    case Encoding::kRle:
    case Encoding::kRleDictionary:
    case Encoding::kBitPacked:  // listed by old writers for levels; refused if a page uses it
      return true;
    default:
      return false;
  }
}

// The leaves of a flat schema; nested columns are refused.
Result<std::vector<ParquetColumn>> FlatColumns(const parquet::FileMetaData& m,
                                               const std::string& name) {
  if (m.schema.empty()) return Bad(name, "the Parquet schema is empty");
  const auto& root = m.schema[0];
  if (root.num_children < 0 || static_cast<size_t>(root.num_children) + 1 > m.schema.size()) {
    return Bad(name, "the Parquet schema's root claims " + std::to_string(root.num_children) +
                         " columns, the schema has " + std::to_string(m.schema.size() - 1) +
                         " elements");
  }
  std::vector<ParquetColumn> out;
  for (size_t i = 1; i <= static_cast<size_t>(root.num_children); ++i) {
    const auto& e = m.schema[i];
    const std::string col = name + ": column '" + e.name + "'";
    if (e.num_children != 0 || !e.type) {
      return Status::InvalidArgument(col +
                                     " is a nested type (a group, list, map or struct), "
                                     "which is not supported: only flat schemas are");
    }
    if (e.repetition == static_cast<int32_t>(Repetition::kRepeated)) {
      return Status::InvalidArgument(
          col + " is REPEATED (a list), which is not supported: " + "only flat schemas are");
    }
    if (!NaturalDType(*e.type)) {
      return Status::InvalidArgument(col + " has the physical type " +
                                     parquet::PhysicalTypeName(*e.type) +
                                     ", which is not supported (BOOLEAN, INT32, INT64, FLOAT, "
                                     "DOUBLE and BYTE_ARRAY are)");
    }
    for (const auto& c : out) {
      if (c.name == e.name) return Status::InvalidArgument(col + " appears twice");
    }
    out.push_back({e.name, *e.type, e.repetition == static_cast<int32_t>(Repetition::kOptional)});
  }
  if (static_cast<size_t>(root.num_children) + 1 != m.schema.size()) {
    return Bad(name, "the Parquet schema has elements past its root's columns (nested?)");
  }
  if (out.empty()) return Bad(name, "the Parquet file has no columns");
  return out;
}

}  // namespace

ByteRange ColumnChunkRange(const parquet::ColumnMetaData& m) {
  uint64_t start = static_cast<uint64_t>(m.data_page_offset);
  // Some writers set dictionary_page_offset to 0 without a dictionary: only an offset before
  // the first data page is one.
  if (m.dictionary_page_offset && *m.dictionary_page_offset > 0 &&
      *m.dictionary_page_offset < m.data_page_offset) {
    start = static_cast<uint64_t>(*m.dictionary_page_offset);
  }
  return {start, static_cast<uint64_t>(m.total_compressed_size)};
}

Result<std::shared_ptr<const ParquetLayout>> ReadParquetLayout(const DataFile& file,
                                                               const SourceOptions& options) {
  const std::string& name = file.name;
  uint64_t size = 0;
  {
    TRAINTL_ASSIGN_OR_RETURN(auto src, OpenSource(file, 0, options));
    if (!src->size()) {
      return Bad(name,
                 "the server did not say the file's size, which reading a Parquet "
                 "file's footer needs");
    }
    size = *src->size();
  }
  if (size < 12) {
    return Bad(name, "not a Parquet file: " + std::to_string(size) +
                         " bytes, too short for its magic numbers and footer");
  }
  const uint64_t tail_len = std::min(size, kTailBytes);
  TRAINTL_ASSIGN_OR_RETURN(std::string tail, ReadRange(file, size - tail_len, tail_len, options));
  const char* magic = tail.data() + tail.size() - 4;
  if (std::memcmp(magic, "PARE", 4) == 0) {
    return Bad(name, "the Parquet file is encrypted (PARE), which is not supported");
  }
  if (std::memcmp(magic, "PAR1", 4) != 0) {
    return Bad(name,
               "not a Parquet file: it does not end with the magic number PAR1 "
               "(truncated, or another format?)");
  }
  if (tail_len == size && std::memcmp(tail.data(), "PAR1", 4) != 0) {
    return Bad(name, "not a Parquet file: it does not start with the magic number PAR1");
  }
  uint32_t footer_len = 0;
  std::memcpy(&footer_len, tail.data() + tail.size() - 8, 4);
  if (footer_len > parquet::kMaxFooterBytes || uint64_t{footer_len} + 12 > size) {
    return Bad(name, "the footer length (" + std::to_string(footer_len) +
                         " bytes) does not fit the file's " + std::to_string(size) +
                         " bytes (truncated or corrupt?)");
  }
  const uint64_t footer_start = size - 8 - footer_len;
  std::string footer;
  if (uint64_t{footer_len} + 8 <= tail_len) {
    footer = tail.substr(static_cast<size_t>(tail_len - 8 - footer_len), footer_len);
  } else {
    TRAINTL_ASSIGN_OR_RETURN(footer, ReadRange(file, footer_start, footer_len, options));
  }
  return ParseParquetFooter(name, size, reinterpret_cast<const uint8_t*>(footer.data()),
                            footer.size());
}

Result<std::shared_ptr<const ParquetLayout>> ParseParquetFooter(const std::string& name,
                                                                uint64_t size,
                                                                const uint8_t* footer,
                                                                size_t footer_len) {
  if (uint64_t{footer_len} + 12 > size) return Bad(name, "the footer does not fit the file");
  const uint64_t footer_start = size - 8 - footer_len;
  auto meta = parquet::DecodeFileMetaData(footer, footer_len);
  if (!meta.ok()) return Bad(name, meta.status().message());
  auto layout = std::make_shared<ParquetLayout>();
  layout->file_size = size;
  layout->meta = std::move(meta).value();
  const auto& m = layout->meta;
  if (m.encrypted) {
    return Bad(name,
               "the Parquet file is encrypted (encryption_algorithm is set), which is "
               "not supported");
  }
  TRAINTL_ASSIGN_OR_RETURN(layout->columns, FlatColumns(m, name));
  const auto& cols = layout->columns;
  int64_t total_rows = 0;
  for (size_t g = 0; g < m.row_groups.size(); ++g) {
    const auto& rg = m.row_groups[g];
    const std::string where = name + ": row group " + std::to_string(g);
    // Bounded so that sums of row counts (the index, the epoch's plan) cannot overflow.
    if (rg.num_rows < 0 || rg.num_rows > kMaxRows - total_rows) {
      return Status::InvalidArgument(where + " has " + std::to_string(rg.num_rows) +
                                     " rows, which is not a valid row count");
    }
    total_rows += rg.num_rows;
    if (rg.columns.size() != cols.size()) {
      return Status::InvalidArgument(where + " has " + std::to_string(rg.columns.size()) +
                                     " column chunks, the schema " + std::to_string(cols.size()) +
                                     " columns");
    }
    std::vector<std::pair<ByteRange, size_t>> ranges;  // each chunk's bytes, and its column
    for (size_t c = 0; c < cols.size(); ++c) {
      const auto& cc = rg.columns[c];
      const std::string col = where + ", column '" + cols[c].name + "'";
      if (cc.encrypted) {
        return Status::InvalidArgument(col + " is encrypted, which is not supported");
      }
      if (!cc.file_path.empty()) {
        return Status::InvalidArgument(col + " is stored in another file (" + cc.file_path +
                                       "), which is not supported");
      }
      if (!cc.has_meta_data) return Status::InvalidArgument(col + " has no metadata");
      const auto& md = cc.meta_data;
      if (md.type != cols[c].type) {
        return Status::InvalidArgument(col + " holds " + parquet::PhysicalTypeName(md.type) +
                                       " values, the schema says " +
                                       parquet::PhysicalTypeName(cols[c].type));
      }
      if (!SupportedCodec(md.codec)) {
        return Status::InvalidArgument(col + " is compressed with " + parquet::CodecName(md.codec) +
                                       ", which is not supported (UNCOMPRESSED, SNAPPY, GZIP "
                                       "and ZSTD are)");
      }
      for (int32_t e : md.encodings) {
        if (!SupportedEncoding(e)) {
          return Status::InvalidArgument(col + " uses the " + parquet::EncodingName(e) +
                                         " encoding, which is not supported (PLAIN, "
                                         "PLAIN_DICTIONARY, RLE_DICTIONARY and RLE are)");
        }
      }
      if (md.num_values != rg.num_rows) {
        return Status::InvalidArgument(col + " has " + std::to_string(md.num_values) +
                                       " values for the row group's " +
                                       std::to_string(rg.num_rows) + " rows");
      }
      const ByteRange r = ColumnChunkRange(md);
      if (md.data_page_offset < 4 || md.total_compressed_size < 0 || r.offset < 4 ||
          r.offset > footer_start || r.size > footer_start - r.offset) {
        return Status::InvalidArgument(
            col + ": its byte range (" + std::to_string(md.total_compressed_size) +
            " bytes at byte " + std::to_string(r.offset) +
            ") is not within the file's data (bytes 4 to " + std::to_string(footer_start) + ")");
      }
      ranges.emplace_back(r, c);
    }
    // Disjoint, so that the bytes a row group's chunks take together (what a reader
    // allocates for them) are at most the file's: a footer that lies cannot make a sum wrap
    // around, or ask for more memory than the file has bytes.
    std::stable_sort(ranges.begin(), ranges.end(),
                     [](const auto& a, const auto& b) { return a.first.offset < b.first.offset; });
    for (size_t k = 1; k < ranges.size(); ++k) {
      const ByteRange& prev = ranges[k - 1].first;
      if (prev.offset + prev.size > ranges[k].first.offset) {
        return Status::InvalidArgument(where + ": the byte ranges of columns '" +
                                       cols[ranges[k - 1].second].name + "' and '" +
                                       cols[ranges[k].second].name + "' overlap");
      }
    }
  }
  return std::shared_ptr<const ParquetLayout>(std::move(layout));
}

Status OpenParquetFile(size_t i, const std::map<std::string, DType>& column_types,
                       const SourceOptions& options, std::vector<FileInfo>* files, Schema* schema) {
  FileInfo& fi = (*files)[i];
  TRAINTL_ASSIGN_OR_RETURN(fi.parquet, ReadParquetLayout(fi.file, options));
  const auto& cols = fi.parquet->columns;
  if (i == 0) {
    schema->clear();
    for (const auto& c : cols) {
      ColumnSpec spec;
      spec.name = c.name;
      spec.dtype = *NaturalDType(c.type);
      auto t = column_types.find(c.name);
      if (t != column_types.end()) {
        if ((t->second == DType::kString) != (spec.dtype == DType::kString)) {
          return Bad(fi.file.name, "column '" + c.name + "' holds " +
                                       parquet::PhysicalTypeName(c.type) +
                                       " values, which cannot be read as " + DTypeName(t->second));
        }
        spec.dtype = t->second;
      }
      schema->push_back(spec);
    }
  }
  const FileInfo& first = (*files)[0];
  fi.field_column.assign(cols.size(), -1);
  std::vector<bool> present(schema->size(), false);
  for (size_t l = 0; l < cols.size(); ++l) {
    for (size_t c = 0; c < schema->size(); ++c) {
      if ((*schema)[c].name != cols[l].name) continue;
      const auto& want = first.parquet->columns[c];
      if (want.type != cols[l].type) {
        return Bad(fi.file.name, "column '" + cols[l].name + "' holds " +
                                     parquet::PhysicalTypeName(cols[l].type) + " values, but " +
                                     first.file.name + "'s holds " +
                                     parquet::PhysicalTypeName(want.type));
      }
      fi.field_column[l] = static_cast<int>(c);
      present[c] = true;
    }
    if (fi.field_column[l] < 0) {
      return Bad(fi.file.name, "column '" + cols[l].name + "' is not in " + first.file.name +
                                   " (every file of a dataset must have the same columns)");
    }
  }
  for (size_t c = 0; c < schema->size(); ++c) {
    if (!present[c]) {
      return Bad(fi.file.name,
                 "column '" + (*schema)[c].name + "' is missing (" + first.file.name + " has it)");
    }
  }
  fi.data_offset = 0;  // row group 0
  fi.data_line = 0;
  return Status::Ok();
}

std::vector<Chunk> ParquetChunks(int file_index, const ParquetLayout& layout) {
  std::vector<Chunk> out;
  int64_t first_row = 0;
  const auto& groups = layout.meta.row_groups;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].num_rows > 0) {
      out.push_back({file_index, static_cast<uint64_t>(g), first_row, groups[g].num_rows});
    }
    first_row += groups[g].num_rows;
  }
  return out;
}

Status DecodeParquetRows(const FileInfo& file, int row_group, const std::vector<int>& leaves,
                         const ChunkBytes& bytes, int64_t skip, int64_t rows, const Schema& schema,
                         RowBlock* out, parquet::DecodeScratch* scratch) {
  const ParquetLayout& layout = *file.parquet;
  const auto& rg = layout.meta.row_groups[static_cast<size_t>(row_group)];
  size_t at = 0;
  for (size_t k = 0; k < leaves.size(); ++k) {
    const size_t leaf = static_cast<size_t>(leaves[k]);
    const auto& md = rg.columns[leaf].meta_data;
    const ByteRange r = ColumnChunkRange(md);
    if (bytes.whole_file) at = static_cast<size_t>(r.offset);
    if (at > bytes.len || r.size > bytes.len - at) {
      return Status::Internal("a Parquet unit shorter than its chunks");
    }
    parquet::ChunkDesc desc;
    desc.type = md.type;
    desc.optional = layout.columns[leaf].optional;
    desc.codec = md.codec;
    desc.num_values = md.num_values;
    Status st = parquet::DecodeColumnChunk(reinterpret_cast<const uint8_t*>(bytes.data + at),
                                           static_cast<size_t>(r.size), desc, skip, rows,
                                           schema[k].dtype, &out->columns[k], scratch);
    if (!st.ok()) {
      return Status::InvalidArgument(file.file.name + ": row group " + std::to_string(row_group) +
                                     ", column '" + layout.columns[leaf].name +
                                     "': " + st.message());
    }
    at += static_cast<size_t>(r.size);
  }
  out->num_rows = rows;
  return Status::Ok();
}

}  // namespace data
}  // namespace traintl
