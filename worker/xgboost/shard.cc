// FromShard: a rank's part of a dataset as an XGBoost DMatrix.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "traintl/xgboost.h"
#include "worker/xgboost/internal.h"

namespace traintl {
namespace xgboost {
namespace {

using internal::ThrowBadData;

struct ColumnInfo {
  std::string name;
  DType dtype;
  int64_t elements = 1;  // values per row
};

std::vector<ColumnInfo> SchemaOf(const nlohmann::json& info) {
  std::vector<ColumnInfo> out;
  auto columns = info.find("columns");
  if (columns == info.end() || !columns->is_array()) return out;
  for (const auto& c : *columns) {
    ColumnInfo ci;
    ci.name = c.value("name", "");
    const std::string dtype = c.value("dtype", "");
    ci.dtype = dtype == "float64"   ? DType::kFloat64
               : dtype == "float32" ? DType::kFloat32
               : dtype == "int64"   ? DType::kInt64
               : dtype == "int32"   ? DType::kInt32
                                    : DType::kString;
    auto shape = c.find("shape");
    if (shape != c.end() && shape->is_array()) {
      for (const auto& d : *shape) ci.elements *= d.get<int64_t>();
    }
    out.push_back(ci);
  }
  return out;
}

std::string Names(const std::vector<ColumnInfo>& columns) {
  std::string s;
  for (const auto& c : columns) s += (s.empty() ? "" : ", ") + c.name;
  return s.empty() ? "none" : s;
}

// Appends `rows` x `elements` values of `column` to `out` at row stride `stride`, starting
// at out[offset].
void Scatter(const Column& column, int64_t rows, int64_t elements, float* out, size_t stride,
             size_t offset) {
  auto copy = [&](const auto* src) {
    for (int64_t r = 0; r < rows; ++r) {
      float* dst = out + static_cast<size_t>(r) * stride + offset;
      for (int64_t e = 0; e < elements; ++e) dst[e] = static_cast<float>(src[r * elements + e]);
    }
  };
  switch (column.dtype()) {
    case DType::kFloat32:
      copy(column.data<float>());
      return;
    case DType::kFloat64:
      copy(column.data<double>());
      return;
    case DType::kInt64:
      copy(column.data<int64_t>());
      return;
    case DType::kInt32:
      copy(column.data<int32_t>());
      return;
    case DType::kString:
      break;
  }
  throw std::logic_error("traintl::xgboost: column '" + column.name() + "' is not numeric");
}

// NaN or infinity in a label or weight: XGBoost refuses it, so does the same attempt again.
void CheckFinite(const std::vector<float>& values, const std::string& what,
                 const std::string& where) {
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
    }
  }
  if (bad > 0) {
    ThrowBadData(where + what + " is empty, NaN or infinite in " + std::to_string(bad) +
                 " of this rank's " + std::to_string(values.size()) + " rows (the first: row " +
                 std::to_string(first) + " of its part of the dataset)");
  }
}

}  // namespace

DMatrix FromShard(DatasetShard& shard, const std::string& label_column,
                  const FromShardOptions& options) {
  const std::string where = "traintl::xgboost::FromShard(dataset '" + shard.name() + "'): ";
  internal::RequireCollective("traintl::xgboost::FromShard");
  if (options.batch_size < 1) throw std::invalid_argument(where + "batch_size must be >= 1");
  const nlohmann::json info = shard.info();
  const std::vector<ColumnInfo> schema = SchemaOf(info);
  auto find = [&](const std::string& name) -> const ColumnInfo* {
    for (const auto& c : schema) {
      if (c.name == name) return &c;
    }
    return nullptr;
  };
  // Single-valued numeric columns (the label, the weights).
  auto scalar_column = [&](const std::string& name, const char* role) -> const ColumnInfo* {
    if (name.empty()) return nullptr;
    const ColumnInfo* c = find(name);
    if (c == nullptr) {
      ThrowBadData(where + "no " + role + " column '" + name + "' (the columns are " +
                   Names(schema) + ")");
    }
    if (c->dtype == DType::kString) {
      ThrowBadData(where + "the " + role + " column '" + name +
                   "' holds text, not numbers (XGBoost needs numeric " + role +
                   "s: encode classes as 0, 1, ...)");
    }
    if (c->elements != 1) {
      ThrowBadData(where + "the " + role + " column '" + name + "' has " +
                   std::to_string(c->elements) + " values per row, not one");
    }
    return c;
  };
  const ColumnInfo* label = scalar_column(label_column, "label");
  const ColumnInfo* weight = scalar_column(options.weight_column, "weight");

  std::vector<const ColumnInfo*> features;
  if (options.feature_columns.empty()) {
    std::vector<std::string> skipped;
    for (const auto& c : schema) {
      if (&c == label || &c == weight) continue;
      if (c.dtype == DType::kString) {
        skipped.push_back(c.name);
      } else {
        features.push_back(&c);
      }
    }
    if (!skipped.empty()) {
      std::string list;
      for (const auto& s : skipped) list += (list.empty() ? "'" : ", '") + s + "'";
      log_message(TRAINTL_LOG_INFO, where + "not features (they hold text): " + list);
    }
  } else {
    for (const auto& name : options.feature_columns) {
      const ColumnInfo* c = find(name);
      if (c == nullptr) {
        ThrowBadData(where + "no feature column '" + name + "' (the columns are " + Names(schema) +
                     ")");
      }
      if (c == label || c == weight) {
        throw std::invalid_argument(where + "column '" + name +
                                    "' is both a feature and the label or weight");
      }
      if (c->dtype == DType::kString) {
        ThrowBadData(where + "the feature column '" + name +
                     "' holds text, not numbers (its type was inferred from the first rows; "
                     "shard_options.column_types can name another)");
      }
      features.push_back(c);
    }
  }
  if (features.empty()) {
    ThrowBadData(where + "no numeric feature columns (the columns are " + Names(schema) + ")");
  }

  // What to read, in this order: the features, then the label and the weight.
  IterOptions iter;
  iter.epoch = 0;
  size_t cols = 0;
  std::vector<std::string> feature_names;
  for (const ColumnInfo* c : features) {
    iter.columns.push_back(c->name);
    cols += static_cast<size_t>(c->elements);
    if (c->elements == 1) {
      feature_names.push_back(c->name);
    } else {
      for (int64_t e = 0; e < c->elements; ++e) {
        feature_names.push_back(c->name + "_" + std::to_string(e));
      }
    }
  }
  if (label != nullptr) iter.columns.push_back(label->name);
  if (weight != nullptr) iter.columns.push_back(weight->name);
  // Text formats parse straight into float32; a value that is not a number then fails the
  // read with its file and line.
  const std::string format = info.value("format", "");
  if (format == "csv" || format == "jsonl") {
    for (const auto& name : iter.columns) iter.column_types[name] = DType::kFloat32;
  }

  // A split shard's rows past the dataset's end wrap around to its start: drop them.
  int64_t keep = -1;
  const bool split = info.value("split", false);
  const int world = info.value("world_size", 1);
  const int rank = info.value("rank", 0);
  if (split && world > 1 && options.drop_padding) {
    auto total = info.find("total_rows");
    auto per_rank = info.find("num_rows");
    if (total != info.end() && total->is_number_integer() && per_rank != info.end() &&
        per_rank->is_number_integer()) {
      const int64_t n = per_rank->get<int64_t>();
      keep = std::clamp<int64_t>(total->get<int64_t>() - static_cast<int64_t>(rank) * n, 0, n);
    }
  }

  std::vector<float> x, labels, weights;
  if (auto n = shard.num_rows()) x.reserve(static_cast<size_t>(*n) * cols);
  size_t rows = 0;
  try {
    for (const Batch& batch : shard.iter_batches(options.batch_size, iter)) {
      int64_t n = batch.num_rows();
      if (keep >= 0) n = std::min<int64_t>(n, keep - static_cast<int64_t>(rows));
      if (n <= 0) break;
      x.resize((rows + static_cast<size_t>(n)) * cols);
      size_t offset = 0;
      for (size_t f = 0; f < features.size(); ++f) {
        Scatter(batch.column(f), n, features[f]->elements, x.data() + rows * cols, cols, offset);
        offset += static_cast<size_t>(features[f]->elements);
      }
      size_t next = features.size();
      if (label != nullptr) {
        labels.resize(rows + static_cast<size_t>(n));
        Scatter(batch.column(next++), n, 1, labels.data() + rows, 1, 0);
      }
      if (weight != nullptr) {
        weights.resize(rows + static_cast<size_t>(n));
        Scatter(batch.column(next), n, 1, weights.data() + rows, 1, 0);
      }
      rows += static_cast<size_t>(n);
    }
  } catch (const DatasetError& e) {
    // The worker's messages start with "dataset '<name>': ", which `where` says already.
    std::string message = e.what();
    const std::string host_prefix = "dataset '" + shard.name() + "': ";
    if (message.rfind(host_prefix, 0) == 0) message.erase(0, host_prefix.size());
    throw DatasetError(where + message, e.retryable());
  }
  if (label != nullptr) CheckFinite(labels, "the label column '" + label->name + "'", where);
  if (weight != nullptr) CheckFinite(weights, "the weight column '" + weight->name + "'", where);

  DMatrix m = DMatrix::FromDense(x.data(), rows, cols, options.missing);
  if (label != nullptr) m.SetFloatInfo("label", labels.data(), labels.size());
  if (weight != nullptr) m.SetFloatInfo("weight", weights.data(), weights.size());
  m.SetFeatureNames(feature_names);
  m.set_replicated(!split && world > 1);
  return m;
}

DMatrix FromShard(const std::string& dataset, const std::string& label_column,
                  const FromShardOptions& options) {
  DatasetShard shard = [&] {
    try {
      return get_dataset_shard(dataset, options.shard_options);
    } catch (const DatasetError& e) {
      throw DatasetError("traintl::xgboost::FromShard: " + std::string(e.what()), e.retryable());
    }
  }();
  return FromShard(shard, label_column, options);
}

}  // namespace xgboost
}  // namespace traintl
