// train(): the boosting loop with reports, checkpoints, resume and early stopping.
#include <unistd.h>
#include <xgboost/c_api.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "traintl/xgboost.h"
#include "worker/xgboost/internal.h"

namespace traintl {
namespace xgboost {
namespace {

constexpr char kMeta[] = "meta.json";

std::string ModelFile(ModelFormat format) { return std::string("model.") + ModelExtension(format); }

// XGBoost's own rule (python-package callback.py): these metrics improve upward.
bool MaximizeByName(const std::string& metric) {
  if (metric == "mape") return false;
  for (const char* prefix : {"auc", "aucpr", "map", "ndcg"}) {
    const std::string p = prefix;
    if (metric == p || metric.rfind(p + "@", 0) == 0) return true;
  }
  return false;
}

// The model file of a checkpoint directory: the one its meta.json names, else model.ubj or
// model.json; "" when it holds none.
std::string FindModel(const std::string& dir) {
  if (internal::FileExists(dir + "/" + kMeta)) {
    const nlohmann::json meta =
        nlohmann::json::parse(internal::ReadFile(dir + "/" + kMeta), nullptr, false);
    if (meta.is_object() && meta.contains("model") && meta["model"].is_string()) {
      const std::string path = dir + "/" + meta["model"].get<std::string>();
      if (internal::FileExists(path)) return path;
    }
  }
  for (ModelFormat f : {ModelFormat::kUbj, ModelFormat::kJson}) {
    const std::string path = dir + "/" + ModelFile(f);
    if (internal::FileExists(path)) return path;
  }
  return "";
}

std::string XGBoostVersion() {
  int major = 0, minor = 0, patch = 0;
  ::XGBoostVersion(&major, &minor, &patch);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

bool HasParam(const Params& params, const char* name) {
  return std::any_of(params.begin(), params.end(), [&](const auto& p) { return p.first == name; });
}

}  // namespace

EvalLine ParseEvalString(const std::string& text) {
  auto fail = [&](const std::string& why) -> Error {
    return Error("traintl::xgboost: cannot parse XGBoost's eval line '" + text + "': " + why);
  };
  EvalLine line;
  std::vector<std::string> fields;
  std::string field;
  std::istringstream in(text);
  while (std::getline(in, field, '\t')) fields.push_back(field);
  if (fields.empty() || fields[0].size() < 3 || fields[0].front() != '[' ||
      fields[0].back() != ']') {
    throw fail("it does not start with [<round>]");
  }
  const std::string round = fields[0].substr(1, fields[0].size() - 2);
  errno = 0;
  char* end = nullptr;
  const long iteration = std::strtol(round.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || iteration < 0 || iteration > (1L << 30)) {
    throw fail("'" + round + "' is not a round number");
  }
  line.iteration = static_cast<int>(iteration);
  for (size_t i = 1; i < fields.size(); ++i) {
    const std::string& f = fields[i];
    if (f.empty()) continue;
    // "validation-error@0.7:0.05": the value follows the last colon.
    const size_t colon = f.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == f.size()) {
      throw fail("'" + f + "' is not <name>:<value>");
    }
    const std::string value = f.substr(colon + 1);
    errno = 0;
    const double v = std::strtod(value.c_str(), &end);
    if (*end != '\0' || end == value.c_str()) throw fail("'" + value + "' is not a number");
    line.metrics.emplace_back(f.substr(0, colon), v);
  }
  return line;
}

TrainResult train(const Params& params, DMatrix& dtrain, const Evals& evals, int num_boost_round,
                  const TrainOptions& options) {
  static constexpr char kWho[] = "traintl::xgboost::train";
  if (num_boost_round < 0) {
    throw std::invalid_argument(std::string(kWho) + ": num_boost_round must be >= 0");
  }
  if (options.checkpoint_every < 0 || options.verbose_eval < 0 ||
      options.early_stopping_rounds < 0) {
    throw std::invalid_argument(std::string(kWho) +
                                ": checkpoint_every, verbose_eval and early_stopping_rounds "
                                "must be >= 0");
  }
  std::set<std::string> names;
  for (const auto& [m, name] : evals) {
    if (m == nullptr) throw std::invalid_argument(std::string(kWho) + ": a null eval DMatrix");
    // A tab would end the name in XGBoost's eval line; equal names would hide each other.
    if (name.empty() || name.find_first_of("\t\n") != std::string::npos ||
        !names.insert(name).second) {
      throw std::invalid_argument(std::string(kWho) +
                                  ": eval set names must be distinct, "
                                  "non-empty and without tabs; got '" +
                                  name + "'");
    }
  }
  if (options.early_stopping_rounds > 0 && evals.empty()) {
    throw std::invalid_argument(std::string(kWho) + ": early_stopping_rounds needs an eval set");
  }
  internal::RequireCollective(kWho);

  const bool in_job = traintl::internal::current_host_api != nullptr;
  const Context context = in_job ? get_context() : Context(nlohmann::json::object());
  const int rank = context.world_rank();
  auto log_line = [&](int level, const std::string& message) {
    if (in_job) log_message(level, message);
  };
  if (dtrain.replicated()) {
    log_line(TRAINTL_LOG_WARNING,
             std::string(kWho) +
                 ": every rank has every training row (a dataset with split: false), "
                 "so XGBoost counts each row " +
                 std::to_string(context.world_size()) + " times; split the training dataset");
  }

  std::vector<const DMatrix*> cache = {&dtrain};
  for (const auto& e : evals) {
    if (std::find(cache.begin(), cache.end(), e.first) == cache.end()) cache.push_back(e.first);
  }
  TrainResult result(Booster{cache});
  Booster& booster = result.booster;
  Params effective = params;
  // As XGBoost's Python train(): warn about parameters it does not know (typos).
  if (!HasParam(params, "validate_parameters")) effective.emplace_back("validate_parameters", "1");
  // The ranks of a node share its cores, as the dataset reader shares them.
  if (!HasParam(params, "nthread") && !HasParam(params, "n_jobs") &&
      ::getenv("OMP_NUM_THREADS") == nullptr) {
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    effective.emplace_back(
        "nthread", std::to_string(std::max(1, hw / std::max(1, context.local_world_size()))));
  }
  booster.SetParams(effective);

  // Resume: the model of the checkpoint, then the parameters again (a model keeps only its
  // objective; the updater, metrics and the rest come from the parameters).
  if (options.resume && in_job) {
    if (auto checkpoint = get_checkpoint()) {
      const std::string model = FindModel(checkpoint->path());
      if (model.empty()) {
        throw std::runtime_error(std::string(kWho) + ": the checkpoint " + checkpoint->path() +
                                 " holds no model.ubj or model.json to resume from");
      }
      booster.LoadModel(model);
      booster.SetParams(effective);
      result.resumed_rounds = booster.boosted_rounds();
      log_line(TRAINTL_LOG_INFO, std::string(kWho) + ": resuming after round " +
                                     std::to_string(result.resumed_rounds) + " from " + model);
      if (result.resumed_rounds > num_boost_round) {
        log_line(TRAINTL_LOG_WARNING, std::string(kWho) + ": the checkpoint has " +
                                          std::to_string(result.resumed_rounds) +
                                          " rounds, more than num_boost_round " +
                                          std::to_string(num_boost_round));
      }
    }
  }

  // Early stopping follows the last metric of the last eval set; its best round survives
  // restarts as the model's attributes, as in XGBoost's Python package.
  std::optional<bool> maximize = options.maximize;
  if (options.early_stopping_rounds > 0) {
    if (auto it = booster.GetAttr("best_iteration")) result.best_iteration = std::stoi(*it);
    if (auto s = booster.GetAttr("best_score")) result.best_score = std::stod(*s);
  }

  auto write_model = [&](const std::string& dir, int rounds) {
    const std::string file = ModelFile(options.model_format);
    internal::WriteFile(dir + "/" + file, booster.SaveModelToBuffer(options.model_format));
    nlohmann::json meta = {
        {"training_iteration", rounds}, {"model", file}, {"xgboost_version", XGBoostVersion()}};
    if (result.best_iteration) meta["best_iteration"] = *result.best_iteration;
    internal::WriteFile(dir + "/" + kMeta, meta.dump(2) + "\n");
  };

  int rounds = result.resumed_rounds;
  for (int iteration = rounds; iteration < num_boost_round; ++iteration) {
    booster.UpdateOneIter(iteration, dtrain);
    rounds = iteration + 1;
    nlohmann::json metrics = nlohmann::json::object();
    const bool last_round = rounds == num_boost_round;
    if (!evals.empty()) {
      const std::string text = booster.EvalOneIter(iteration, evals);
      const EvalLine line = ParseEvalString(text);
      for (const auto& [name, value] : line.metrics) metrics[name] = value;
      if (rank == 0 && options.verbose_eval > 0 &&
          (iteration % options.verbose_eval == 0 || last_round)) {
        log_line(TRAINTL_LOG_INFO, text);
      }
      if (options.early_stopping_rounds > 0 && !line.metrics.empty()) {
        const auto& [name, score] = line.metrics.back();
        if (!maximize) {
          // "<eval set>-<metric>"; metric names may hold dashes themselves (aft-nloglik).
          const std::string prefix = evals.back().second + "-";
          maximize = MaximizeByName(name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name);
        }
        const bool improved = !result.best_score ||
                              (*maximize ? score > *result.best_score : score < *result.best_score);
        if (improved) {
          result.best_iteration = iteration;
          result.best_score = score;
          std::ostringstream s;
          s.precision(17);
          s << score;
          booster.SetAttr("best_iteration", std::to_string(iteration));
          booster.SetAttr("best_score", s.str());
        } else if (iteration - *result.best_iteration >= options.early_stopping_rounds) {
          result.early_stopped = true;
          log_line(TRAINTL_LOG_INFO,
                   std::string(kWho) + ": stopping early after round " + std::to_string(rounds) +
                       ": " + name + " has not improved for " +
                       std::to_string(options.early_stopping_rounds) + " rounds (best: round " +
                       std::to_string(*result.best_iteration) + ")");
        }
      }
    }
    metrics["training_iteration"] = rounds;
    if (options.on_round) options.on_round(booster, rounds, metrics);
    const bool final_round = last_round || result.early_stopped;
    const bool checkpoint_due =
        final_round || (options.checkpoint_every > 0 && rounds % options.checkpoint_every == 0);
    if (in_job) {
      // Every rank has the same model: rank 0's copy is the checkpoint, and the others
      // report without one (the head merges the ranks' directories).
      if (checkpoint_due && rank == 0) {
        internal::TempDir dir(options.tmp_dir, "traintl-xgboost-checkpoint-");
        write_model(dir.path(), rounds);
        report(metrics, Checkpoint::from_directory(dir.path()));
      } else {
        report(metrics);
      }
    }
    result.last_metrics = std::move(metrics);
    if (result.early_stopped) break;
    if (in_job && should_stop()) {
      result.stopped = true;
      log_line(TRAINTL_LOG_INFO, std::string(kWho) + ": the job is stopping; leaving after round " +
                                     std::to_string(rounds));
      break;
    }
  }
  result.rounds = booster.boosted_rounds();

  if (in_job && rank == 0 && options.save_final_model && !result.stopped) {
    const std::string trial_dir = context.trial_dir();
    if (trial_dir.empty()) {
      log_line(TRAINTL_LOG_WARNING,
               std::string(kWho) + ": no trial_dir; the final model is not saved");
    } else {
      result.model_path = trial_dir + "/" + ModelFile(options.model_format);
      booster.SaveModel(result.model_path, options.model_format);
      log_line(TRAINTL_LOG_INFO, std::string(kWho) + ": wrote " + result.model_path + " (" +
                                     std::to_string(result.rounds) + " rounds)");
    }
  }
  return result;
}

}  // namespace xgboost
}  // namespace traintl
