// Parquet files as a Dataset reads them: the footer (read with ranged reads, so an http(s)
// file costs a size probe and one or two small requests), the flat schema it describes,
// the row index (one Chunk per row group, straight from the footer: no scan), and decoding
// a row group's selected column chunks into rows.
//
// Supported: flat schemas whose columns are BOOLEAN (read as int64 0/1, as JSON Lines reads
// booleans), INT32 (int32), INT64 (int64), FLOAT (float32), DOUBLE (float64) and BYTE_ARRAY
// (string; UTF-8 or raw bytes), REQUIRED or OPTIONAL; codecs UNCOMPRESSED, SNAPPY, GZIP and
// ZSTD; see parquet_pages.h for encodings and nulls. Refused with an error naming the column:
// nested columns (groups, lists, maps, REPEATED fields), INT96 and FIXED_LEN_BYTE_ARRAY,
// DELTA_* and BYTE_STREAM_SPLIT encodings, the LZO, BROTLI and LZ4 codecs, encrypted files
// and columns, column chunks stored in other files. Bloom filters, statistics and page
// indexes are read past (reading every row needs none of them): refusing bloom filters
// would refuse what DuckDB writes by default for dictionary-encoded columns.
//
// Shards: a Chunk of a Parquet file is one row group: `offset` is the row group's index
// (not a byte offset) and `line` its first row in the file; a Segment starts at a row group
// and skips and takes rows as for the text formats, so PlanEpoch balances ranks unchanged.
//
// Memory: a row group's selected column chunks are read whole (they are the unit a reader
// thread hands to a parser, which decodes all the unit's rows into one block), so a reader
// holds up to (parser threads + 2) row groups' chunks and decoded rows. A local file is
// mapped (MappedFile) and its chunks decoded where they lie in the page cache; an http(s)
// file's chunks are read into buffers with Range requests. Splitting a row
// group into several units would bound that by rows, at the cost of decompressing the
// pages that straddle the units' bounds once per unit.
//
// Thread-safety: a ParquetLayout is immutable once read; the functions are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "worker/data/columns.h"
#include "worker/data/parquet_pages.h"
#include "worker/data/parquet_thrift.h"
#include "worker/data/source.h"

namespace traintl {
namespace data {

struct Chunk;
struct FileInfo;

// One leaf (column) of a flat Parquet schema.
struct ParquetColumn {
  std::string name;
  int32_t type = 0;  // parquet::PhysicalType
  bool optional = false;
};

// A Parquet file's footer, checked.
struct ParquetLayout {
  uint64_t file_size = 0;
  std::vector<ParquetColumn> columns;
  parquet::FileMetaData meta;
};

// The byte range of a column chunk: from its first page (the dictionary page when there is
// one) for total_compressed_size bytes.
struct ByteRange {
  uint64_t offset = 0;
  uint64_t size = 0;
};
ByteRange ColumnChunkRange(const parquet::ColumnMetaData& m);

// Reads and checks the footer of `file`: the magic numbers, the metadata, a flat schema of
// supported types, and every column chunk's codec, encodings and byte range (within the
// file). Errors name the file (and the column when there is one).
Result<std::shared_ptr<const ParquetLayout>> ReadParquetLayout(const DataFile& file,
                                                               const SourceOptions& options);

// The checks of ReadParquetLayout after the magic numbers: decodes and checks `footer`
// (the metadata of a file of `size` bytes named `name`, which ends 8 bytes before the end).
// Pure; also the entry of the fuzz target tests/fuzz/fuzz_parquet.
Result<std::shared_ptr<const ParquetLayout>> ParseParquetFooter(const std::string& name,
                                                                uint64_t size,
                                                                const uint8_t* footer,
                                                                size_t footer_len);

// Dataset::Open's step for Parquet files: reads the footer of (*files)[i], and for the first
// file sets *schema (its columns in file order, `column_types` applied: numeric columns may
// be read as any numeric type, strings only as strings); later files must have the same
// columns (in any order) of the same types. Sets the file's parquet layout and its
// field_column (leaf -> schema column).
Status OpenParquetFile(size_t i, const std::map<std::string, DType>& column_types,
                       const SourceOptions& options, std::vector<FileInfo>* files, Schema* schema);

// The row index of a file: one Chunk per non-empty row group.
std::vector<Chunk> ParquetChunks(int file_index, const ParquetLayout& layout);

// Where DecodeParquetRows finds a row group's column chunks: either `data` holds the chunks
// of its `leaves` one after the other (each ColumnChunkRange long), as a ranged read gives
// them, or (`whole_file`) `data` is the whole file, mapped, and each chunk is at its offset.
struct ChunkBytes {
  const char* data = nullptr;
  size_t len = 0;
  bool whole_file = false;
};

// Decodes rows [skip, skip + rows) of row group `row_group` into `out` (which follows
// `schema`): column k of `out` is leaf `leaves[k]` of the file, read from `bytes`.
// `scratch` (may be null): the calling thread's buffers for decoding pages.
Status DecodeParquetRows(const FileInfo& file, int row_group, const std::vector<int>& leaves,
                         const ChunkBytes& bytes, int64_t skip, int64_t rows, const Schema& schema,
                         RowBlock* out, parquet::DecodeScratch* scratch = nullptr);

}  // namespace data
}  // namespace traintl
