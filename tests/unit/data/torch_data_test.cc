// traintl::torch::iter_torch_batches over a fake host serving datasets (fake_host.h).
// LibTorch first: it brings glog's CHECK, which Catch's must replace.
#include <traintl/torch.h>
#undef CHECK

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "data_test_util.h"
#include "fake_host.h"

using namespace traintl::data::testing;

TEST_CASE("iter_torch_batches: tensors per column, dtypes, row shapes") {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 10; ++i) {
    text += "{\"id\": " + std::to_string(i) + ", \"v\": [" + std::to_string(i) + ".5, 1], " +
            "\"name\": \"n" + std::to_string(i) + "\"}\n";
  }
  Write(dir / "d.jsonl", text);
  FakeHost host(nlohmann::json{{"train", {{"uri", "file://" + dir.path() + "/d.jsonl"}}}});
  auto shard = traintl::get_dataset_shard("train");

  traintl::torch::TorchBatchOptions options;
  options.iter.columns = {"id", "v"};
  options.dtype = torch::kFloat32;
  options.dtypes = {{"id", torch::kInt64}};
  int64_t rows = 0;
  torch::Tensor first_v;
  for (auto& batch : traintl::torch::iter_torch_batches(shard, 4, options)) {
    REQUIRE(batch.size() == 2);
    const torch::Tensor& id = batch.at("id");
    const torch::Tensor& v = batch.at("v");
    CHECK(id.dtype() == torch::kInt64);
    CHECK(v.dtype() == torch::kFloat32);
    CHECK(v.dim() == 2);
    CHECK(v.size(1) == 2);
    CHECK(id.size(0) == v.size(0));
    CHECK(v[0][0].item<float>() == static_cast<float>(id[0].item<int64_t>()) + 0.5f);
    CHECK(id.device() == torch::Device(torch::kCPU));
    if (!first_v.defined()) first_v = v;
    rows += id.size(0);
  }
  CHECK(rows == 10);
  // Tensors outlive the epoch.
  CHECK(first_v[3][0].item<float>() == 3.5f);
}

TEST_CASE("iter_torch_batches: own dtypes share the batch's memory, strings are refused") {
  TempDir dir;
  WriteIdCsv(dir / "a.csv", 0, 6);
  FakeHost host(nlohmann::json{{"train", {{"uri", "file://" + dir.path() + "/a.csv"}}}});
  auto shard = traintl::get_dataset_shard("train");
  auto batches = shard.iter_batches(6);
  std::optional<traintl::Batch> batch = batches.next();
  REQUIRE(batch);
  traintl::torch::TorchBatchOptions options;
  options.iter.columns = {"id", "x"};
  CHECK_THROWS_WITH(traintl::torch::to_torch_batch(*batch, options),
                    Catch::Contains("column 'name' holds strings"));
  // Built from the batch directly: its own dtypes, no copy.
  traintl::torch::TorchBatchOptions keep_types;
  keep_types.device = torch::Device(torch::kCPU);
  std::optional<traintl::Batch> numeric;
  {
    auto only_numbers = traintl::get_dataset_shard("train").iter_batches(6, [] {
      traintl::IterOptions o;
      o.columns = {"id", "x"};
      return o;
    }());
    numeric = only_numbers.next();
  }
  REQUIRE(numeric);
  traintl::torch::TorchBatch tensors = traintl::torch::to_torch_batch(*numeric, keep_types);
  CHECK(tensors.at("x").dtype() == torch::kFloat64);
  CHECK(tensors.at("x").data_ptr() == (*numeric)["x"].raw_data());
  numeric.reset();  // the tensors keep the batch alive
  CHECK(tensors.at("x")[5].item<double>() == 2.5);
  CHECK(tensors.at("id")[5].item<int64_t>() == 5);

  traintl::torch::TorchBatchOptions typo;
  typo.iter.columns = {"id"};
  typo.dtypes = {{"idd", torch::kFloat32}};
  CHECK_THROWS_WITH(traintl::torch::iter_torch_batches(shard, 2, typo).begin(),
                    Catch::Contains("'idd'"));
}

TEST_CASE("iter_torch_batches: float32 columns come parsed as float32") {
  TempDir dir;
  WriteIdCsv(dir / "a.csv", 0, 8);
  FakeHost host(nlohmann::json{{"train", {{"uri", "file://" + dir.path() + "/a.csv"}}}});
  auto shard = traintl::get_dataset_shard("train");
  traintl::torch::TorchBatchOptions options;
  options.iter.columns = {"x", "id"};
  options.dtype = torch::kFloat32;
  options.dtypes = {{"id", torch::kInt32}};
  options.device = torch::Device(torch::kCPU);
  auto batches = traintl::torch::iter_torch_batches(shard, 8, options);
  auto batch = batches.next();
  REQUIRE(batch);
  REQUIRE(batch->at("x").dtype() == torch::kFloat32);
  REQUIRE(batch->at("id").dtype() == torch::kInt32);
  REQUIRE(batch->at("x")[7].item<float>() == 3.5f);
  REQUIRE(batch->at("id")[7].item<int32_t>() == 7);
}
