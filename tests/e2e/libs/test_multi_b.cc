// The second entry point of libtest_multi.so, in its own translation unit.
#include <traintl/train.h>

namespace {

void train_b(const nlohmann::json& config) {
  traintl::log_message(TRAINTL_LOG_INFO, "train_b running");
  traintl::report({{"fn", "train_b"}, {"config", config}});
}

}  // namespace

TRAINTL_ENTRYPOINT(train_b)
