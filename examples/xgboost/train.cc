// Gradient-boosted trees on the Wisconsin breast cancer data (569 tumours, 30 features;
// label 1 = benign, 0 = malignant) with XGBoost, data-parallel across the job's ranks.
// Build: the `xgboost_train` target (libxgboost_train.so; needs libxgboost-dev); data:
// examples/xgboost/fetch_data.sh <dir>; run: traintl submit examples/xgboost/job.json
// (README.md beside this file).
//
// Datasets: "train" is split, so each rank builds its DMatrix from its own rows and XGBoost
// sums the ranks' gradient statistics: every rank grows the same trees, as one process
// would from all the rows. "valid" is not split: every rank evaluates all of it, and the
// metrics XGBoost combines over the ranks are the validation set's own.
// train_loop_config (all optional): num_boost_round (50), max_depth (3), eta (0.1), seed (0),
// checkpoint_every (10), early_stopping_rounds (0 = never), params ({}: more XGBoost
// parameters, e.g. {"min_child_weight": 2, "eval_metric": "auc"}).
// Each round reports train-logloss, train-error, validation-logloss, validation-error and
// training_iteration; every checkpoint_every rounds rank 0 attaches the model as a
// checkpoint, and a restarted attempt continues from it. The final model is
// <trial_dir>/model.ubj.
#include <cmath>
#include <string>
#include <vector>

#include <traintl/train.h>
#include <traintl/xgboost.h>

namespace {

namespace xgb = traintl::xgboost;

void train_loop(const nlohmann::json& config) {
  // First: with several ranks, making a DMatrix already talks to the other ranks.
  xgb::Collective collective;
  xgb::DMatrix dtrain = xgb::FromShard("train", "label");
  xgb::DMatrix dvalid = xgb::FromShard("valid", "label");

  xgb::Params params = {
      {"objective", "binary:logistic"},
      {"tree_method", "hist"},
      {"max_depth", std::to_string(config.value("max_depth", 3))},
      {"eta", nlohmann::json(config.value("eta", 0.1)).dump()},
      {"seed", std::to_string(config.value("seed", 0))},
      {"eval_metric", "logloss"},
      {"eval_metric", "error"},
  };
  if (config.contains("params")) {
    for (auto& p : xgb::ParamsFromJson(config["params"])) params.push_back(std::move(p));
  }
  xgb::TrainOptions options;
  options.checkpoint_every = config.value("checkpoint_every", 10);
  options.early_stopping_rounds = config.value("early_stopping_rounds", 0);

  xgb::TrainResult result =
      xgb::train(params, dtrain, {{&dtrain, "train"}, {&dvalid, "validation"}},
                 config.value("num_boost_round", 50), options);

  if (traintl::get_context().world_rank() == 0) {
    // What the model gives as a classifier on the validation rows.
    const std::vector<float> p = result.booster.Predict(dvalid);
    const std::vector<float> y = dvalid.GetFloatInfo("label");
    size_t right = 0;
    for (size_t i = 0; i < p.size(); ++i) right += (p[i] > 0.5f) == (y[i] > 0.5f);
    traintl::log_message(TRAINTL_LOG_INFO, "validation accuracy " + std::to_string(right) + "/" +
                                               std::to_string(p.size()) + " after " +
                                               std::to_string(result.rounds) + " rounds");
  }
}

}  // namespace

TRAINTL_ENTRYPOINT(train_loop)
