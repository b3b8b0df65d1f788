// Decoding one Parquet column chunk (its pages) into a RowBlock column: page headers,
// decompression (UNCOMPRESSED, SNAPPY, GZIP, ZSTD), data pages v1 and v2, dictionary pages,
// definition levels (RLE/bit-packed hybrid), and the value encodings PLAIN,
// PLAIN_DICTIONARY / RLE_DICTIONARY and RLE (booleans).
//
// Flat columns only (the caller refuses nested schemas): no repetition levels, a maximum
// definition level of 1 for OPTIONAL columns and 0 for REQUIRED ones, so one value slot is
// one row.
//
// Nulls: read as NaN when the column is read as float32/float64, as CSV reads an empty
// field; in an int or string column a null is an error naming its row (Parquet has no
// value for it, and inventing 0 or "" would silently change the data).
//
// Untrusted input: every size (page sizes, level lengths, value lengths, dictionary
// indices, run lengths) is checked against the bytes it claims before use; a page's
// uncompressed size is checked against what decompression produced and bounded by
// kMaxPageBytes, so a lying header costs at most that much memory.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/result.h"
#include "worker/data/columns.h"

namespace traintl {
namespace data {
namespace parquet {

// A page whose header claims more uncompressed bytes, or more values, than this is
// refused: with the row range a caller asks for, these bound what decoding allocates
// (RLE can claim billions of values in a few bytes).
inline constexpr int64_t kMaxPageBytes = 256ll << 20;
inline constexpr int64_t kMaxPageValues = 64ll << 20;

// What decoding a column chunk needs from the file metadata.
struct ChunkDesc {
  int32_t type = 0;  // PhysicalType
  bool optional = false;
  int32_t codec = 0;  // Codec
  int64_t num_values = 0;
};

// Buffers that decoding reuses from one column chunk to the next (decompressed pages and
// dictionaries), so that a thread decoding many chunks does not fault in fresh memory for
// each. One per thread; holds up to the largest page decoded.
struct DecodeScratch {
  Buffer page;
  Buffer dict;
};

// Decodes rows [skip, skip + take) of a column chunk whose bytes (from its first page,
// dictionary or data, to its end) are [data, data + len), and appends them to `out` as
// `dtype` (numeric types convert as static_cast does; BYTE_ARRAY columns read as strings
// only). Pages wholly before `skip` are not decompressed. A compressed PLAIN page of a
// REQUIRED column read as its own type (FLOAT as float32, DOUBLE as float64, INT32 as
// int32, INT64 as int64) whose rows are all wanted is decompressed straight into `out`.
// `scratch` may be null (then the buffers are the call's own). Errors are InvalidArgument
// messages without the file, row group or column (the caller names them).
Status DecodeColumnChunk(const uint8_t* data, size_t len, const ChunkDesc& desc, int64_t skip,
                         int64_t take, DType dtype, ColumnData* out,
                         DecodeScratch* scratch = nullptr);

// Decompresses `codec` data into exactly `out_len` bytes at `out`: an error when the data
// is bad or does not decompress to exactly that many bytes.
Status Decompress(int32_t codec, const uint8_t* in, size_t in_len, uint8_t* out, size_t out_len);

// Writes the n doubles at `src` (little-endian, not necessarily aligned: PLAIN data in a
// page) to `dst` as floats, each exactly static_cast<float>(double) (rounded to nearest,
// NaNs quieted), two or more at a time where the CPU allows: a DOUBLE column read as
// float32 (what iter_torch_batches asks for) converts every value of the column.
void NarrowDoubles(const uint8_t* src, size_t n, float* dst);

}  // namespace parquet
}  // namespace data
}  // namespace traintl
