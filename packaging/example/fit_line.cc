// fit_line: a training library without LibTorch. Every rank fits y = w*x + b to its
// shard of a synthetic data set by gradient descent, reports its loss each epoch with a
// checkpoint, and resumes from the latest checkpoint when the job restarts.
//
// train_loop_config: epochs (5), lr (0.05).
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include <traintl/train.h>

namespace {

struct Params {
  double w = 0.0;
  double b = 0.0;
  int epoch = -1;  // the last finished epoch
};

Params Restore() {
  Params p;
  if (auto ckpt = traintl::get_checkpoint()) {
    std::ifstream in(ckpt->path() + "/params.json");
    if (!in) throw std::runtime_error("checkpoint without params.json: " + ckpt->path());
    nlohmann::json j = nlohmann::json::parse(in);
    p.w = j.at("w").get<double>();
    p.b = j.at("b").get<double>();
    p.epoch = j.at("epoch").get<int>();
  }
  return p;
}

std::string SaveCheckpoint(const Params& p, int rank) {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/fit_line_" +
                    std::to_string(rank) + "_XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) throw std::runtime_error("mkdtemp " + dir);
  if (rank == 0) {  // the ranks' files are merged into one checkpoint
    std::ofstream out(dir + "/params.json");
    out << nlohmann::json{{"w", p.w}, {"b", p.b}, {"epoch", p.epoch}}.dump();
    if (!out.flush()) throw std::runtime_error("cannot write " + dir);
  }
  return dir;
}

void train_loop(const nlohmann::json& config) {
  const traintl::Context ctx = traintl::get_context();
  const int epochs = config.value("epochs", 5);
  const double lr = config.value("lr", 0.05);
  Params p = Restore();
  for (int epoch = p.epoch + 1; epoch < epochs; ++epoch) {
    double loss = 0;
    for (int step = 0; step < 50; ++step) {
      // Full-batch gradient of the mean squared error over this rank's shard.
      const int n = 64;
      double gw = 0, gb = 0;
      loss = 0;
      for (int i = ctx.world_rank(); i < n * ctx.world_size(); i += ctx.world_size()) {
        double x = static_cast<double>(i) / (n * ctx.world_size());
        double err = p.w * x + p.b - (3.0 * x + 1.0);  // the line to find
        loss += err * err / n;
        gw += 2 * err * x / n;
        gb += 2 * err / n;
      }
      p.w -= lr * gw;
      p.b -= lr * gb;
    }
    p.epoch = epoch;
    std::string dir = SaveCheckpoint(p, ctx.world_rank());
    traintl::report({{"epoch", epoch}, {"loss", loss}, {"w", p.w}, {"b", p.b}},
                    traintl::Checkpoint::from_directory(dir));
    std::filesystem::remove_all(dir);  // report() has copied it
    if (traintl::should_stop()) return;
  }
}

}  // namespace

TRAINTL_ENTRYPOINT(train_loop)
