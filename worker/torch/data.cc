// traintl::torch's side of datasets: batches from the worker (traintl/train.h) as tensors.
#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "traintl/torch.h"

namespace traintl {
namespace torch {
namespace {

::torch::Dtype TorchDtype(::traintl::DType dtype) {
  switch (dtype) {
    case ::traintl::DType::kFloat64:
      return ::torch::kFloat64;
    case ::traintl::DType::kFloat32:
      return ::torch::kFloat32;
    case ::traintl::DType::kInt64:
      return ::torch::kInt64;
    case ::traintl::DType::kInt32:
      return ::torch::kInt32;
    case ::traintl::DType::kString:
      break;
  }
  throw std::invalid_argument("no tensor dtype for strings");
}

}  // namespace

TorchBatch to_torch_batch(const ::traintl::Batch& batch, const TorchBatchOptions& options) {
  for (const auto& named : options.dtypes) {
    if (!batch.has_column(named.first)) {
      throw std::invalid_argument("iter_torch_batches: dtypes names column '" + named.first +
                                  "', which the batch does not have");
    }
  }
  const ::torch::Device device = options.device ? *options.device : get_device();
  // Every zero-copy tensor holds the batch until its storage is freed.
  std::shared_ptr<const void> keep = batch.keep_alive();
  TorchBatch out;
  for (size_t i = 0; i < batch.num_columns(); ++i) {
    const ::traintl::Column column = batch.column(i);
    const std::string name = column.name();
    if (column.dtype() == ::traintl::DType::kString) {
      throw std::invalid_argument("iter_torch_batches: column '" + name +
                                  "' holds strings, which have no tensor type; select the "
                                  "numeric columns with TorchBatchOptions::iter.columns");
    }
    std::vector<int64_t> sizes{batch.num_rows()};
    for (int64_t d : column.shape()) sizes.push_back(d);
    const ::torch::Dtype own = TorchDtype(column.dtype());
    ::torch::Tensor t = ::torch::from_blob(
        const_cast<void*>(column.raw_data()), sizes, [keep](void*) {},
        ::torch::TensorOptions().dtype(own));
    auto it = options.dtypes.find(name);
    const ::torch::Dtype want =
        it != options.dtypes.end() ? it->second : options.dtype.value_or(own);
    if (want != own || device != ::torch::Device(::torch::kCPU)) {
      t = t.to(device, want, /*non_blocking=*/false, /*copy=*/false);
    }
    out.emplace(name, std::move(t));
  }
  return out;
}

TorchBatchIterable iter_torch_batches(::traintl::DatasetShard& shard, int64_t batch_size,
                                      const TorchBatchOptions& options) {
  // Columns wanted as a floating type, or int columns wanted as another int type, are
  // parsed as that type: no conversion pass, and the tensors share the batch's memory.
  // Float columns wanted as ints stay floats and torch converts them (truncating).
  ::traintl::IterOptions iter = options.iter;
  const nlohmann::json info = shard.info();
  for (const auto& c : info.at("columns")) {
    const std::string name = c.at("name").get<std::string>();
    const std::string have = c.at("dtype").get<std::string>();
    if (iter.column_types.count(name) || have == "string") continue;
    if (!iter.columns.empty() &&
        std::find(iter.columns.begin(), iter.columns.end(), name) == iter.columns.end()) {
      continue;
    }
    auto it = options.dtypes.find(name);
    const std::optional<::torch::Dtype> want =
        it != options.dtypes.end() ? std::optional<::torch::Dtype>(it->second) : options.dtype;
    if (!want) continue;
    const bool have_int = have == "int64" || have == "int32";
    if (*want == ::torch::kFloat32) {
      iter.column_types[name] = ::traintl::DType::kFloat32;
    } else if (*want == ::torch::kFloat64) {
      iter.column_types[name] = ::traintl::DType::kFloat64;
    } else if (*want == ::torch::kInt64 && have_int) {
      iter.column_types[name] = ::traintl::DType::kInt64;
    } else if (*want == ::torch::kInt32 && have_int) {
      iter.column_types[name] = ::traintl::DType::kInt32;
    }
  }
  return TorchBatchIterable(shard.iter_batches(batch_size, iter), options);
}

}  // namespace torch
}  // namespace traintl
