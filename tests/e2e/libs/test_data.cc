// libtest_data.so: reads a dataset of the job spec through the SDK
// (traintl::get_dataset_shard / iter_batches) and reports what every epoch yielded. No
// LibTorch.
//
// train_loop_config (all optional):
//   dataset ("train"), batch_size (16), epochs (1), shuffle (false), seed (0),
//   drop_last (false), column ("id"): an int64 column whose values are reported
//   catch (false): report a DatasetError as {"error", "retryable"} instead of failing
// Metrics per epoch: epoch, rank, rows, batches, ids (the column's values in order),
// num_rows (the shard's rows per epoch; -1 when not counted).
#include <string>
#include <vector>

#include <traintl/train.h>

namespace {

void train_loop(const nlohmann::json& config) {
  const traintl::Context ctx = traintl::get_context();
  const std::string column = config.value("column", "id");
  try {
    auto shard = traintl::get_dataset_shard(config.value("dataset", "train"));
    for (int epoch = 0; epoch < config.value("epochs", 1); ++epoch) {
      shard.set_epoch(epoch);
      traintl::IterOptions options;
      options.shuffle = config.value("shuffle", false);
      options.seed = config.value("seed", 0);
      options.drop_last = config.value("drop_last", false);
      int64_t rows = 0, batches = 0;
      std::vector<int64_t> ids;
      for (const traintl::Batch& batch :
           shard.iter_batches(config.value("batch_size", 16), options)) {
        ++batches;
        rows += batch.num_rows();
        const int64_t* v = batch[column].data<int64_t>();
        ids.insert(ids.end(), v, v + batch.num_rows());
      }
      traintl::report({{"epoch", epoch},
                       {"rank", ctx.world_rank()},
                       {"rows", rows},
                       {"batches", batches},
                       {"ids", ids},
                       {"num_rows", shard.num_rows().value_or(-1)}});
    }
  } catch (const traintl::DatasetError& e) {
    if (!config.value("catch", false)) throw;
    traintl::report({{"error", e.what()}, {"retryable", e.retryable()}});
  }
}

}  // namespace

TRAINTL_ENTRYPOINT(train_loop)
