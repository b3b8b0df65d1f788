// traintl::xgboost in-process, with real libxgboost: the eval-line parser, parameters,
// errors, the collective's configuration, FromShard over the worker's dataset reader, and
// train() (reports, checkpoints, resume, early stopping, stop) under a fake worker host.
// The same through the real traintl-worker, and with two ranks: xgboost_worker_test.cc.
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <traintl/train.h>
#include <traintl/xgboost.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "tests/unit/xgboost/test_data.h"
#include "worker/data/dataset_service.h"

namespace {

namespace fs = std::filesystem;
namespace xgb = traintl::xgboost;
using nlohmann::json;
using traintl::xgboost_test::MakeTempDir;
using traintl::xgboost_test::WriteClassificationCsv;

// A worker host in this process: the real dataset service, reports recorded (checkpoint
// directories copied, as the worker copies them before report() returns).
class FakeHost {
 public:
  struct Report {
    json metrics;
    std::string checkpoint;  // the copy, or "" without a checkpoint
  };

  FakeHost(const std::string& root, json context)
      : root_(root), context_(context.dump()), datasets_(context) {
    api_.struct_size = sizeof api_;
    api_.abi_version = TRAINTL_ABI_VERSION;
    api_.host = this;
    api_.get_context_json = [](void* h) { return static_cast<FakeHost*>(h)->context_.c_str(); };
    api_.report = &FakeHost::OnReport;
    api_.get_checkpoint = [](void* h) {
      auto* self = static_cast<FakeHost*>(h);
      return self->checkpoint.empty() ? nullptr : self->checkpoint.c_str();
    };
    api_.should_stop = [](void* h) {
      auto* self = static_cast<FakeHost*>(h);
      return self->stop_after_reports >= 0 &&
                     static_cast<int>(self->reports.size()) >= self->stop_after_reports
                 ? 1
                 : 0;
    };
    api_.log = [](void* h, int, const char* msg) {
      static_cast<FakeHost*>(h)->logs.push_back(msg);
    };
    api_.datasets = datasets_.api();
    traintl::internal::current_host_api = &api_;
  }
  ~FakeHost() { traintl::internal::current_host_api = nullptr; }
  FakeHost(const FakeHost&) = delete;
  FakeHost& operator=(const FakeHost&) = delete;

  std::string bad_data_error() const { return datasets_.bad_data_error(); }
  bool Logged(const std::string& text) const {
    for (const auto& l : logs) {
      if (l.find(text) != std::string::npos) return true;
    }
    return false;
  }

  std::vector<Report> reports;
  std::vector<std::string> logs;
  std::string checkpoint;       // what get_checkpoint() returns ("" = none)
  int stop_after_reports = -1;  // should_stop() once this many reports arrived

 private:
  static int OnReport(void* h, const char* metrics, const char* dir, char*, size_t) {
    auto* self = static_cast<FakeHost*>(h);
    Report r{json::parse(metrics), ""};
    if (dir != nullptr) {
      static int copies = 0;  // unique across the hosts of a test
      r.checkpoint = self->root_ + "/reported_" + std::to_string(copies++);
      fs::copy(dir, r.checkpoint, fs::copy_options::recursive);
    }
    self->reports.push_back(std::move(r));
    return 0;
  }

  std::string root_;
  std::string context_;
  traintl::data::DatasetService datasets_;
  traintl_host_api api_{};
};

json Context(const std::string& root, const json& datasets, int world_size = 1) {
  return {{"job_id", "xgbtest"},
          {"job_name", "xgb"},
          {"attempt", 1},
          {"world_rank", 0},
          {"world_size", world_size},
          {"local_rank", 0},
          {"local_world_size", 1},
          {"node_rank", 0},
          {"config", json::object()},
          {"trial_dir", root},
          {"collective_timeout_s", 60},
          {"datasets", datasets}};
}

json CsvDataset(const std::string& path, bool split = true) {
  return {{"uri", "file://" + path}, {"format", "csv"}, {"split", split}};
}

// The getenv of CollectiveConfig over a map.
std::function<const char*(const char*)> Env(const std::map<std::string, std::string>& env) {
  return [env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

const xgb::Params kParams = {
    {"objective", "binary:logistic"}, {"tree_method", "hist"}, {"max_depth", "3"}, {"eta", "0.3"},
    {"eval_metric", "logloss"},       {"eval_metric", "error"}};

}  // namespace

TEST_CASE("ParseEvalString: XGBoost's eval line") {
  const auto line =
      xgb::ParseEvalString("[3]\ttrain-logloss:0.46046183199371310\tvalidation-error:0.05");
  CHECK(line.iteration == 3);
  REQUIRE(line.metrics.size() == 2);
  CHECK(line.metrics[0].first == "train-logloss");
  CHECK(line.metrics[0].second == 0.46046183199371310);
  CHECK(line.metrics[1].first == "validation-error");
  CHECK(line.metrics[1].second == 0.05);

  // Metric names with '@' and ':' (the value follows the last colon), dashes, nan.
  const auto odd = xgb::ParseEvalString(
      "[12]\tvalid-error@0.7:0.25\tvalid-ndcg@5-:1\ttrain-aft-nloglik:nan\tx:y-map:0.5");
  CHECK(odd.iteration == 12);
  REQUIRE(odd.metrics.size() == 4);
  CHECK(odd.metrics[0] == std::make_pair(std::string("valid-error@0.7"), 0.25));
  CHECK(odd.metrics[1] == std::make_pair(std::string("valid-ndcg@5-"), 1.0));
  CHECK(odd.metrics[2].first == "train-aft-nloglik");
  CHECK(std::isnan(odd.metrics[2].second));
  CHECK(odd.metrics[3] == std::make_pair(std::string("x:y-map"), 0.5));

  CHECK(xgb::ParseEvalString("[0]").metrics.empty());  // no eval sets
}

TEST_CASE("ParseEvalString refuses what is not an eval line") {
  for (const char* bad :
       {"", "3\ttrain-logloss:0.1", "[x]\ttrain-logloss:0.1", "[-1]", "[1]\ttrain-logloss",
        "[1]\ttrain-logloss:", "[1]\t:0.5", "[1]\ttrain-logloss:0.1abc"}) {
    INFO(bad);
    CHECK_THROWS_AS(xgb::ParseEvalString(bad), xgb::Error);
  }
  CHECK_THROWS_WITH(xgb::ParseEvalString("[1]\ttrain-logloss:zz"),
                    Catch::Contains("cannot parse XGBoost's eval line") &&
                        Catch::Contains("'zz' is not a number"));
}

TEST_CASE("ParamsFromJson: text and numbers and booleans and arrays as repeated keys") {
  const xgb::Params p = xgb::ParamsFromJson(
      json::parse(R"({"eta": 0.1, "max_depth": 4, "objective": "binary:logistic",
                      "eval_metric": ["logloss", "error"], "seed_per_iteration": true,
                      "skipped": null})"));
  const xgb::Params expected = {
      {"eta", "0.1"},     {"eval_metric", "logloss"},       {"eval_metric", "error"},
      {"max_depth", "4"}, {"objective", "binary:logistic"}, {"seed_per_iteration", "true"}};
  CHECK(p == expected);
  CHECK_THROWS_AS(xgb::ParamsFromJson(json::array()), std::invalid_argument);
  CHECK_THROWS_AS(xgb::ParamsFromJson(json::parse(R"({"a": {"b": 1}})")), std::invalid_argument);
  CHECK_THROWS_AS(xgb::ParamsFromJson(json::parse(R"({"a": [[1]]})")), std::invalid_argument);
}

TEST_CASE("an XGBoost error names the call and the round without timestamp or stack trace") {
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  xgb::DMatrix d = xgb::DMatrix::FromDense(x.data(), 3, 2);
  d.SetLabel({0, 1, 0});
  xgb::Booster booster({&d});
  booster.SetParam("objective", "no-such-objective");
  try {
    booster.UpdateOneIter(0, d);
    FAIL("no error");
  } catch (const xgb::Error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.rfind("XGBoosterUpdateOneIter (round 0): Unknown objective function: "
                     "`no-such-objective`",
                     0) == 0);
    CHECK(what.find("Stack trace") == std::string::npos);
    CHECK(what.find('\n') == std::string::npos);
    CHECK(what.find("objective.cc") == std::string::npos);
  }
  const std::vector<float> nan_labels = {0, NAN, 1};
  CHECK_THROWS_WITH(d.SetFloatInfo("label", nan_labels.data(), 3),
                    Catch::StartsWith("XGDMatrixSetFloatInfo (label): ") &&
                        Catch::Contains("Label contains NaN"));
}

TEST_CASE("DMatrix and Booster: data and predictions and model buffers and attributes") {
  const std::vector<float> x = {0, 1, NAN, 3, 4, 5, 6, -7};
  xgb::DMatrix d = xgb::DMatrix::FromDense(x.data(), 4, 2, -7);
  CHECK(d.num_rows() == 4);
  CHECK(d.num_cols() == 2);
  d.SetLabel({0, 1, 0, 1});
  CHECK(d.GetFloatInfo("label") == std::vector<float>{0, 1, 0, 1});
  d.SetFeatureNames({"a", "b"});
  CHECK(d.feature_names() == std::vector<std::string>{"a", "b"});

  xgb::Booster booster({&d});
  booster.SetParams({{"objective", "binary:logistic"}, {"tree_method", "hist"}});
  for (int i = 0; i < 3; ++i) booster.UpdateOneIter(i, d);
  CHECK(booster.boosted_rounds() == 3);
  const std::vector<float> p = booster.Predict(d);
  REQUIRE(p.size() == 4);
  for (float v : p) CHECK((v > 0 && v < 1));
  CHECK_FALSE(booster.GetAttr("best_iteration").has_value());
  booster.SetAttr("best_iteration", "2");

  for (xgb::ModelFormat format : {xgb::ModelFormat::kUbj, xgb::ModelFormat::kJson}) {
    xgb::Booster copy;
    copy.LoadModelFromBuffer(booster.SaveModelToBuffer(format));
    CHECK(copy.boosted_rounds() == 3);
    CHECK(copy.GetAttr("best_iteration") == std::optional<std::string>("2"));
    CHECK(copy.Predict(d) == p);
  }
  const std::string dir = MakeTempDir();
  booster.SaveModel(dir + "/m.json", xgb::ModelFormat::kJson);
  CHECK(traintl::ReadFile(dir + "/m.json")->front() == '{');
  xgb::Booster loaded;
  loaded.LoadModel(dir + "/m.json");
  CHECK(loaded.boosted_rounds() == 3);
  CHECK_THROWS_WITH(loaded.LoadModel(dir + "/missing.ubj"), Catch::Contains("missing.ubj"));
  (void)traintl::RemoveAll(dir);
}

TEST_CASE("CollectiveConfig: XGBoost's rabit settings from the rank's environment") {
  traintl::Context one(json{{"world_rank", 0}, {"world_size", 1}});
  CHECK(xgb::CollectiveConfig(one, {}, Env({})).is_null());

  traintl::Context two(json{{"world_rank", 1}, {"world_size", 2}, {"collective_timeout_s", 90}});
  const std::map<std::string, std::string> env = {{"DMLC_TRACKER_URI", "10.0.0.5"},
                                                  {"DMLC_TRACKER_PORT", "9091"},
                                                  {"DMLC_NUM_WORKER", "2"},
                                                  {"DMLC_TASK_ID", "1"}};
  CHECK(xgb::CollectiveConfig(two, {}, Env(env)) == json({{"xgboost_communicator", "rabit"},
                                                          {"DMLC_TRACKER_URI", "10.0.0.5"},
                                                          {"DMLC_TRACKER_PORT", 9091},
                                                          {"DMLC_TASK_ID", "1"},
                                                          {"rabit_world_size", 2},
                                                          {"rabit_timeout", true},
                                                          {"rabit_timeout_sec", 90}}));
  // Options win over the context; without DMLC_TASK_ID and DMLC_NUM_WORKER the rank and the
  // world size stand in.
  xgb::CollectiveOptions options;
  options.timeout_s = 5;
  options.connect_retry = 3;
  const json c = xgb::CollectiveConfig(
      two, options, Env({{"DMLC_TRACKER_URI", "h"}, {"DMLC_TRACKER_PORT", "1"}}));
  CHECK(c["DMLC_TASK_ID"] == "1");
  CHECK(c["rabit_world_size"] == 2);
  CHECK(c["rabit_timeout_sec"] == 5);
  CHECK(c["DMLC_WORKER_CONNECT_RETRY"] == 3);
  traintl::Context no_timeout(json{{"world_rank", 0}, {"world_size", 2}});
  CHECK_FALSE(xgb::CollectiveConfig(no_timeout, {}, Env(env)).contains("rabit_timeout_sec"));

  auto without = [&](const std::string& name) {
    auto e = env;
    e.erase(name);
    return e;
  };
  auto with = [&](const std::string& name, const std::string& value) {
    auto e = env;
    e[name] = value;
    return e;
  };
  CHECK_THROWS_WITH(xgb::CollectiveConfig(two, {}, Env(without("DMLC_TRACKER_URI"))),
                    Catch::Contains("DMLC_TRACKER_URI is not set") &&
                        Catch::Contains("\"framework\": \"xgboost\""));
  CHECK_THROWS_WITH(xgb::CollectiveConfig(two, {}, Env(without("DMLC_TRACKER_PORT"))),
                    Catch::Contains("DMLC_TRACKER_PORT is not set"));
  CHECK_THROWS_WITH(xgb::CollectiveConfig(two, {}, Env(with("DMLC_TRACKER_PORT", "70000"))),
                    Catch::Contains("DMLC_TRACKER_PORT is '70000'"));
  CHECK_THROWS_WITH(xgb::CollectiveConfig(two, {}, Env(with("DMLC_NUM_WORKER", "3"))),
                    Catch::Contains("DMLC_NUM_WORKER is '3' but the job has 2 ranks"));
  CHECK_THROWS_AS(xgb::CollectiveConfig(two, {}, Env(with("DMLC_TASK_ID", "a b"))), xgb::Error);
}

TEST_CASE("Collective: nothing to join with one rank and a clear error without the tracker") {
  const std::string dir = MakeTempDir();
  {
    FakeHost host(dir, Context(dir, json::object()));
    xgb::Collective collective;
    CHECK_FALSE(collective.distributed());
    CHECK(collective.rank() == 0);
    CHECK(collective.world_size() == 1);
  }
  {
    FakeHost host(dir, Context(dir, json::object(), /*world_size=*/2));
    ::unsetenv("DMLC_TRACKER_URI");
    CHECK_THROWS_WITH(xgb::Collective(), Catch::Contains("DMLC_TRACKER_URI is not set"));
    // Without a Collective, a job of two ranks must not train each rank alone.
    const std::vector<float> x = {1, 2};
    CHECK_THROWS_WITH(xgb::DMatrix::FromDense(x.data(), 1, 2),
                      Catch::Contains("no traintl::xgboost::Collective is alive"));
  }
  (void)traintl::RemoveAll(dir);
}

TEST_CASE("FromShard: this rank's rows with the numeric columns as features and the label") {
  const std::string dir = MakeTempDir();
  const auto rows = WriteClassificationCsv(dir + "/train.csv", 50, /*seed=*/1);
  FakeHost host(dir, Context(dir, {{"train", CsvDataset(dir + "/train.csv")}}));

  SECTION("every numeric column but the label") {
    xgb::FromShardOptions options;
    options.batch_size = 7;  // several batches
    xgb::DMatrix m = xgb::FromShard("train", "label", options);
    CHECK(m.num_rows() == 50);
    CHECK(m.num_cols() == 4);
    CHECK(m.feature_names() == std::vector<std::string>{"f0", "f1", "f2", "count"});
    CHECK_FALSE(m.replicated());
    std::vector<float> expected;
    for (const auto& r : rows) expected.push_back(static_cast<float>(r.label));
    CHECK(m.GetFloatInfo("label") == expected);
    CHECK(host.Logged("not features (they hold text): 'name'"));
    // The values themselves: a one-round stump's prediction depends on them, so compare
    // against the same matrix built from the rows directly.
    std::vector<float> x;
    for (const auto& r : rows) {
      x.insert(x.end(), {static_cast<float>(r.f[0]), static_cast<float>(r.f[1]),
                         static_cast<float>(r.f[2]), static_cast<float>(r.count)});
    }
    xgb::DMatrix direct = xgb::DMatrix::FromDense(x.data(), rows.size(), 4);
    direct.SetLabel(expected);
    xgb::Booster a({&m}), b({&direct});
    for (auto* booster : {&a, &b}) {
      booster->SetParams(kParams);
      for (int i = 0; i < 3; ++i) booster->UpdateOneIter(i, booster == &a ? m : direct);
    }
    CHECK(a.Predict(m) == b.Predict(direct));
  }
  SECTION("explicit feature columns and a weight column") {
    xgb::FromShardOptions options;
    options.feature_columns = {"f2", "f0"};
    options.weight_column = "count";
    xgb::DMatrix m = xgb::FromShard("train", "label", options);
    CHECK(m.num_cols() == 2);
    CHECK(m.feature_names() == std::vector<std::string>{"f2", "f0"});
    std::vector<float> weights;
    for (const auto& r : rows) weights.push_back(static_cast<float>(r.count));
    CHECK(m.GetFloatInfo("weight") == weights);
  }
  SECTION("no label: data to predict on") {
    xgb::DMatrix m = xgb::FromShard("train", "");
    CHECK(m.num_cols() == 5);  // the label column is a feature now
    CHECK(m.GetFloatInfo("label").empty());
  }
  SECTION("a label column that is also a feature is a programming error") {
    xgb::FromShardOptions options;
    options.feature_columns = {"f0", "label"};
    CHECK_THROWS_AS(xgb::FromShard("train", "label", options), std::invalid_argument);
  }
  CHECK(host.bad_data_error().empty());
  (void)traintl::RemoveAll(dir);
}

TEST_CASE("FromShard: data XGBoost cannot train on fails without retries") {
  const std::string dir = MakeTempDir();
  const std::string csv = dir + "/train.csv";
  std::string label = "label";
  xgb::FromShardOptions options;
  std::string expected;
  SECTION("no such label column") {
    WriteClassificationCsv(csv, 20, 1);
    label = "target";
    expected = "no label column 'target' (the columns are f0, f1, f2, count, name, label)";
  }
  SECTION("a label column of text") {
    traintl::xgboost_test::WriteText(csv, "f0,label\n1.5,M\n2.5,B\n");
    expected = "the label column 'label' holds text, not numbers";
  }
  SECTION("text in the label column below the rows its type was inferred from") {
    // The reader infers a column's type from the first 10000 rows.
    std::string text = "f0,label\n";
    for (int i = 0; i < 10005; ++i) text += std::to_string(i) + "," + std::to_string(i % 2) + "\n";
    text += "7,benign\n";
    traintl::xgboost_test::WriteText(csv, text);
    expected = "train.csv:10007";  // the worker's message names the file and line
  }
  SECTION("an empty label") {
    traintl::xgboost_test::WriteText(csv, "f0,label\n1,0\n2,\n3,1\n");
    expected =
        "the label column 'label' is empty, NaN or infinite in 1 of this rank's 3 rows "
        "(the first: row 1";
  }
  SECTION("a feature column of text, named") {
    WriteClassificationCsv(csv, 20, 1);
    options.feature_columns = {"f0", "name"};
    expected = "the feature column 'name' holds text";
  }
  SECTION("no such feature column") {
    WriteClassificationCsv(csv, 20, 1);
    options.feature_columns = {"f9"};
    expected = "no feature column 'f9'";
  }
  SECTION("no numeric feature at all") {
    traintl::xgboost_test::WriteText(csv, "name,label\na,0\nb,1\n");
    expected = "no numeric feature columns";
  }
  FakeHost host(dir, Context(dir, {{"train", CsvDataset(csv)}}));
  try {
    (void)xgb::FromShard("train", label, options);
    FAIL("no error");
  } catch (const traintl::DatasetError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).rfind("traintl::xgboost::FromShard(dataset 'train'): ", 0) == 0);
    CHECK(std::string(e.what()).find(expected) != std::string::npos);
    CHECK_FALSE(e.retryable());
  }
  // What makes traintl-worker end the attempt as not retryable.
  CHECK_FALSE(host.bad_data_error().empty());
  (void)traintl::RemoveAll(dir);
}

TEST_CASE("train: a report per round under XGBoost's names and checkpoints every k rounds") {
  const std::string dir = MakeTempDir();
  WriteClassificationCsv(dir + "/train.csv", 300, 1);
  WriteClassificationCsv(dir + "/valid.csv", 100, 2);
  FakeHost host(dir, Context(dir, {{"train", CsvDataset(dir + "/train.csv")},
                                   {"valid", CsvDataset(dir + "/valid.csv", false)}}));
  xgb::DMatrix dtrain = xgb::FromShard("train", "label");
  xgb::DMatrix dvalid = xgb::FromShard("valid", "label");
  xgb::TrainOptions options;
  options.checkpoint_every = 3;
  const xgb::TrainResult result =
      xgb::train(kParams, dtrain, {{&dtrain, "train"}, {&dvalid, "validation"}}, 7, options);

  REQUIRE(host.reports.size() == 7);
  for (int k = 0; k < 7; ++k) {
    const json& m = host.reports[k].metrics;
    INFO("report " << k << ": " << m.dump());
    CHECK(m.size() == 5);
    for (const char* name :
         {"train-logloss", "train-error", "validation-logloss", "validation-error"}) {
      CHECK(m.contains(name));
      CHECK(m[name].is_number());
    }
    CHECK(m["training_iteration"] == k + 1);
    const bool checkpointed = k + 1 == 3 || k + 1 == 6 || k + 1 == 7;
    CHECK(host.reports[k].checkpoint.empty() != checkpointed);
  }
  CHECK(host.reports[6].metrics["train-logloss"] < host.reports[0].metrics["train-logloss"]);
  CHECK(host.Logged("[6]\ttrain-logloss:"));  // verbose_eval: the eval line in the log

  // A checkpoint: the model and a small meta.json.
  const std::string ckpt = host.reports[2].checkpoint;
  const json meta = json::parse(*traintl::ReadFile(ckpt + "/meta.json"));
  CHECK(meta["training_iteration"] == 3);
  CHECK(meta["model"] == "model.ubj");
  CHECK(meta["xgboost_version"].get<std::string>().rfind("1.", 0) == 0);
  xgb::Booster from_ckpt;
  from_ckpt.LoadModel(ckpt + "/model.ubj");
  CHECK(from_ckpt.boosted_rounds() == 3);

  CHECK(result.rounds == 7);
  CHECK(result.resumed_rounds == 0);
  CHECK(result.last_metrics == host.reports.back().metrics);
  CHECK_FALSE(result.stopped);
  CHECK_FALSE(result.early_stopped);
  // The final model, written atomically into the trial dir.
  CHECK(result.model_path == dir + "/model.ubj");
  xgb::Booster final_model;
  final_model.LoadModel(result.model_path);
  CHECK(final_model.boosted_rounds() == 7);
  CHECK(final_model.Predict(dvalid) == result.booster.Predict(dvalid));
  (void)traintl::RemoveAll(dir);
}

TEST_CASE("train: resuming from the checkpoint of round k ends with the uninterrupted model") {
  // tree_method hist on one process is deterministic, and a model keeps every tree
  // exactly: the resumed run must end bit-equal (metrics and model) to an uninterrupted one.
  // Not so with row or column subsampling: XGBoost's random state is not part of a model
  // (even with seed_per_iteration, 1.7's hist draws differently in a booster's first round).
  const std::string dir = MakeTempDir();
  WriteClassificationCsv(dir + "/train.csv", 400, 3);
  WriteClassificationCsv(dir + "/valid.csv", 100, 4);
  const json context = Context(dir, {{"train", CsvDataset(dir + "/train.csv")},
                                     {"valid", CsvDataset(dir + "/valid.csv", false)}});
  const xgb::Params params = kParams;
  xgb::TrainOptions options;
  options.checkpoint_every = 4;
  options.model_format = GENERATE(xgb::ModelFormat::kUbj, xgb::ModelFormat::kJson);
  constexpr int kRounds = 10;

  auto run = [&](const std::string& checkpoint, std::vector<FakeHost::Report>* reports) {
    FakeHost host(dir, context);
    host.checkpoint = checkpoint;
    xgb::DMatrix dtrain = xgb::FromShard("train", "label");
    xgb::DMatrix dvalid = xgb::FromShard("valid", "label");
    xgb::TrainResult r =
        xgb::train(params, dtrain, {{&dtrain, "train"}, {&dvalid, "validation"}}, kRounds, options);
    *reports = host.reports;
    return r;
  };
  std::vector<FakeHost::Report> first, resumed;
  const xgb::TrainResult full = run("", &first);
  REQUIRE(first.size() == kRounds);
  const std::string ckpt = first[3].checkpoint;  // round 4
  REQUIRE_FALSE(ckpt.empty());
  CHECK(traintl::PathExists(ckpt + "/model." + xgb::ModelExtension(options.model_format)));

  const xgb::TrainResult again = run(ckpt, &resumed);
  CHECK(again.resumed_rounds == 4);
  REQUIRE(resumed.size() == kRounds - 4);
  CHECK(resumed.front().metrics["training_iteration"] == 5);
  CHECK(again.rounds == kRounds);
  CHECK(again.booster.boosted_rounds() == kRounds);
  for (size_t k = 0; k < resumed.size(); ++k) {
    INFO("round " << k + 5);
    CHECK(resumed[k].metrics == first[k + 4].metrics);  // bit-equal doubles
  }
  CHECK(again.booster.SaveModelToBuffer(xgb::ModelFormat::kJson) ==
        full.booster.SaveModelToBuffer(xgb::ModelFormat::kJson));

  // A checkpoint of the last round: nothing left to train, the final model is written.
  std::vector<FakeHost::Report> none;
  const xgb::TrainResult done = run(first.back().checkpoint, &none);
  CHECK(none.empty());
  CHECK(done.rounds == kRounds);
  CHECK(done.last_metrics.empty());
  CHECK(traintl::PathExists(done.model_path));
  (void)traintl::RemoveAll(dir);
}

TEST_CASE("train: early stopping on the last metric of the last eval set kept across resume") {
  const std::string dir = MakeTempDir();
  WriteClassificationCsv(dir + "/train.csv", 200, 5, /*flip_percent=*/25);
  WriteClassificationCsv(dir + "/valid.csv", 200, 6, /*flip_percent=*/25);
  const json context = Context(dir, {{"train", CsvDataset(dir + "/train.csv")},
                                     {"valid", CsvDataset(dir + "/valid.csv", false)}});
  // Deep trees on noisy labels: the validation loss soon rises.
  const xgb::Params params = {{"objective", "binary:logistic"},
                              {"tree_method", "hist"},
                              {"max_depth", "8"},
                              {"eta", "0.8"},
                              {"eval_metric", "error"},
                              {"eval_metric", "logloss"}};
  xgb::TrainOptions options;
  options.early_stopping_rounds = 3;
  options.checkpoint_every = 1;
  std::vector<FakeHost::Report> reports;
  std::optional<xgb::TrainResult> result;
  {
    FakeHost host(dir, context);
    xgb::DMatrix dtrain = xgb::FromShard("train", "label");
    xgb::DMatrix dvalid = xgb::FromShard("valid", "label");
    result.emplace(
        xgb::train(params, dtrain, {{&dtrain, "train"}, {&dvalid, "validation"}}, 100, options));
    reports = host.reports;
  }
  REQUIRE(result->early_stopped);
  REQUIRE(result->best_iteration.has_value());
  const int best = *result->best_iteration;
  CHECK(result->rounds == best + 1 + 3);  // the model keeps every round
  REQUIRE(static_cast<int>(reports.size()) == result->rounds);
  double best_loss = 1e300;
  for (int k = 0; k <= best; ++k) {
    best_loss = std::min(best_loss, reports[k].metrics["validation-logloss"].get<double>());
  }
  CHECK(*result->best_score == best_loss);
  CHECK(reports[best].metrics["validation-logloss"] == best_loss);
  CHECK(result->booster.GetAttr("best_iteration") == std::to_string(best));
  CHECK_FALSE(reports.back().checkpoint.empty());

  // Resumed after the best round, the best round and score come from the model: training
  // stops at the same round.
  {
    FakeHost host(dir, context);
    host.checkpoint = reports[best].checkpoint;
    xgb::DMatrix dtrain = xgb::FromShard("train", "label");
    xgb::DMatrix dvalid = xgb::FromShard("valid", "label");
    const xgb::TrainResult again =
        xgb::train(params, dtrain, {{&dtrain, "train"}, {&dvalid, "validation"}}, 100, options);
    CHECK(again.early_stopped);
    CHECK(again.rounds == result->rounds);
    CHECK(again.best_iteration == best);
    CHECK(host.reports.back().metrics == reports.back().metrics);
  }
  (void)traintl::RemoveAll(dir);
}

TEST_CASE("train: should_stop() ends training after the round's report without a model") {
  const std::string dir = MakeTempDir();
  WriteClassificationCsv(dir + "/train.csv", 100, 7);
  FakeHost host(dir, Context(dir, {{"train", CsvDataset(dir + "/train.csv")}}));
  host.stop_after_reports = 2;
  xgb::DMatrix dtrain = xgb::FromShard("train", "label");
  const xgb::TrainResult r = xgb::train(kParams, dtrain, {{&dtrain, "train"}}, 10);
  CHECK(r.stopped);
  CHECK(r.rounds == 2);
  CHECK(host.reports.size() == 2);
  CHECK(r.model_path.empty());
  CHECK_FALSE(traintl::PathExists(dir + "/model.ubj"));
  (void)traintl::RemoveAll(dir);
}

TEST_CASE("train: arguments it refuses") {
  const std::vector<float> x = {1, 2, 3, 4};
  xgb::DMatrix d = xgb::DMatrix::FromDense(x.data(), 2, 2);
  d.SetLabel({0, 1});
  CHECK_THROWS_AS(xgb::train(kParams, d, {}, -1), std::invalid_argument);
  CHECK_THROWS_AS(xgb::train(kParams, d, {{&d, "a"}, {&d, "a"}}, 1), std::invalid_argument);
  CHECK_THROWS_AS(xgb::train(kParams, d, {{&d, "a\tb"}}, 1), std::invalid_argument);
  CHECK_THROWS_AS(xgb::train(kParams, d, {{nullptr, "a"}}, 1), std::invalid_argument);
  xgb::TrainOptions options;
  options.early_stopping_rounds = 2;
  CHECK_THROWS_AS(xgb::train(kParams, d, {}, 1, options), std::invalid_argument);
  // Outside a job: no reports, no checkpoints, no model file; the booster is trained.
  const xgb::TrainResult r = xgb::train(kParams, d, {{&d, "train"}}, 2);
  CHECK(r.rounds == 2);
  CHECK(r.last_metrics.contains("train-logloss"));
}
