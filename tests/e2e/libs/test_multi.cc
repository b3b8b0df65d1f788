// libtest_multi.so: two entry points, for choosing one by name (and the error when none is
// named). Each reports {"fn": <its name>} once. train_b is in a second file on purpose.
#include <traintl/train.h>

namespace {

void train_a(const nlohmann::json& config) { traintl::report({{"fn", "train_a"}}); }

}  // namespace

TRAINTL_ENTRYPOINT(train_a)
