// The C++ SDK (traintl/train.h) over the C ABI: a fake host whose datasets are served by a
// DatasetService, as traintl-worker serves them.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include <traintl/train.h>
#include <nlohmann/json.hpp>

#include "data_test_util.h"
#include "fake_host.h"

using namespace traintl::data::testing;

TEST_CASE("SDK: get_dataset_shard, iter_batches, columns, epochs") {
  TempDir dir;
  WriteIdCsv(dir / "a.csv", 0, 10);
  FakeHost host({{"train", {{"uri", "file://" + dir.path() + "/a.csv"}, {"split", true}}}}, 1, 2);
  auto shard = traintl::get_dataset_shard("train");
  CHECK(shard.name() == "train");
  CHECK(shard.column_names() == std::vector<std::string>{"id", "x", "name"});
  CHECK(shard.num_rows() == 5);
  CHECK(shard.info()["format"] == "csv");

  std::vector<int64_t> ids;
  std::vector<std::string> names;
  std::optional<traintl::Batch> kept;
  for (const traintl::Batch& batch : shard.iter_batches(2)) {
    CHECK(batch.num_columns() == 3);
    CHECK(batch.has_column("x"));
    traintl::Column id = batch["id"];
    CHECK(id.dtype() == traintl::DType::kInt64);
    CHECK(id.shape().empty());
    for (int64_t r = 0; r < batch.num_rows(); ++r) {
      ids.push_back(id.data<int64_t>()[r]);
      names.emplace_back(batch["name"].str(r));
      CHECK(batch["x"].as_double(r) == 0.5 * static_cast<double>(id.data<int64_t>()[r]));
    }
    CHECK_THROWS_AS(id.data<double>(), std::logic_error);
    CHECK_THROWS_AS(batch["nope"], std::out_of_range);
    kept = batch;
  }
  CHECK(ids == std::vector<int64_t>{5, 6, 7, 8, 9});
  CHECK(names.back() == "row9");
  // A batch outlives its iterator.
  REQUIRE(kept);
  CHECK(kept->num_rows() == 1);
  CHECK(kept->column(0).data<int64_t>()[0] == 9);

  // Each iter_batches() is the next epoch; set_epoch() chooses it.
  CHECK(shard.epoch() == 1);
  shard.set_epoch(5);
  traintl::IterOptions o;
  o.shuffle = true;
  o.columns = {"id"};
  auto epoch5 = shard.iter_batches(10, o);
  auto batch = epoch5.next();
  REQUIRE(batch);
  CHECK(batch->num_columns() == 1);
  CHECK_FALSE(epoch5.next());
  CHECK(shard.epoch() == 6);
}

TEST_CASE("SDK: errors are DatasetError, retryable only for I/O") {
  TempDir dir;
  Write(dir / "a.csv", "id,x\n1,2\n3\n");
  FakeHost host({{"train", {{"uri", "file://" + dir.path() + "/a.csv"}}},
                 {"gone", {{"uri", "file://" + dir.path() + "/gone.csv"}}}});
  try {
    traintl::get_dataset_shard("gone");
    FAIL("no exception");
  } catch (const traintl::DatasetError& e) {
    CHECK_FALSE(e.retryable());
    CHECK_THAT(std::string(e.what()), Catch::Contains("gone.csv"));
  }
  try {
    traintl::ShardOptions so;
    so.column_types = {{"x", traintl::DType::kFloat32}};
    auto shard = traintl::get_dataset_shard("train", so);
    FAIL("no exception");
  } catch (const traintl::DatasetError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("a.csv:3"));
  }
  CHECK_THROWS_AS(traintl::get_dataset_shard("val"), traintl::DatasetError);
}

TEST_CASE("SDK: a host without datasets says so") {
  FakeHost host(nlohmann::json::object(), 0, 1, /*with_datasets=*/false);
  CHECK_THROWS_WITH(traintl::get_dataset_shard("train"), Catch::Contains("serves no datasets"));
}

TEST_CASE("SDK: inline items are read from memory and split like a file") {
  nlohmann::json items = nlohmann::json::array();
  for (int i = 0; i < 5; ++i) items.push_back({{"id", i}, {"x", i * 0.5}});
  FakeHost host({{"train", {{"items", items}, {"format", "jsonl"}, {"split", true}}}}, 1, 2);
  auto shard = traintl::get_dataset_shard("train");
  CHECK(shard.num_rows() == 3);  // ceil(5 / 2)
  const nlohmann::json info = shard.info();
  CHECK(info["format"] == "jsonl");
  CHECK(info["uri"].is_null());  // the memfd is no URI anyone else could open
  CHECK(info["files"].empty());
  std::vector<int64_t> ids;
  for (int epoch = 0; epoch < 2; ++epoch) {  // a second epoch reads the same memory again
    for (const traintl::Batch& batch : shard.iter_batches(2)) {
      for (int64_t r = 0; r < batch.num_rows(); ++r) ids.push_back(batch["id"].data<int64_t>()[r]);
    }
  }
  CHECK(ids.size() == 6);
  CHECK(std::vector<int64_t>(ids.begin(), ids.begin() + 3) ==
        std::vector<int64_t>(ids.begin() + 3, ids.end()));
}
