// NumPy .npy files (format versions 1.0, 2.0 and 3.0): the header, and turning rows of raw
// array data into a column.
//
// A dataset of .npy files has one column, "data": each file holds an array of shape
// (rows, d1, d2, ...), and a row is one (d1, d2, ...) sub-array. Element types: float64 and
// float32 stay as they are, int64 and int32 too; bool, int8/16, uint8/16/32 are widened to
// int64 (uint64 too, failing on values above INT64_MAX); float16 and complex are refused.
// Big-endian data is byte-swapped. Fortran-order arrays are refused (save them with
// np.ascontiguousarray first).
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "worker/data/columns.h"

namespace traintl {
namespace data {

// The column name of an .npy dataset.
inline constexpr char kNpyColumn[] = "data";
// Headers longer than this are refused (numpy writes a few hundred bytes).
inline constexpr size_t kMaxNpyHeaderBytes = 1 << 20;

struct NpyHeader {
  std::string descr;  // e.g. "<f8"
  char kind = 'f';    // 'f' float, 'i' signed, 'u' unsigned, 'b' bool
  int itemsize = 8;
  bool big_endian = false;
  std::vector<int64_t> shape;  // the whole array's
  uint64_t data_offset = 0;    // where the array data starts

  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  // Elements per row, and the row's size in the file.
  int64_t row_elements() const;
  uint64_t row_bytes() const { return static_cast<uint64_t>(itemsize) * row_elements(); }
  // The column type the data is read as by default.
  DType natural_dtype() const;
};

// Parses the header from the first `len` bytes of a file; `file` names it in errors.
// Fails when the header is incomplete in those bytes (callers pass kMaxNpyHeaderBytes or
// the whole file).
Result<NpyHeader> ParseNpyHeader(const char* buf, size_t len, const std::string& file);

// Appends `rows` rows of raw array data (laid out as `h` says) to `col`, converting to
// `out.dtype`. `offset` (the data's byte offset in the file) is for messages.
Status AppendNpyRows(const NpyHeader& h, const char* raw, int64_t rows, const ColumnSpec& out,
                     const std::string& file, uint64_t offset, ColumnData* col);

}  // namespace data
}  // namespace traintl
