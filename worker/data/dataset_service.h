// DatasetService: the host side of the dataset part of the C ABI (traintl_dataset_api in
// traintl/abi.h), over Dataset and BatchReader. traintl-worker points
// traintl_host_api.datasets at one; so can any other host of training libraries (a test's
// fake host) from the same context object.
//
// Errors: a call that fails because of the data or the request returns TRAINTL_DATA_BAD,
// and the first such message is remembered (bad_data_error()) so that the worker can end a
// failing attempt as not retryable; I/O and network failures return
// TRAINTL_DATA_UNAVAILABLE. Messages start with "dataset '<name>': ".
//
// Thread-safety: every callback may be called from any thread. One iterator is used by one
// thread at a time; shards and batches may be shared.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "traintl/abi.h"

namespace traintl {
namespace data {

class DatasetService {
 public:
  // `context`: the worker context object (docs/WORKER_PROTOCOL.md); this reads its
  // "datasets", "world_rank", "world_size", "local_world_size", and "data_index_dir" (the
  // node's row index directory, index_cache.h) or else "trial_dir" (then the index is
  // shared in <trial_dir>/.data_index).
  // `cancel` (may be null; must outlive this object) is the rank's stop: once true, an
  // HTTP wait of shard_open (reading heads, counting rows) fails soon, so a job stopped
  // while its ranks open a large remote dataset does not wait for the scan.
  explicit DatasetService(nlohmann::json context, const std::atomic<bool>* cancel = nullptr);
  ~DatasetService();
  DatasetService(const DatasetService&) = delete;
  DatasetService& operator=(const DatasetService&) = delete;

  // Lives as long as this object.
  const traintl_dataset_api* api() const { return &api_; }

  // The message of the first call that failed with TRAINTL_DATA_BAD; empty when none did.
  std::string bad_data_error() const;

 private:
  struct BatchHolder;

  static int ShardOpen(void* ctx, const char* name, const char* options_json,
                       traintl_dataset_shard** shard, char* err, size_t err_len);
  static const char* ShardInfo(void* ctx, traintl_dataset_shard* shard);
  static void ShardClose(void* ctx, traintl_dataset_shard* shard);
  static int IterOpen(void* ctx, traintl_dataset_shard* shard, const char* options_json,
                      traintl_batch_iter** iter, char* err, size_t err_len);
  static int IterNext(void* ctx, traintl_batch_iter* iter, const traintl_batch** batch, char* err,
                      size_t err_len);
  static void IterClose(void* ctx, traintl_batch_iter* iter);
  static void BatchRelease(void* ctx, const traintl_batch* batch);

  // Maps a failed Status to a TRAINTL_DATA_* code, fills err, remembers bad data.
  int Fail(const Status& status, char* err, size_t err_len);
  // A dataset's inline items ("items" in the job spec) as a JSONL file in memory (a memfd,
  // written once per dataset and kept open while this object lives, gone with the
  // process): the URI the ordinary reader opens.
  Result<std::string> InlineItemsUri(const std::string& name, const nlohmann::json& items);

  const nlohmann::json context_;
  const std::atomic<bool>* const cancel_;  // the rank's stop; may be null
  traintl_dataset_api api_;
  mutable std::mutex mu_;
  std::string bad_data_error_ TRAINTL_GUARDED_BY(mu_);
  std::unordered_map<const traintl_batch*, std::unique_ptr<BatchHolder>> batches_
      TRAINTL_GUARDED_BY(mu_);
  std::unordered_map<std::string, int> inline_fds_ TRAINTL_GUARDED_BY(mu_);  // name -> memfd
};

}  // namespace data
}  // namespace traintl
