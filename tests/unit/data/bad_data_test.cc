// Bad data through the C ABI (DatasetService): every case fails with TRAINTL_DATA_BAD and a
// message naming the file and the line or byte offset, and is remembered as bad data.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data_test_util.h"
#include "worker/data/dataset_service.h"

using namespace traintl::data;
using namespace traintl::data::testing;

namespace {

struct Outcome {
  int code = TRAINTL_DATA_OK;
  std::string message;
  int64_t rows_before = 0;  // rows delivered before the error
};

// Opens dataset "d" = {uri, format} as rank `rank` of `world` and reads one epoch.
Outcome Read(const std::string& uri, int rank = 0, int world = 1,
             const std::string& shard_options = "", const std::string& format = "",
             DatasetService** service_out = nullptr) {
  nlohmann::json ds = {{"uri", uri}, {"split", true}};
  if (!format.empty()) ds["format"] = format;
  static std::unique_ptr<DatasetService> service;
  service = std::make_unique<DatasetService>(
      nlohmann::json{{"world_rank", rank}, {"world_size", world}, {"datasets", {{"d", ds}}}});
  if (service_out) *service_out = service.get();
  const traintl_dataset_api* api = service->api();
  Outcome out;
  char err[4096] = {0};
  traintl_dataset_shard* shard = nullptr;
  out.code = api->shard_open(api->ctx, "d", shard_options.c_str(), &shard, err, sizeof err);
  if (out.code != TRAINTL_DATA_OK) {
    out.message = err;
    return out;
  }
  traintl_batch_iter* iter = nullptr;
  out.code = api->iter_open(api->ctx, shard, R"({"batch_size": 2, "block_bytes": 1024})", &iter,
                            err, sizeof err);
  if (out.code == TRAINTL_DATA_OK) {
    for (;;) {
      const traintl_batch* batch = nullptr;
      out.code = api->iter_next(api->ctx, iter, &batch, err, sizeof err);
      if (out.code != TRAINTL_DATA_OK) break;
      out.rows_before += batch->num_rows;
      api->batch_release(api->ctx, batch);
    }
    if (out.code == TRAINTL_DATA_END) {
      out.code = TRAINTL_DATA_OK;
    } else {
      out.message = err;
      // The error stays.
      const traintl_batch* batch = nullptr;
      char again[4096] = {0};
      CHECK(api->iter_next(api->ctx, iter, &batch, again, sizeof again) == out.code);
      CHECK(std::string(again) == out.message);
    }
    api->iter_close(api->ctx, iter);
  } else {
    out.message = err;
  }
  api->shard_close(api->ctx, shard);
  return out;
}

void CheckBad(const Outcome& o, const std::vector<std::string>& parts) {
  INFO(o.message);
  CHECK(o.code == TRAINTL_DATA_BAD);
  CHECK_THAT(o.message, Catch::StartsWith("dataset 'd': "));
  for (const auto& p : parts) CHECK_THAT(o.message, Catch::Contains(p));
}

}  // namespace

TEST_CASE("bad data: a missing file") {
  DatasetService* service = nullptr;
  Outcome o = Read("file:///nonexistent-traintl/train.csv", 0, 1, "", "", &service);
  CheckBad(o, {"/nonexistent-traintl/train.csv", "No such file"});
  CHECK_THAT(service->bad_data_error(), Catch::Contains("/nonexistent-traintl/train.csv"));
}

TEST_CASE("bad data: a glob that matches nothing") {
  TempDir dir;
  WriteIdCsv(dir / "a.csv", 0, 3);
  CheckBad(Read("file://" + dir.path() + "/train-*.csv"),
           {dir.path() + "/train-*.csv", "matches no files"});
  CheckBad(Read("file://" + dir.path() + "/empty-dir-*"), {"matches no files"});
}

TEST_CASE("bad data: a malformed row, after the rows before it") {
  TempDir dir;
  Write(dir / "a.csv", "id,x\n1,2\n3,4\n5,6\n7\n9,10\n");
  // The sample that types are inferred from stops before the bad row; a bad row inside the
  // sample fails the shard's opening already.
  CheckBad(Read("file://" + dir.path() + "/a.csv"), {dir / "a.csv:5: expected 2 fields"});
  const std::string opts = R"({"infer_rows": 2})";
  for (int world : {1, 2}) {
    Outcome o = Read("file://" + dir.path() + "/a.csv", 0, world, opts);
    if (world == 1) {
      CheckBad(o, {dir / "a.csv:5: expected 2 fields", "got 1", "byte offset 17"});
      INFO(o.message);
      CHECK(o.rows_before == 2);  // the full batch before the bad row
    } else {
      // Rank 0 of 2 reads rows 1-3 only: its shard is fine.
      INFO(o.message);
      CHECK(o.code == TRAINTL_DATA_OK);
      Outcome r1 = Read("file://" + dir.path() + "/a.csv", 1, world, opts);
      CheckBad(r1, {dir / "a.csv:5: expected 2 fields"});
    }
  }
  // An unterminated quote is found by the row count when splitting over ranks.
  Write(dir / "q.csv", "id,x\n1,2\n3,\"oops\n5,6\n");
  CheckBad(Read("file://" + dir.path() + "/q.csv", 0, 2), {dir / "q.csv:3:", "not closed"});
  CheckBad(Read("file://" + dir.path() + "/q.csv"), {dir / "q.csv:3:", "not closed"});
}

TEST_CASE("bad data: a column missing in one file, or one more") {
  TempDir dir;
  WriteIdCsv(dir / "a.csv", 0, 3);
  Write(dir / "b.csv", "id,name\n3,x\n");
  CheckBad(Read("file://" + dir.path() + "/*.csv"),
           {dir / "b.csv", "column 'x' is missing", dir / "a.csv"});
  TempDir dir2;
  WriteIdCsv(dir2 / "a.csv", 0, 3);
  Write(dir2 / "b.csv", "id,x,name,extra\n3,1,x,2\n");
  CheckBad(Read("file://" + dir2.path() + "/*.csv"), {dir2 / "b.csv", "column 'extra' is not in"});
  // JSON Lines: a row without a key.
  TempDir dir3;
  Write(dir3 / "a.jsonl", "{\"id\": 1, \"x\": 2}\n{\"id\": 2}\n");
  CheckBad(Read("file://" + dir3.path() + "/a.jsonl"),
           {dir3 / "a.jsonl:2: the row has no key 'x'"});
}

TEST_CASE("bad data: a JSON Lines row nested 100,000 deep is an error, not a crash") {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  TempDir dir;  // found while inferring the schema
  Write(dir / "a.jsonl", "{\"id\": 1, \"x\": " + deep + "}\n");
  CheckBad(Read("file://" + dir.path() + "/a.jsonl"),
           {dir / "a.jsonl:1:", "nested deeper than 128 levels"});
  TempDir dir2;  // found while reading, after inference from the first row
  Write(dir2 / "a.jsonl", "{\"id\": 1}\n{\"id\": " + deep + "}\n");
  CheckBad(Read("file://" + dir2.path() + "/a.jsonl", 0, 1, R"({"infer_rows": 1})"),
           {dir2 / "a.jsonl:2:", "nested deeper than 128 levels"});
}

TEST_CASE("bad data: a value whose type does not parse") {
  TempDir dir;
  std::string text = "id,x\n";
  for (int i = 0; i < 20; ++i) text += std::to_string(i) + "," + std::to_string(i) + ".5\n";
  text += "20,twenty\n";
  Write(dir / "a.csv", text);
  CheckBad(Read("file://" + dir.path() + "/a.csv", 0, 1, R"({"infer_rows": 5})"),
           {dir / "a.csv:22: column 'x': cannot parse 'twenty' as float64"});
  // An int column (inferred from the first rows) meeting a float later on: the message says
  // how to override the type, and the override works.
  Write(dir / "b.csv", "id,x\n1,1\n2,2\n3,2.5\n");
  CheckBad(Read("file://" + dir.path() + "/b.csv", 0, 1, R"({"infer_rows": 2})"),
           {"b.csv:4: column 'x': cannot parse '2.5' as int64", "set column_types"});
  CHECK(Read("file://" + dir.path() + "/b.csv", 0, 1,
             R"({"infer_rows": 2, "column_types": {"x": "float64"}})")
            .code == TRAINTL_DATA_OK);
  TempDir dir2;
  Write(dir2 / "a.jsonl", "{\"id\": 1}\n{\"id\": \"two\"}\n");
  CheckBad(Read("file://" + dir2.path() + "/a.jsonl", 0, 1, R"({"infer_rows": 1})"),
           {"a.jsonl:2: key 'id': expected int64, got '\"two\"'"});
}

TEST_CASE("bad data: invalid JSON, truncated .npy, unknown format, not parquet") {
  TempDir dir;
  Write(dir / "a.jsonl", "{\"id\": 1}\n{\"id\": 2,,}\n");
  CheckBad(Read("file://" + dir.path() + "/a.jsonl"), {dir / "a.jsonl:2: invalid JSON"});

  std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (10, 2), }";
  while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string npy = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(dict.size()) + '\0' +
                    dict + std::string(100, '\0');
  Write(dir / "t.npy", npy);
  CheckBad(Read("file://" + dir.path() + "/t.npy"), {dir / "t.npy", "truncated", "10 rows"});

  Write(dir / "data.bin", "x\n1\n");
  CheckBad(Read("file://" + dir.path() + "/data.bin"),
           {"cannot be told from the file extension", "set \"format\""});
  CHECK(Read("file://" + dir.path() + "/data.bin", 0, 1, "", "csv").code == TRAINTL_DATA_OK);
  Write(dir / "p.parquet", "PAR1");
  CheckBad(Read("file://" + dir.path() + "/p.parquet"),
           {dir / "p.parquet", "not a Parquet file: 4 bytes"});
}

TEST_CASE("bad requests: unknown dataset, unknown options, wrong option types") {
  TempDir dir;
  WriteIdCsv(dir / "a.csv", 0, 3);
  DatasetService service(
      nlohmann::json{{"world_rank", 0},
                     {"world_size", 1},
                     {"datasets", {{"train", {{"uri", "file://" + dir.path() + "/a.csv"}}}}}});
  const traintl_dataset_api* api = service.api();
  char err[1024];
  traintl_dataset_shard* shard = nullptr;
  CHECK(api->shard_open(api->ctx, "val", nullptr, &shard, err, sizeof err) == TRAINTL_DATA_BAD);
  CHECK_THAT(std::string(err), Catch::Contains("no dataset 'val'"));
  CHECK_THAT(std::string(err), Catch::Contains("'train'"));
  CHECK(api->shard_open(api->ctx, "train", R"({"colum_names": []})", &shard, err, sizeof err) ==
        TRAINTL_DATA_BAD);
  CHECK_THAT(std::string(err), Catch::Contains("unknown shard option 'colum_names'"));
  CHECK(api->shard_open(api->ctx, "train", R"({"column_types": {"id": "int8"}})", &shard, err,
                        sizeof err) == TRAINTL_DATA_BAD);
  CHECK_THAT(std::string(err), Catch::Contains("column_types['id']"));
  // A timeout of none (0, negative) or one that overflows its conversion is refused.
  for (const char* opts :
       {R"({"http_timeout_s": 0})", R"({"http_timeout_s": -1})", R"({"http_timeout_s": 1e300})"}) {
    INFO(opts);
    CHECK(api->shard_open(api->ctx, "train", opts, &shard, err, sizeof err) == TRAINTL_DATA_BAD);
    CHECK_THAT(std::string(err), Catch::Contains("http_timeout_s: must be between 0.001 and "
                                                 "86400 seconds"));
  }
  REQUIRE(api->shard_open(api->ctx, "train", nullptr, &shard, err, sizeof err) == TRAINTL_DATA_OK);
  auto info = nlohmann::json::parse(api->shard_info(api->ctx, shard));
  CHECK(info["format"] == "csv");
  CHECK(info["columns"][1]["dtype"] == "float64");
  CHECK(info["split"] == true);  // "train" splits by default
  traintl_batch_iter* iter = nullptr;
  CHECK(api->iter_open(api->ctx, shard, R"({"batch_size": "big"})", &iter, err, sizeof err) ==
        TRAINTL_DATA_BAD);
  CHECK_THAT(std::string(err), Catch::Contains("'batch_size' has the wrong type"));
  CHECK(api->iter_open(api->ctx, shard, R"({"batch_size": 0})", &iter, err, sizeof err) ==
        TRAINTL_DATA_BAD);
  api->shard_close(api->ctx, shard);
}
