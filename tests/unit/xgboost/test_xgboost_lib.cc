// libtest_xgboost.so: traintl::xgboost under the real traintl-worker, for
// xgboost_worker_test.cc. Built like a user's library (only the traintl symbols exported).
//
// Entry points (train_loop_config keys, all optional):
//   train       Collective; FromShard("train", label) and, when the job has a dataset
//               "valid", FromShard("valid", label); train(). label ("label"), rounds (5),
//               checkpoint_every (2), early_stopping_rounds (0), params (an object added
//               to {objective binary:logistic, tree_method hist, eval_metric logloss and
//               error}), fail_rank (-1) and fail_at_round: that rank throws (fail_mode
//               "throw") or _exits (fail_mode "exit") after that round's evaluation.
//   from_shard  Collective; FromShard("train", label); one report of what it holds:
//               rows, cols, label_sum, feature_names, replicated.
#include <unistd.h>

#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include <traintl/train.h>
#include <traintl/xgboost.h>

namespace {

namespace xgb = traintl::xgboost;

void train(const nlohmann::json& config) {
  xgb::Collective collective;
  const std::string label = config.value("label", "label");
  xgb::DMatrix dtrain = xgb::FromShard("train", label);
  std::optional<xgb::DMatrix> dvalid;
  if (traintl::get_context().datasets().contains("valid")) {
    dvalid.emplace(xgb::FromShard("valid", label));
  }
  xgb::Params params = {{"objective", "binary:logistic"},
                        {"tree_method", "hist"},
                        {"eval_metric", "logloss"},
                        {"eval_metric", "error"}};
  if (config.contains("params")) {
    for (auto& p : xgb::ParamsFromJson(config["params"])) params.push_back(std::move(p));
  }
  xgb::Evals evals = {{&dtrain, "train"}};
  if (dvalid) evals.emplace_back(&*dvalid, "validation");
  xgb::TrainOptions options;
  options.checkpoint_every = config.value("checkpoint_every", 2);
  options.early_stopping_rounds = config.value("early_stopping_rounds", 0);
  if (config.value("fail_rank", -1) == traintl::get_context().world_rank()) {
    const int round = config.value("fail_at_round", 1);
    const bool exit = config.value("fail_mode", "throw") == "exit";
    options.on_round = [round, exit](const xgb::Booster&, int done, nlohmann::json&) {
      if (done < round) return;
      if (exit) ::_exit(3);  // as a crash: no Collective destructor, no goodbye
      throw std::runtime_error("injected failure after round " + std::to_string(done));
    };
  }
  xgb::train(params, dtrain, evals, config.value("rounds", 5), options);
}

void from_shard(const nlohmann::json& config) {
  xgb::Collective collective;
  xgb::DMatrix m = xgb::FromShard("train", config.value("label", "label"));
  const std::vector<float> labels = m.GetFloatInfo("label");
  traintl::report({{"rows", m.num_rows()},
                   {"cols", m.num_cols()},
                   {"label_sum", std::accumulate(labels.begin(), labels.end(), 0.0)},
                   {"feature_names", m.feature_names()},
                   {"replicated", m.replicated()}});
}

}  // namespace

TRAINTL_ENTRYPOINT(train)
TRAINTL_ENTRYPOINT(from_shard)
