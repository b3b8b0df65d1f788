// The traintl datasets API (part of the training SDK; traintl/train.h includes it).
//
// A job spec's "datasets" (name -> {uri, format, split}) are read by the worker: this
// rank's shard of one comes from get_dataset_shard(name), and iter_batches() streams an
// epoch of it as batches of named columns, prepared ahead on background threads with
// bounded memory. With split (the default for "train") every rank reads a disjoint,
// row-balanced part and gets the same number of batches per epoch (the last ranks' parts
// are padded with a few rows from the start, as torch's DistributedSampler pads); without
// it every rank reads everything. traintl::torch::iter_torch_batches() yields tensors.
//
//   auto shard = traintl::get_dataset_shard("train");
//   for (int epoch = start; epoch < epochs; ++epoch) {
//     shard.set_epoch(epoch);
//     for (const traintl::Batch& batch : shard.iter_batches(64, {.shuffle = true})) {
//       const double* x = batch["x"].data<double>();  ...
//     }
//   }
//
// Bad data (a missing file, a glob matching nothing, a malformed row, a column missing in
// a file, a value of the wrong type, a null in a Parquet int or string column) throws
// DatasetError naming the file and line (Parquet: row group and column); when it
// ends the training function, the attempt fails without restarts, since retrying cannot
// help.
//
// Thread-safety: get_dataset_shard may be called from any thread of a running entry point.
// A DatasetShard (it keeps the next epoch), a BatchIterable and its iterators are used by
// one thread at a time; copies of a shard may be used on different threads. Batch and
// Column are read-only views, safe to read from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "traintl/abi.h"
#include "traintl/host.h"

namespace traintl {

// A dataset call failed. retryable() is false when the data or the request is wrong, true
// for I/O and network failures.
class DatasetError : public std::runtime_error {
 public:
  DatasetError(const std::string& message, bool retryable)
      : std::runtime_error(message), retryable_(retryable) {}
  bool retryable() const { return retryable_; }

 private:
  bool retryable_;
};

// Element types of batch columns (the C ABI's TRAINTL_DTYPE_*).
enum class DType : int32_t {
  kFloat64 = TRAINTL_DTYPE_FLOAT64,
  kInt64 = TRAINTL_DTYPE_INT64,
  kString = TRAINTL_DTYPE_STRING,
  kFloat32 = TRAINTL_DTYPE_FLOAT32,
  kInt32 = TRAINTL_DTYPE_INT32,
};

inline const char* dtype_name(DType dtype) {
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

// How a shard's files are read (the same on every rank).
struct ShardOptions {
  // CSV files without a header row: the names of their columns. Default: none.
  std::vector<std::string> column_names;
  // Types replacing the inferred ones (CSV and JSON Lines infer int64, float64 or string
  // from the first rows; .npy data keeps its dtype; Parquet columns have the type of their
  // physical type: BOOLEAN and INT64 int64, INT32 int32, FLOAT float32, DOUBLE float64,
  // BYTE_ARRAY string, and numeric ones may be read as any numeric type). Default: none.
  std::map<std::string, DType> column_types;
};

// How one epoch is read.
struct IterOptions {
  // Drop the last batch when it is smaller than batch_size. Default: false.
  bool drop_last = false;
  // A streaming shuffle, deterministic for (seed, epoch, rank): the order of the dataset's
  // chunks (about 1 MiB each) is permuted per epoch, the same on every rank, and rows pass
  // through a shuffle buffer of shuffle_buffer_rows rows. Default: false.
  bool shuffle = false;
  uint64_t seed = 0;
  // The epoch seeding the shuffle. Default: the shard's (see DatasetShard::set_epoch).
  std::optional<int64_t> epoch;
  // The columns to read, in this order; empty = all. Default: all.
  std::vector<std::string> columns;
  // Batches prepared ahead on the background threads. Default: 2.
  int prefetch_batches = 2;
  // Rows held by the shuffle buffer. Default: 10000.
  int64_t shuffle_buffer_rows = 10000;
  // Parser threads; 0 = min(4, cores / ranks on this node). Default: 0.
  int num_threads = 0;
  // Types to parse columns as in this epoch, replacing the shard's: e.g. kFloat32 for a
  // float64 column is parsed straight into float32. Default: none.
  std::map<std::string, DType> column_types;
};

namespace internal {

inline const traintl_dataset_api& DatasetApi() {
  const traintl_host_api& api = HostApi();
  if (!TRAINTL_HOST_API_HAS(&api, datasets) || api.datasets == nullptr) {
    throw DatasetError("traintl: this worker serves no datasets (it is older than this library)",
                       false);
  }
  return *api.datasets;
}

[[noreturn]] inline void ThrowDatasetError(int code, const char* err) {
  throw DatasetError(err != nullptr && *err ? err : "dataset call failed",
                     code == TRAINTL_DATA_UNAVAILABLE);
}

// Owns one host batch; releases it with the last reference.
struct BatchRef {
  const traintl_dataset_api* api;
  const traintl_batch* batch;
  ~BatchRef() { api->batch_release(api->ctx, batch); }
};

struct ShardRef {
  const traintl_dataset_api* api;
  traintl_dataset_shard* shard;
  ~ShardRef() { api->shard_close(api->ctx, shard); }
};

}  // namespace internal

// One column of a Batch: a view, valid while the Batch (or a copy of it) lives.
class Column {
 public:
  Column(const traintl_column* column, int64_t num_rows) : c_(column), rows_(num_rows) {}

  std::string name() const { return c_->name; }
  DType dtype() const { return static_cast<DType>(c_->dtype); }
  int64_t num_rows() const { return rows_; }
  // Dimensions of one row's value: empty for a scalar.
  std::vector<int64_t> shape() const {
    return c_->ndim > 0 ? std::vector<int64_t>(c_->shape, c_->shape + c_->ndim)
                        : std::vector<int64_t>();
  }
  // Values per row: the product of shape().
  int64_t row_elements() const {
    int64_t n = 1;
    for (int32_t i = 0; i < c_->ndim; ++i) n *= c_->shape[i];
    return n;
  }
  // The values, num_rows() * row_elements() of them; T is double, float, int64_t or
  // int32_t, matching dtype() (else std::logic_error).
  template <typename T>
  const T* data() const {
    if (dtype() != DTypeOf<T>()) {
      throw std::logic_error("traintl: column '" + name() + "' is " + dtype_name(dtype()) +
                             ", not " + dtype_name(DTypeOf<T>()));
    }
    return static_cast<const T*>(c_->data);
  }
  const void* raw_data() const { return c_->data; }
  // Row `row` of a string column.
  std::string_view str(int64_t row) const {
    if (dtype() != DType::kString) {
      throw std::logic_error("traintl: column '" + name() + "' is " + dtype_name(dtype()) +
                             ", not string");
    }
    return std::string_view(static_cast<const char*>(c_->data) + c_->offsets[row],
                            static_cast<size_t>(c_->offsets[row + 1] - c_->offsets[row]));
  }
  // Element `element` of row `row` of a numeric column, as a double.
  double as_double(int64_t row, int64_t element = 0) const {
    const int64_t i = row * row_elements() + element;
    switch (dtype()) {
      case DType::kFloat64:
        return static_cast<const double*>(c_->data)[i];
      case DType::kFloat32:
        return static_cast<const float*>(c_->data)[i];
      case DType::kInt64:
        return static_cast<double>(static_cast<const int64_t*>(c_->data)[i]);
      case DType::kInt32:
        return static_cast<const int32_t*>(c_->data)[i];
      case DType::kString:
        break;
    }
    throw std::logic_error("traintl: column '" + name() + "' holds strings, not numbers");
  }

 private:
  template <typename T>
  static constexpr DType DTypeOf() {
    static_assert(std::is_same<T, double>::value || std::is_same<T, float>::value ||
                      std::is_same<T, int64_t>::value || std::is_same<T, int32_t>::value,
                  "Column::data<T>: T is double, float, int64_t or int32_t");
    return std::is_same<T, double>::value    ? DType::kFloat64
           : std::is_same<T, float>::value   ? DType::kFloat32
           : std::is_same<T, int64_t>::value ? DType::kInt64
                                             : DType::kInt32;
  }

  const traintl_column* c_;
  int64_t rows_;
};

// A batch of rows with named columns. Copies share the data (held by the worker until the
// last copy goes).
class Batch {
 public:
  explicit Batch(std::shared_ptr<internal::BatchRef> ref) : ref_(std::move(ref)) {}

  int64_t num_rows() const { return ref_->batch->num_rows; }
  size_t num_columns() const { return static_cast<size_t>(ref_->batch->num_columns); }
  Column column(size_t i) const {
    if (i >= num_columns()) throw std::out_of_range("traintl: no column " + std::to_string(i));
    const auto* base = reinterpret_cast<const char*>(ref_->batch->columns);
    return Column(
        reinterpret_cast<const traintl_column*>(base + i * ref_->batch->column_struct_size),
        num_rows());
  }
  bool has_column(const std::string& name) const {
    for (size_t i = 0; i < num_columns(); ++i) {
      if (column(i).name() == name) return true;
    }
    return false;
  }
  // The column called `name` (std::out_of_range when there is none).
  Column operator[](const std::string& name) const {
    for (size_t i = 0; i < num_columns(); ++i) {
      Column c = column(i);
      if (c.name() == name) return c;
    }
    throw std::out_of_range("traintl: the batch has no column '" + name + "'");
  }
  std::vector<std::string> column_names() const {
    std::vector<std::string> names;
    for (size_t i = 0; i < num_columns(); ++i) names.push_back(column(i).name());
    return names;
  }
  // Keeps the batch's memory alive while the returned pointer lives (for zero-copy views
  // such as tensors made from the columns).
  std::shared_ptr<const void> keep_alive() const { return ref_; }

 private:
  std::shared_ptr<internal::BatchRef> ref_;
};

// One epoch of a shard; a single-pass range of Batch (range-for), or next(). Stopping
// early (destroying it) stops the background threads.
class BatchIterable {
 public:
  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = const Batch*;
    using reference = const Batch&;

    iterator() = default;
    explicit iterator(BatchIterable* owner) : owner_(owner) {}
    const Batch& operator*() const { return *owner_->current_; }
    const Batch* operator->() const { return &*owner_->current_; }
    iterator& operator++() {
      if (!owner_->Advance()) owner_ = nullptr;
      return *this;
    }
    bool operator==(const iterator& other) const { return owner_ == other.owner_; }
    bool operator!=(const iterator& other) const { return owner_ != other.owner_; }

   private:
    BatchIterable* owner_ = nullptr;
  };

  BatchIterable(const traintl_dataset_api* api, traintl_batch_iter* iter)
      : api_(api), iter_(iter) {}
  BatchIterable(BatchIterable&& other) noexcept
      : api_(other.api_),
        iter_(other.iter_),
        current_(std::move(other.current_)),
        started_(other.started_) {
    other.iter_ = nullptr;
  }
  BatchIterable& operator=(BatchIterable&& other) noexcept {
    if (this != &other) {
      Close();
      api_ = other.api_;
      iter_ = other.iter_;
      current_ = std::move(other.current_);
      started_ = other.started_;
      other.iter_ = nullptr;
    }
    return *this;
  }
  BatchIterable(const BatchIterable&) = delete;
  BatchIterable& operator=(const BatchIterable&) = delete;
  ~BatchIterable() { Close(); }

  // Iterates once: begin() fetches the first batch.
  iterator begin() {
    if (started_) throw std::logic_error("traintl: a BatchIterable can be iterated only once");
    return Advance() ? iterator(this) : iterator();
  }
  iterator end() { return iterator(); }

  // The next batch, or nullopt at the end of the epoch. Throws DatasetError.
  std::optional<Batch> next() {
    if (!Advance()) return std::nullopt;
    return current_;
  }

 private:
  bool Advance() {
    started_ = true;
    current_.reset();
    if (iter_ == nullptr) return false;
    const traintl_batch* batch = nullptr;
    char err[4096] = {0};
    const int rc = api_->iter_next(api_->ctx, iter_, &batch, err, sizeof err);
    if (rc == TRAINTL_DATA_END) {
      Close();
      return false;
    }
    if (rc != TRAINTL_DATA_OK) internal::ThrowDatasetError(rc, err);
    // Constructed in place: a temporary BatchRef would release the batch.
    current_.emplace(std::shared_ptr<internal::BatchRef>(new internal::BatchRef{api_, batch}));
    return true;
  }
  void Close() {
    if (iter_ != nullptr) api_->iter_close(api_->ctx, iter_);
    iter_ = nullptr;
  }

  const traintl_dataset_api* api_;
  traintl_batch_iter* iter_;
  std::optional<Batch> current_;
  bool started_ = false;
};

// This rank's shard of a dataset of the job spec. Cheap to copy (copies share the shard).
class DatasetShard {
 public:
  DatasetShard(std::string name, std::shared_ptr<internal::ShardRef> ref)
      : name_(std::move(name)), ref_(std::move(ref)) {}

  const std::string& name() const { return name_; }
  // The shard as the worker describes it: "uri" (null for inline items), "format", "files",
  // "split", "rank", "world_size", "columns" ([{"name", "dtype", "shape"}]), "total_rows",
  // "num_rows".
  nlohmann::json info() const {
    const char* text = ref_->api->shard_info(ref_->api->ctx, ref_->shard);
    return nlohmann::json::parse(text != nullptr ? text : "{}");
  }
  std::vector<std::string> column_names() const {
    const nlohmann::json j = info();
    std::vector<std::string> names;
    for (const auto& c : j.at("columns")) names.push_back(c.at("name").get<std::string>());
    return names;
  }
  // Rows this rank reads per epoch (the same on every rank when split); nullopt when the
  // files have not been counted (an unsplit or single-rank CSV/JSON Lines dataset before
  // its first shuffled epoch).
  std::optional<int64_t> num_rows() const {
    const auto j = info();
    auto it = j.find("num_rows");
    if (it == j.end() || !it->is_number_integer()) return std::nullopt;
    return it->get<int64_t>();
  }

  // The epoch the next iter_batches() shuffles for; each iter_batches() call moves it on
  // by one. Set it at the start of every epoch to resume deterministically.
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  // Starts streaming one epoch in batches of `batch_size` rows (the last may be smaller
  // unless drop_last). Throws DatasetError (bad options, unknown columns).
  BatchIterable iter_batches(int64_t batch_size, const IterOptions& options = {}) {
    const int64_t epoch = options.epoch ? *options.epoch : epoch_;
    epoch_ = epoch + 1;
    nlohmann::json o = {{"batch_size", batch_size},
                        {"drop_last", options.drop_last},
                        {"shuffle", options.shuffle},
                        {"seed", options.seed},
                        {"epoch", epoch},
                        {"columns", options.columns},
                        {"prefetch_batches", options.prefetch_batches},
                        {"shuffle_buffer_rows", options.shuffle_buffer_rows},
                        {"num_threads", options.num_threads}};
    if (!options.column_types.empty()) {
      nlohmann::json types = nlohmann::json::object();
      for (const auto& [column, type] : options.column_types) types[column] = dtype_name(type);
      o["column_types"] = types;
    }
    const std::string text = o.dump();
    traintl_batch_iter* iter = nullptr;
    char err[4096] = {0};
    const traintl_dataset_api* api = ref_->api;
    const int rc = api->iter_open(api->ctx, ref_->shard, text.c_str(), &iter, err, sizeof err);
    if (rc != TRAINTL_DATA_OK) internal::ThrowDatasetError(rc, err);
    return BatchIterable(api, iter);
  }

 private:
  std::string name_;
  std::shared_ptr<internal::ShardRef> ref_;
  int64_t epoch_ = 0;
};

// This rank's shard of the dataset `name` of the job spec's "datasets". Reads the heads of
// its files (and, when the dataset is split over several ranks, counts their rows).
// Throws DatasetError: no such dataset, missing files, a bad header, ...
inline DatasetShard get_dataset_shard(const std::string& name, const ShardOptions& options = {}) {
  const traintl_dataset_api& api = internal::DatasetApi();
  nlohmann::json o = nlohmann::json::object();
  if (!options.column_names.empty()) o["column_names"] = options.column_names;
  if (!options.column_types.empty()) {
    nlohmann::json types = nlohmann::json::object();
    for (const auto& [column, type] : options.column_types) types[column] = dtype_name(type);
    o["column_types"] = types;
  }
  const std::string text = o.dump();
  traintl_dataset_shard* shard = nullptr;
  char err[4096] = {0};
  const int rc = api.shard_open(api.ctx, name.c_str(), text.c_str(), &shard, err, sizeof err);
  if (rc != TRAINTL_DATA_OK) internal::ThrowDatasetError(rc, err);
  return DatasetShard(name,
                      std::shared_ptr<internal::ShardRef>(new internal::ShardRef{&api, shard}));
}

}  // namespace traintl
