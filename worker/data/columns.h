// Columnar row storage for the dataset reader: element types, the schema of a dataset, a
// growable uninitialized byte buffer, and RowBlock (some rows of every column of a schema).
//
// A RowBlock holds each column contiguously: numeric columns as num_rows * row_elements
// values of the column's dtype (row-major, so a per-row shape [3, 4] is 12 values per row),
// string columns as UTF-8 bytes plus num_rows + 1 int64 offsets.
//
// Thread-safety: plain values; no internal synchronization.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace traintl {
namespace data {

// The values of the C ABI's TRAINTL_DTYPE_* (traintl/abi.h).
enum class DType : int32_t {
  kFloat64 = 1,
  kInt64 = 2,
  kString = 3,
  kFloat32 = 4,
  kInt32 = 5,
};

// "float64", "int64", "string", "float32", "int32".
const char* DTypeName(DType dtype);
// The inverse of DTypeName; nullopt when unknown.
std::optional<DType> DTypeFromName(const std::string& name);
// Bytes per element; 0 for strings.
size_t DTypeSize(DType dtype);

struct ColumnSpec {
  std::string name;
  DType dtype = DType::kFloat64;
  // Dimensions of one row's value: empty for a scalar (CSV cells), [k] for a JSON array of
  // k numbers, the trailing dimensions of a .npy array.
  std::vector<int64_t> shape;

  // Elements per row: the product of `shape` (1 for a scalar).
  int64_t RowElements() const;
  // Bytes per row of a numeric column (0 for strings).
  size_t RowBytes() const { return DTypeSize(dtype) * static_cast<size_t>(RowElements()); }
};
bool operator==(const ColumnSpec& a, const ColumnSpec& b);
inline bool operator!=(const ColumnSpec& a, const ColumnSpec& b) { return !(a == b); }

using Schema = std::vector<ColumnSpec>;

// A growable byte buffer whose new bytes are not initialized (every byte of a batch is
// written exactly once, so zero-filling would only cost time). Move-only.
//
// A capacity of kHugeBufferBytes or more is mapped on its own, 2 MiB-aligned, and asked to
// use transparent huge pages (madvise; the kernel may decline): the reader's multi-MiB
// blocks are written once after each allocation, and in 4 KiB pages that first write is a
// page fault every 4 KiB (a fifth of the CPU of a fast Parquet read); in 2 MiB pages it is
// one in 512. Such capacities are rounded up to a multiple of 4 KiB, not 2 MiB: the kernel
// zeroes a huge page whole on first touch, so a tail in 4 KiB pages costs less than
// zeroing up to 2 MiB that nobody writes.
inline constexpr size_t kHugeBufferBytes = size_t{2} << 20;

// A Buffer may also borrow its memory (Borrow): RowBlock lends each column a part of one
// arena, so that a block of many medium columns is one huge mapping rather than many 4 KiB
// page faults, and a slice's columns borrow the rows of the block it is a slice of. A
// borrowed buffer that must grow moves to memory of its own.
class Buffer {
 public:
  Buffer() = default;
  ~Buffer() {
    if (!borrowed_) Release(data_, capacity_);
  }
  Buffer(Buffer&& other) noexcept
      : data_(other.data_),
        size_(other.size_),
        capacity_(other.capacity_),
        borrowed_(other.borrowed_) {
    other.data_ = nullptr;
    other.size_ = other.capacity_ = 0;
    other.borrowed_ = false;
  }
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  char* data() { return data_; }
  const char* data() const { return data_; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }

  // Makes room for `n` bytes in total without changing size().
  void Reserve(size_t n);
  // Sets size() to `n`; new bytes are uninitialized.
  void Resize(size_t n) {
    if (n > capacity_) Reserve(n);
    size_ = n;
  }
  // Adds `n` uninitialized bytes at the end and returns them.
  char* Extend(size_t n) {
    if (size_ + n > capacity_) Grow(size_ + n);
    char* p = data_ + size_;
    size_ += n;
    return p;
  }
  void Append(const void* p, size_t n) {
    if (n > 0) std::memcpy(Extend(n), p, n);
  }
  void Clear() { size_ = 0; }

  // Frees this buffer's own memory and makes it an empty view of the `capacity` bytes at
  // `storage`, which the caller keeps alive (and does not move) while this buffer uses it.
  void Borrow(char* storage, size_t capacity);
  bool borrowed() const { return borrowed_; }

 private:
  void Grow(size_t min_capacity);
  // Frees memory that Reserve got for `capacity` bytes.
  static void Release(char* data, size_t capacity);

  char* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
  bool borrowed_ = false;  // data_ is someone else's
};

// One column's values for the rows of a RowBlock.
struct ColumnData {
  Buffer values;   // numeric values, or string bytes
  Buffer offsets;  // strings only: int64 byte offsets into `values`, num_rows + 1 of them

  template <typename T>
  T* As() {
    return reinterpret_cast<T*>(values.data());
  }
  template <typename T>
  const T* As() const {
    return reinterpret_cast<const T*>(values.data());
  }
  const int64_t* Offsets() const { return reinterpret_cast<const int64_t*>(offsets.data()); }
  // Appends one string value (string columns only).
  void AppendString(const char* p, size_t n) {
    values.Append(p, n);
    const int64_t end = static_cast<int64_t>(values.size());
    offsets.Append(&end, sizeof end);
  }
};

// Some rows of every column of a schema.
struct RowBlock {
  int64_t num_rows = 0;
  std::vector<ColumnData> columns;
  // When the numeric columns' room for the rows given to Reset is kHugeBufferBytes or more,
  // they borrow their memory from this one buffer (huge pages instead of a 4 KiB page
  // fault per 4 KiB written to a fresh block: a twelfth of a fast Parquet read's CPU).
  // Moving the block keeps the columns' pointers valid (the memory itself does not move).
  Buffer arena;
  // Set when the block is a slice of another (SliceRows): its numeric columns borrow that
  // block's memory, which this keeps alive.
  std::shared_ptr<const RowBlock> lender;

  // Empties the block for `schema` (string columns get their leading 0 offset) and
  // reserves room for `rows` rows of the numeric columns. A slice first lets go of its
  // lender.
  void Reset(const Schema& schema, int64_t rows = 0);
  // Bytes held (capacity, not size: what the memory bound is about).
  size_t ByteSize() const;
};

// Makes the empty `dst` rows [begin, end) of `src` without copying them: its columns
// borrow src's memory and it keeps `src` alive (RowBlock::lender). Numeric schemas only.
void SliceRows(const Schema& schema, std::shared_ptr<const RowBlock> src, int64_t begin,
               int64_t end, RowBlock* dst);

// Appends rows [begin, end) of `src` to `dst`; both follow `schema`.
void AppendRows(const Schema& schema, const RowBlock& src, int64_t begin, int64_t end,
                RowBlock* dst);

}  // namespace data
}  // namespace traintl
