// ShuffleBuffer: the local shuffle of BatchReader's streaming shuffle. Rows are held back
// in a fixed number of slots per column and leave in random order (SplitMix, so the order
// is the same on every platform for a seed). Internal to worker/data.
//
// Thread-safety: none; used by BatchReader's batcher thread only.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "worker/data/columns.h"
#include "worker/data/dataset.h"

namespace traintl {
namespace data {

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

}  // namespace data
}  // namespace traintl
