// A fake worker host for SDK-level tests: the context and the datasets of the C ABI, served
// by a DatasetService as traintl-worker serves them.
#pragma once

#include <cstddef>
#include <cstring>
#include <string>

#include <traintl/train.h>
#include <nlohmann/json.hpp>

#include "worker/data/dataset_service.h"

namespace traintl {
namespace data {
namespace testing {

// Points the SDK at a host serving `datasets` as rank `rank` of `world`.
class FakeHost {
 public:
  FakeHost(const nlohmann::json& datasets, int rank = 0, int world = 1, bool with_datasets = true)
      : context_({{"world_rank", rank}, {"world_size", world}, {"datasets", datasets}}),
        text_(context_.dump()),
        service_(context_) {
    std::memset(&api_, 0, sizeof api_);
    api_.struct_size = sizeof api_;
    api_.abi_version = TRAINTL_ABI_VERSION;
    api_.host = this;
    api_.get_context_json = [](void* h) { return static_cast<FakeHost*>(h)->text_.c_str(); };
    if (with_datasets) {
      api_.datasets = service_.api();
    } else {  // a host built before datasets existed
      api_.struct_size = offsetof(traintl_host_api, datasets);
    }
    traintl::internal::current_host_api = &api_;
  }
  ~FakeHost() { traintl::internal::current_host_api = nullptr; }

 private:
  nlohmann::json context_;
  std::string text_;
  traintl::data::DatasetService service_;
  traintl_host_api api_;
};

}  // namespace testing
}  // namespace data
}  // namespace traintl
