#include "worker/data/columns.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>

namespace traintl {
namespace data {
namespace {

constexpr size_t kPageBytes = 4096;

}  // namespace

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat64:
      return "float64";
    case DType::kInt64:
      return "int64";
    case DType::kString:
      return "string";
    case DType::kFloat32:
      return "float32";
    case DType::kInt32:
      return "int32";
  }
  return "unknown";
}

std::optional<DType> DTypeFromName(const std::string& name) {
  for (DType d : {DType::kFloat64, DType::kInt64, DType::kString, DType::kFloat32, DType::kInt32}) {
    if (name == DTypeName(d)) return d;
  }
  return std::nullopt;
}

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kString:
      return 0;
  }
  return 0;
}

int64_t ColumnSpec::RowElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool operator==(const ColumnSpec& a, const ColumnSpec& b) {
  return a.name == b.name && a.dtype == b.dtype && a.shape == b.shape;
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    if (!borrowed_) Release(data_, capacity_);
    data_ = other.data_;
    size_ = other.size_;
    capacity_ = other.capacity_;
    borrowed_ = other.borrowed_;
    other.data_ = nullptr;
    other.size_ = other.capacity_ = 0;
    other.borrowed_ = false;
  }
  return *this;
}

void Buffer::Borrow(char* storage, size_t capacity) {
  if (!borrowed_) Release(data_, capacity_);
  data_ = storage;
  size_ = 0;
  capacity_ = capacity;
  borrowed_ = true;
}

void Buffer::Release(char* data, size_t capacity) {
  if (data == nullptr) return;
  if (capacity >= kHugeBufferBytes) {
    ::munmap(data, capacity);
  } else {
    std::free(data);
  }
}

void Buffer::Reserve(size_t n) {
  if (n <= capacity_) return;
  if (borrowed_) {
    // To memory of its own, with all of the borrowed bytes (see below).
    char* const old = data_;
    const size_t old_capacity = capacity_;
    data_ = nullptr;
    capacity_ = 0;
    borrowed_ = false;
    Reserve(n);
    std::memcpy(data_, old, old_capacity);
    return;
  }
  if (n < kHugeBufferBytes) {
    void* p = std::realloc(data_, n);
    if (p == nullptr) throw std::bad_alloc();
    data_ = static_cast<char*>(p);
    capacity_ = n;
    return;
  }
  if (n > SIZE_MAX - 2 * kHugeBufferBytes) throw std::bad_alloc();
  const size_t capacity = (n + kPageBytes - 1) / kPageBytes * kPageBytes;
  if (capacity_ >= kHugeBufferBytes) {
    // Grown by the kernel, without copying (as realloc does for its own large blocks); the
    // mapping keeps its advice.
    void* m = ::mremap(data_, capacity_, capacity, MREMAP_MAYMOVE);
    if (m == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<char*>(m);
    capacity_ = capacity;
    return;
  }
  // mmap aligns to 4 KiB only: map 2 MiB more and unmap what lies outside the aligned range,
  // so that every 2 MiB of the buffer can be one huge page.
  void* m = ::mmap(nullptr, capacity + kHugeBufferBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t base = reinterpret_cast<uintptr_t>(m);
  const uintptr_t aligned = (base + kHugeBufferBytes - 1) & ~uintptr_t{kHugeBufferBytes - 1};
  if (aligned > base) ::munmap(m, aligned - base);
  if (aligned - base < kHugeBufferBytes) {
    ::munmap(reinterpret_cast<char*>(aligned) + capacity, kHugeBufferBytes - (aligned - base));
  }
  char* p = reinterpret_cast<char*>(aligned);
#ifdef MADV_HUGEPAGE
  ::madvise(p, capacity, MADV_HUGEPAGE);  // advice only: without it, 4 KiB pages as before
#endif
  // All of the old capacity, as realloc keeps it (a caller may have written past size()).
  if (capacity_ > 0) std::memcpy(p, data_, capacity_);
  Release(data_, capacity_);
  data_ = p;
  capacity_ = capacity;
}

void Buffer::Grow(size_t min_capacity) {
  Reserve(std::max<size_t>({min_capacity, capacity_ + capacity_ / 2, 64}));
}

namespace {

// A column's share of a RowBlock's arena: its room, rounded up to a cache line.
size_t ArenaShare(size_t bytes) { return (bytes + 63) / 64 * 64; }

}  // namespace

void RowBlock::Reset(const Schema& schema, int64_t rows) {
  if (lender) {
    for (ColumnData& c : columns) {
      if (c.values.borrowed()) c.values = Buffer();
    }
    lender.reset();
  }
  num_rows = 0;
  columns.resize(schema.size());
  size_t arena_bytes = 0;
  for (const ColumnSpec& spec : schema) {
    if (spec.dtype != DType::kString && rows > 0) {
      arena_bytes += ArenaShare(spec.RowBytes() * static_cast<size_t>(rows));
    }
  }
  if (arena_bytes >= kHugeBufferBytes) {
    arena.Clear();
    arena.Reserve(arena_bytes);
    size_t at = 0;
    for (size_t i = 0; i < schema.size(); ++i) {
      if (schema[i].dtype == DType::kString) continue;
      const size_t bytes = schema[i].RowBytes() * static_cast<size_t>(rows);
      columns[i].values.Borrow(arena.data() + at, bytes);
      at += ArenaShare(bytes);
    }
  }
  for (size_t i = 0; i < schema.size(); ++i) {
    ColumnData& c = columns[i];
    c.values.Clear();
    c.offsets.Clear();
    if (schema[i].dtype == DType::kString) {
      const int64_t zero = 0;
      c.offsets.Reserve(sizeof(int64_t) * static_cast<size_t>(rows + 1));
      c.offsets.Append(&zero, sizeof zero);
    } else if (rows > 0) {
      c.values.Reserve(schema[i].RowBytes() * static_cast<size_t>(rows));
    }
  }
}

size_t RowBlock::ByteSize() const {
  size_t n = arena.capacity();
  for (const auto& c : columns) {
    n += (c.values.borrowed() ? 0 : c.values.capacity()) + c.offsets.capacity();
  }
  return n;
}

void SliceRows(const Schema& schema, std::shared_ptr<const RowBlock> src, int64_t begin,
               int64_t end, RowBlock* dst) {
  dst->Reset(schema);
  for (size_t i = 0; i < schema.size(); ++i) {
    const size_t row = schema[i].RowBytes();
    const size_t n = row * static_cast<size_t>(end - begin);
    // const_cast: the slice's columns are read, never written (a Buffer has no const view).
    dst->columns[i].values.Borrow(
        const_cast<char*>(src->columns[i].values.data()) + row * static_cast<size_t>(begin), n);
    dst->columns[i].values.Resize(n);
  }
  dst->num_rows = end - begin;
  dst->lender = std::move(src);
}

void AppendRows(const Schema& schema, const RowBlock& src, int64_t begin, int64_t end,
                RowBlock* dst) {
  if (end <= begin) return;
  for (size_t i = 0; i < schema.size(); ++i) {
    const ColumnData& s = src.columns[i];
    ColumnData& d = dst->columns[i];
    if (schema[i].dtype == DType::kString) {
      const int64_t* so = s.Offsets();
      const int64_t base = static_cast<int64_t>(d.values.size());
      d.values.Append(s.values.data() + so[begin], static_cast<size_t>(so[end] - so[begin]));
      auto* out = reinterpret_cast<int64_t*>(
          d.offsets.Extend(sizeof(int64_t) * static_cast<size_t>(end - begin)));
      for (int64_t r = begin; r < end; ++r) *out++ = base + (so[r + 1] - so[begin]);
    } else {
      const size_t row = schema[i].RowBytes();
      d.values.Append(s.values.data() + row * static_cast<size_t>(begin),
                      row * static_cast<size_t>(end - begin));
    }
  }
  dst->num_rows += end - begin;
}

}  // namespace data
}  // namespace traintl
