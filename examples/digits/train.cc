// Data-parallel training of an MLP on the UCI optical digits (8x8 images, 10 classes), the
// traintl quickstart. Build: the `digits_train` target (libdigits_train.so); data:
// examples/digits/fetch_data.sh <dir>; run: traintl submit examples/digits/job.json.
//
// The data is the job spec's dataset "digits" (a CSV without a header row: 64 pixel values
// 0..16, then the label), read with split: false, so every rank gets every row.
// train_loop_config: {"lr": 0.01, "epochs": 20, "batch_size": 32, "seed": 0, "hidden": 128,
//                     "split_seed": 0}
// The rows are shuffled with a fixed seed (split_seed, default 0), then the last 20% are the
// validation set: the same on every rank and attempt. (The file is ordered by writer, so its
// own last 20% would test on writers never seen in training.)
// Every epoch ends with a checkpoint (model.pt, optimizer.pt, epoch.txt) and a report of
// loss, val_accuracy and epoch; a restarted attempt resumes after the checkpoint's epoch.
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <traintl/torch.h>
#include <traintl/train.h>

namespace {

constexpr int kFeatures = 64;
constexpr int kClasses = 10;

struct Digits {
  torch::Tensor features;  // [N, 64] float in [0, 1]
  torch::Tensor labels;    // [N] int64
};

// Every row of the dataset "digits", through the worker's dataset reader.
Digits LoadDigits() {
  traintl::ShardOptions shard_options;  // the file has no header row: name the columns
  for (int i = 0; i < kFeatures; ++i) shard_options.column_names.push_back("p" + std::to_string(i));
  shard_options.column_names.push_back("label");
  auto shard = traintl::get_dataset_shard("digits", shard_options);
  traintl::torch::TorchBatchOptions options;
  options.dtype = torch::kFloat32;
  options.dtypes = {{"label", torch::kInt64}};
  options.device = torch::Device(torch::kCPU);
  std::vector<torch::Tensor> features, labels;
  for (auto& batch : traintl::torch::iter_torch_batches(shard, 512, options)) {
    std::vector<torch::Tensor> pixels;
    for (int i = 0; i < kFeatures; ++i) pixels.push_back(batch.at("p" + std::to_string(i)));
    features.push_back(torch::stack(pixels, 1) / 16.0f);
    labels.push_back(batch.at("label"));
  }
  if (features.empty()) throw std::runtime_error("dataset 'digits' has no rows");
  return {torch::cat(features), torch::cat(labels)};
}

class DigitsDataset : public torch::data::datasets::Dataset<DigitsDataset> {
 public:
  DigitsDataset(torch::Tensor features, torch::Tensor labels)
      : features_(std::move(features)), labels_(std::move(labels)) {}
  torch::data::Example<> get(size_t index) override {
    return {features_[static_cast<int64_t>(index)], labels_[static_cast<int64_t>(index)]};
  }
  torch::optional<size_t> size() const override { return static_cast<size_t>(labels_.size(0)); }

 private:
  torch::Tensor features_, labels_;
};

struct DigitsNetImpl : torch::nn::Module {
  explicit DigitsNetImpl(int hidden)
      : fc1(register_module("fc1", torch::nn::Linear(kFeatures, hidden))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, hidden))),
        out(register_module("out", torch::nn::Linear(hidden, kClasses))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc1(x));
    x = torch::relu(fc2(x));
    return out(x);
  }
  torch::nn::Linear fc1, fc2, out;
};
TORCH_MODULE(DigitsNet);

int ReadEpoch(const std::string& dir) {
  std::ifstream in(dir + "/epoch.txt");
  int epoch = -1;
  if (!(in >> epoch)) throw std::runtime_error("checkpoint " + dir + " has no epoch.txt");
  return epoch;
}

std::string MakeTempDir() {
  const char* base = getenv("TMPDIR");
  std::string pattern =
      std::string(base != nullptr && *base ? base : "/tmp") + "/digits-ckpt-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  return pattern;
}

double Accuracy(DigitsNet& model, const torch::Tensor& features, const torch::Tensor& labels) {
  torch::NoGradGuard no_grad;
  model->eval();
  auto predicted = model->forward(features).argmax(1);
  model->train();
  return predicted.eq(labels).to(torch::kDouble).mean().item<double>();
}

void train_loop(const nlohmann::json& config) {
  const double lr = config.value("lr", 0.01);
  const int epochs = config.value("epochs", 20);
  const int batch_size = config.value("batch_size", 32);
  const int seed = config.value("seed", 0);
  const int hidden = config.value("hidden", 128);
  const int split_seed = config.value("split_seed", 0);

  const auto ctx = traintl::get_context();
  const auto device = traintl::torch::get_device();
  torch::manual_seed(seed);

  Digits all = LoadDigits();
  const int64_t n = all.labels.size(0);
  const auto order = torch::randperm(n, at::detail::createCPUGenerator(split_seed), torch::kLong);
  all.features = all.features.index_select(0, order);
  all.labels = all.labels.index_select(0, order);
  const int64_t n_val = n / 5;
  const int64_t n_train = n - n_val;
  auto val_x = all.features.slice(0, n_train).to(device);
  auto val_y = all.labels.slice(0, n_train).to(device);
  DigitsDataset train_set(all.features.slice(0, 0, n_train), all.labels.slice(0, 0, n_train));

  auto model = traintl::torch::prepare_model(DigitsNet(hidden));
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(lr));
  int start_epoch = 0;
  if (auto checkpoint = traintl::get_checkpoint()) {
    torch::load(model, checkpoint->path() + "/model.pt");
    torch::load(optimizer, checkpoint->path() + "/optimizer.pt");
    start_epoch = ReadEpoch(checkpoint->path()) + 1;
  }

  auto loader = traintl::torch::prepare_data_loader(
      std::move(train_set), {.batch_size = batch_size, .shuffle = true, .seed = seed});
  for (int epoch = start_epoch; epoch < epochs; ++epoch) {
    loader.set_epoch(epoch);
    auto loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble));
    int64_t batches = 0;
    for (auto& batch : loader) {
      optimizer.zero_grad();
      auto loss = torch::nn::functional::cross_entropy(model->forward(batch.data), batch.target);
      loss.backward();
      optimizer.step();
      loss_sum += loss.detach().to(torch::kCPU, torch::kDouble);
      ++batches;
    }
    // The mean of the ranks' mean losses: every rank has the same number of batches.
    auto mean_loss = loss_sum / static_cast<double>(std::max<int64_t>(batches, 1));
    traintl::torch::process_group().allreduce(mean_loss, traintl::torch::ReduceOp::kAvg);
    const double val_accuracy = Accuracy(model, val_x, val_y);
    const nlohmann::json metrics = {
        {"loss", mean_loss.item<double>()}, {"val_accuracy", val_accuracy}, {"epoch", epoch}};
    // Parameters are identical on every rank, so rank 0's files are the checkpoint.
    if (ctx.world_rank() == 0) {
      const std::string dir = MakeTempDir();
      torch::save(model, dir + "/model.pt");
      torch::save(optimizer, dir + "/optimizer.pt");
      std::ofstream(dir + "/epoch.txt") << epoch << "\n";
      traintl::report(metrics, traintl::Checkpoint::from_directory(dir));
      std::filesystem::remove_all(dir);  // report() has copied the files
    } else {
      traintl::report(metrics);
    }
    if (traintl::should_stop()) return;
  }
}

}  // namespace

TRAINTL_ENTRYPOINT(train_loop)
