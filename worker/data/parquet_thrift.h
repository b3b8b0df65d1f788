// The Parquet file metadata (footer) and page headers, decoded from the Thrift compact
// protocol: only the fields of FileMetaData, SchemaElement, RowGroup, ColumnChunk,
// ColumnMetaData, PageHeader, DataPageHeader(V2) and DictionaryPageHeader that the reader
// needs; every other field is skipped generically.
//
// A hand-written decoder rather than thrift-compiler output: no generated-code or libthrift
// dependency (Debian's thrift packages are not in the build), and input from a data file is
// untrusted, so every length is checked against the buffer before it is used, allocation is
// bounded by the input's size (a list claiming more elements than its remaining bytes could
// hold is refused before anything is reserved), and nesting depth is bounded
// (kMaxThriftDepth). tests/fuzz/fuzz_parquet exercises it with arbitrary bytes.
//
// Thread-safety: pure functions over immutable inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace traintl {
namespace data {
namespace parquet {

// Struct nesting (and list-of-struct nesting) deeper than this is refused.
inline constexpr int kMaxThriftDepth = 32;
// A footer longer than this is refused rather than read (real ones are KiB to a few MiB).
inline constexpr uint32_t kMaxFooterBytes = 64u << 20;

// parquet.thrift's enums, with the values the format defines.
enum class PhysicalType : int32_t {
  kBoolean = 0,
  kInt32 = 1,
  kInt64 = 2,
  kInt96 = 3,
  kFloat = 4,
  kDouble = 5,
  kByteArray = 6,
  kFixedLenByteArray = 7,
};
enum class Repetition : int32_t { kRequired = 0, kOptional = 1, kRepeated = 2 };
enum class Encoding : int32_t {
  kPlain = 0,
  kPlainDictionary = 2,
  kRle = 3,
  kBitPacked = 4,
  kDeltaBinaryPacked = 5,
  kDeltaLengthByteArray = 6,
  kDeltaByteArray = 7,
  kRleDictionary = 8,
  kByteStreamSplit = 9,
};
enum class Codec : int32_t {
  kUncompressed = 0,
  kSnappy = 1,
  kGzip = 2,
  kLzo = 3,
  kBrotli = 4,
  kLz4 = 5,
  kZstd = 6,
  kLz4Raw = 7,
};
enum class PageType : int32_t {
  kDataPage = 0,
  kIndexPage = 1,
  kDictionaryPage = 2,
  kDataPageV2 = 3
};

const char* PhysicalTypeName(int32_t type);
const char* EncodingName(int32_t encoding);
const char* CodecName(int32_t codec);

struct SchemaElement {
  std::optional<int32_t> type;  // absent for groups (the root, nested types)
  int32_t repetition = 0;       // Repetition; REQUIRED when absent
  std::string name;
  int32_t num_children = 0;
  std::optional<int32_t> converted_type;
};

struct ColumnMetaData {
  int32_t type = 0;
  std::vector<int32_t> encodings;
  std::vector<std::string> path;
  int32_t codec = 0;
  int64_t num_values = 0;
  int64_t total_uncompressed_size = 0;
  int64_t total_compressed_size = 0;
  int64_t data_page_offset = 0;
  std::optional<int64_t> dictionary_page_offset;
  // Set when the writer added a bloom filter (DuckDB does for dictionary-encoded columns
  // by default): read past, as reading every row needs none.
  std::optional<int64_t> bloom_filter_offset;
};

struct ColumnChunk {
  std::string file_path;  // set when the chunk lives in another file (not supported)
  bool has_meta_data = false;
  ColumnMetaData meta_data;
  bool encrypted = false;  // crypto_metadata or encrypted_column_metadata present
};

struct RowGroup {
  std::vector<ColumnChunk> columns;
  int64_t num_rows = 0;
};

struct FileMetaData {
  std::vector<SchemaElement> schema;
  int64_t num_rows = 0;
  std::vector<RowGroup> row_groups;
  bool encrypted = false;  // encryption_algorithm present (plaintext footer mode)
};

struct DataPageHeader {
  int32_t num_values = 0;
  int32_t encoding = 0;
  int32_t definition_level_encoding = 0;
  int32_t repetition_level_encoding = 0;
};
struct DataPageHeaderV2 {
  int32_t num_values = 0;
  int32_t num_nulls = 0;
  int32_t num_rows = 0;
  int32_t encoding = 0;
  int32_t definition_levels_byte_length = 0;
  int32_t repetition_levels_byte_length = 0;
  bool is_compressed = true;
};
struct DictionaryPageHeader {
  int32_t num_values = 0;
  int32_t encoding = 0;
};

struct PageHeader {
  int32_t type = 0;
  int32_t uncompressed_page_size = 0;
  int32_t compressed_page_size = 0;
  std::optional<DataPageHeader> data_page;
  std::optional<DictionaryPageHeader> dictionary_page;
  std::optional<DataPageHeaderV2> data_page_v2;
};

// Decodes a FileMetaData from exactly the footer's bytes. Errors are InvalidArgument
// messages without a file name (the caller adds it).
Result<FileMetaData> DecodeFileMetaData(const uint8_t* data, size_t len);

// Decodes the PageHeader at the start of [data, data + len); *consumed gets its length.
Result<PageHeader> DecodePageHeader(const uint8_t* data, size_t len, size_t* consumed);

}  // namespace parquet
}  // namespace data
}  // namespace traintl
