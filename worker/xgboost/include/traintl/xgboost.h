// traintl::xgboost: XGBoost training inside a traintl job (links traintl::xgboost, which
// links libxgboost; the worker host does not).
//
//   #include <traintl/xgboost.h>
//   namespace xgb = traintl::xgboost;
//
//   void train_loop(const nlohmann::json& config) {
//     xgb::Collective collective;               // joins the job's other ranks (world > 1)
//     xgb::DMatrix dtrain = xgb::FromShard("train", "label");  // this rank's rows
//     xgb::DMatrix dvalid = xgb::FromShard("valid", "label");
//     xgb::Params params = {{"objective", "binary:logistic"}, {"tree_method", "hist"},
//                           {"eval_metric", "logloss"}, {"eval_metric", "error"}};
//     xgb::train(params, dtrain, {{&dtrain, "train"}, {&dvalid, "validation"}}, 100);
//   }
//   TRAINTL_ENTRYPOINT(train_loop)
//
// train() reports every round's eval metrics under XGBoost's own names ("train-logloss",
// "validation-error", ...) plus "training_iteration" (the rounds done), attaches the model
// as a checkpoint every TrainOptions::checkpoint_every rounds, resumes from get_checkpoint()
// on a restarted attempt, and writes the final model to <trial_dir>/model.ubj.
//
// Distributed training: with more than one rank, XGBoost's collective (rabit) connects the
// ranks through the tracker that traintld runs for jobs with "framework": "xgboost" (it
// puts DMLC_TRACKER_URI, DMLC_TRACKER_PORT, DMLC_TASK_ID and DMLC_NUM_WORKER in every
// rank's environment). Each rank builds its DMatrix from its own rows (a split dataset);
// XGBoost sums gradient statistics and eval metrics over the ranks, so every rank grows the
// same trees and sees the same metrics. Creating a DMatrix is itself a collective
// operation (the ranks agree on the number of columns): a Collective must be alive before
// the first DMatrix is made, and every rank must make the same DMatrices in the same order.
//
// Errors: a failed XGBoost call throws Error, whose message says what was being done
// ("XGBoosterUpdateOneIter (round 12): ..."); uncaught, it fails the attempt with that
// message, and the job restarts from its latest checkpoint while failures remain. Data that
// cannot be trained on (no such label column, text where numbers are needed, a label that
// is NaN) throws traintl::DatasetError with retryable() false, and the attempt fails
// without restarts: another attempt would read the same data.
//
// Thread-safety: XGBoost 1.7 keeps its collective communicator per thread, so create the
// Collective, the DMatrices and call train() on one thread (the entry point's). A DMatrix
// or Booster is used by one thread at a time; XGBoost parallelizes inside its calls (set
// "nthread" in the params, or OMP_NUM_THREADS in the job's env; by default train() gives
// each rank of a node an equal part of its cores).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "traintl/train.h"

namespace traintl {
namespace xgboost {

// An XGBoost call failed; what() names the call and what it was for, then XGBoost's
// message (without its timestamp and stack trace).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Booster parameters as XGBoost takes them: ordered name/value pairs, where a name may
// repeat when XGBoost accumulates it (several "eval_metric"s).
using Params = std::vector<std::pair<std::string, std::string>>;

// Params from a JSON object such as a train_loop_config section: numbers and strings as
// text, booleans as "true"/"false", an array as one pair per element (in order), null
// skipped. Throws std::invalid_argument for anything else (objects, nested arrays).
Params ParamsFromJson(const nlohmann::json& object);

// How a model is serialized: Universal Binary JSON (compact, exact) or JSON (readable).
enum class ModelFormat { kUbj, kJson };

// "ubj" or "json": the file extension of a model in `format`.
const char* ModelExtension(ModelFormat format);

// A data matrix (owns an XGBoost DMatrixHandle). Move-only.
class DMatrix {
 public:
  // Takes ownership of `handle`, a DMatrixHandle.
  explicit DMatrix(void* handle);
  DMatrix(DMatrix&& other) noexcept;
  DMatrix& operator=(DMatrix&& other) noexcept;
  DMatrix(const DMatrix&) = delete;
  DMatrix& operator=(const DMatrix&) = delete;
  ~DMatrix();

  // A matrix of `rows` x `cols` floats, row-major (copied); `missing` and NaN are missing
  // values.
  static DMatrix FromDense(const float* data, uint64_t rows, uint64_t cols,
                           float missing = std::numeric_limits<float>::quiet_NaN());

  // Sets a per-row float field: "label", "weight", "base_margin", ... (`n` values).
  void SetFloatInfo(const std::string& field, const float* values, uint64_t n);
  void SetLabel(const std::vector<float>& labels) {
    SetFloatInfo("label", labels.data(), labels.size());
  }
  // The per-row float field `field` (empty when it was never set).
  std::vector<float> GetFloatInfo(const std::string& field) const;
  // Names of the columns, stored in models trained on this matrix.
  void SetFeatureNames(const std::vector<std::string>& names);
  std::vector<std::string> feature_names() const;

  uint64_t num_rows() const;
  uint64_t num_cols() const;
  // The DMatrixHandle, for XGBoost's C API (owned by this object; link libxgboost to call
  // it: traintl::xgboost links it privately).
  void* handle() const { return handle_; }

  // True when every rank holds the same rows (an unsplit dataset in a job of several
  // ranks): right for eval sets, but a training set would count each row once per rank.
  bool replicated() const { return replicated_; }
  void set_replicated(bool replicated) { replicated_ = replicated; }

 private:
  void* handle_ = nullptr;
  bool replicated_ = false;
};

// How FromShard reads a dataset.
struct FromShardOptions {
  // The feature columns, in this order. A column whose rows are arrays (.npy data) gives
  // one feature per element. Default: every numeric column but the label and weight
  // columns, in the dataset's order.
  std::vector<std::string> feature_columns;
  // A column of per-row weights (XGBoost's "weight"). Default: none.
  std::string weight_column;
  // A feature value read as missing, besides NaN (an empty CSV field is NaN). Default: NaN.
  float missing = std::numeric_limits<float>::quiet_NaN();
  // Rows per batch read from the worker. Default: 8192.
  int64_t batch_size = 8192;
  // A split dataset gives every rank ceil(rows / ranks) rows, the last ranks' parts padded
  // with rows from the start (as for DDP); XGBoost would count those rows twice, so they
  // are dropped. Default: true.
  bool drop_padding = true;
  // For FromShard(name, ...): how the dataset's files are read (column_names for CSV files
  // without a header row, column_types). Default: none.
  ShardOptions shard_options;
};

// This rank's rows of `shard` as a dense float matrix: the feature columns, and the label
// from `label_column` ("" = no label, e.g. data to predict on). Every rank must call it for
// the same datasets in the same order (see above). Throws traintl::DatasetError, not
// retryable when the data is wrong: the label (or weight) column is missing, not numeric,
// not one value per row, or NaN/infinite; a feature column is missing or holds text that
// is not a number. Throws std::logic_error when the job has several ranks and no
// Collective is alive.
DMatrix FromShard(DatasetShard& shard, const std::string& label_column,
                  const FromShardOptions& options = {});
// The same for the dataset `dataset` of the job spec (get_dataset_shard(dataset,
// options.shard_options)).
DMatrix FromShard(const std::string& dataset, const std::string& label_column,
                  const FromShardOptions& options = {});

// A gradient-boosted model (owns an XGBoost BoosterHandle). Move-only.
class Booster {
 public:
  // A booster to train on the matrices in `cache` (XGBoost keeps their predictions between
  // rounds: pass the training matrix and the eval matrices).
  explicit Booster(const std::vector<const DMatrix*>& cache = {});
  Booster(Booster&& other) noexcept;
  Booster& operator=(Booster&& other) noexcept;
  Booster(const Booster&) = delete;
  Booster& operator=(const Booster&) = delete;
  ~Booster();

  void SetParam(const std::string& name, const std::string& value);
  void SetParams(const Params& params);
  // One boosting round; `iteration` is the number of rounds done before it.
  void UpdateOneIter(int iteration, const DMatrix& dtrain);
  // XGBoost's eval line for round `iteration`: "[3]\ttrain-logloss:0.12\tvalidation-error:0.05".
  std::string EvalOneIter(int iteration,
                          const std::vector<std::pair<DMatrix*, std::string>>& evals);
  // Rounds in the model (also those of a loaded model).
  int boosted_rounds() const;

  std::string SaveModelToBuffer(ModelFormat format = ModelFormat::kUbj) const;
  // Loads a model saved in either format. Parameters are not part of a model (XGBoost
  // keeps only the objective): set them again after loading.
  void LoadModelFromBuffer(const std::string& buffer);
  // Writes the model to `path` atomically (a temporary file renamed over it).
  void SaveModel(const std::string& path, ModelFormat format = ModelFormat::kUbj) const;
  void LoadModel(const std::string& path);

  // Predictions for every row of `data` (probabilities for binary:logistic; with
  // `output_margin`, raw scores). Multi-output models give rows x outputs values.
  std::vector<float> Predict(const DMatrix& data, bool output_margin = false) const;

  // String attributes stored in the model (train() keeps best_iteration and best_score).
  std::optional<std::string> GetAttr(const std::string& key) const;
  void SetAttr(const std::string& key, const std::string& value);

  // The BoosterHandle, for XGBoost's C API (owned by this object; see DMatrix::handle()).
  void* handle() const { return handle_; }

 private:
  void* handle_ = nullptr;
};

// How Collective connects.
struct CollectiveOptions {
  // Seconds a collective operation waits for the other ranks before it fails. Default: 0,
  // the job's collective_timeout_s (XGBoost's 1800 s when that is 0 too).
  int timeout_s = 0;
  // Attempts to connect to the tracker (XGBoost's DMLC_WORKER_CONNECT_RETRY, 2k seconds
  // apart). Default: 0, XGBoost's 5.
  int connect_retry = 0;
};

// XGBoost's collective communicator for this rank's thread, initialized from the job's
// context and environment for as long as this object lives (RAII). With one rank it does
// nothing. With several it connects to the tracker at DMLC_TRACKER_URI:DMLC_TRACKER_PORT as
// task DMLC_TASK_ID (default: the world rank) of DMLC_NUM_WORKER (which must equal the
// world size) and blocks until every rank has connected, with no timeout of its own (a rank
// that never starts fails the attempt, which stops the others); the destructor tells the
// tracker this rank is done. Meanwhile XGBoost calls throw Error when a peer is gone or
// silent for the timeout, instead of hanging. One at a time per process; not copyable or
// movable; construct and destroy it on the thread that trains. Throws Error when the
// environment is missing or the connection fails.
class Collective {
 public:
  explicit Collective(const CollectiveOptions& options = {});
  ~Collective();
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;

  // True when connected to other ranks.
  bool distributed() const { return distributed_; }
  // XGBoost's rank (the tracker's order by DMLC_TASK_ID, so normally the world rank) and
  // number of ranks; 0 and 1 when not distributed.
  int rank() const;
  int world_size() const;

 private:
  bool distributed_ = false;
};

// The XGCommunicatorInit configuration for a rank with `context` and an environment read
// through `getenv`: null when the world has one rank. Throws Error when a DMLC_* variable
// is missing or malformed. Exposed for tests; Collective uses it.
nlohmann::json CollectiveConfig(const Context& context, const CollectiveOptions& options,
                                const std::function<const char*(const char*)>& getenv);

// XGBoost's eval line, parsed: "[3]\ttrain-logloss:0.12\tvalidation-error:0.05" is
// iteration 3 with metrics {train-logloss: 0.12, validation-error: 0.05} in that order.
struct EvalLine {
  int iteration = 0;
  std::vector<std::pair<std::string, double>> metrics;
};
// Throws Error when `text` is not such a line.
EvalLine ParseEvalString(const std::string& text);

// The evaluation sets of train(): a matrix and the name its metrics are reported under.
using Evals = std::vector<std::pair<DMatrix*, std::string>>;

// How train() runs.
struct TrainOptions {
  // Rounds between checkpoints; the last round always has one. 0: only the last round.
  // Default: 10.
  int checkpoint_every = 10;
  // How the model is written, in checkpoints (model.<ext>) and the final model. Default:
  // kUbj.
  ModelFormat model_format = ModelFormat::kUbj;
  // Rank 0 writes the eval line to its log every this many rounds, and on the last round
  // (0: never). Default: 1.
  int verbose_eval = 1;
  // Stop once the last metric of the last eval set has not improved for this many rounds
  // (as XGBoost's early_stopping_rounds); the model keeps every round, with the attributes
  // best_iteration and best_score. 0: never. Default: 0.
  int early_stopping_rounds = 0;
  // Whether that metric improves upward. Default: from its name, as XGBoost decides (auc,
  // aucpr, map and ndcg go up; the others down).
  std::optional<bool> maximize;
  // Continue from the model in get_checkpoint() when there is one. Default: true.
  bool resume = true;
  // Rank 0 writes the final model to <trial_dir>/model.<ext> (not when should_stop()
  // ended training). Default: true.
  bool save_final_model = true;
  // Where checkpoint directories are made before report() copies them. Default: "",
  // $TMPDIR or /tmp.
  std::string tmp_dir;
  // Called on every rank after each round's evaluation, before its report; may add
  // metrics (the argument is the report's metrics object). Default: none.
  std::function<void(const Booster& booster, int training_iteration, nlohmann::json& metrics)>
      on_round;
};

// What train() did.
struct TrainResult {
  explicit TrainResult(Booster trained) : booster(std::move(trained)) {}

  Booster booster;
  // Rounds in the model: num_boost_round unless training stopped early.
  int rounds = 0;
  // Rounds restored from the checkpoint (0 when training started afresh).
  int resumed_rounds = 0;
  // The last report's metrics (an empty object when no round ran in this attempt).
  nlohmann::json last_metrics = nlohmann::json::object();
  // With early_stopping_rounds: the best round (0-based) and its score.
  std::optional<int> best_iteration;
  std::optional<double> best_score;
  // early_stopping_rounds ended training.
  bool early_stopped = false;
  // should_stop() ended training (the job is being stopped).
  bool stopped = false;
  // The final model's path (rank 0; "" on other ranks or when it was not written).
  std::string model_path;
};

// Trains a booster with `params` on `dtrain` for `num_boost_round` rounds in all (a resumed
// attempt trains only the rounds its checkpoint lacks), evaluating on `evals` every round.
// Every round ends with a report() of the metrics on every rank (rank 0 attaching the
// checkpoint when one is due), so all ranks report the same number of times. A resumed
// attempt ends with the model an uninterrupted run would have, bit for bit, when training
// is deterministic (tree_method hist without row or column subsampling: XGBoost's random
// state is not part of a model). Throws Error
// (an XGBoost call failed), std::invalid_argument (bad arguments), and what report()
// throws.
TrainResult train(const Params& params, DMatrix& dtrain, const Evals& evals, int num_boost_round,
                  const TrainOptions& options = {});

}  // namespace xgboost
}  // namespace traintl
