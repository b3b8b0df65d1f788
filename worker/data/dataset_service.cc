#include "worker/data/dataset_service.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "common/json_depth.h"
#include "worker/data/batch_reader.h"
#include "worker/data/dataset.h"

// The opaque handles of the ABI.
struct traintl_dataset_shard {
  std::string name;
  std::shared_ptr<traintl::data::Dataset> dataset;
  bool inline_items = false;  // read from the spec's "items" (its file is a memfd)
  std::mutex mu;
  std::string info;  // guarded by mu: the last shard_info text
};

struct traintl_batch_iter {
  std::string name;
  std::unique_ptr<traintl::data::BatchReader> reader;
  std::shared_ptr<const traintl::data::Schema> schema;
};

namespace traintl {
namespace data {
namespace {

using nlohmann::json;

int ContextInt(const json& context, const char* key, int fallback) {
  auto it = context.find(key);
  return it != context.end() && it->is_number_integer() ? it->get<int>() : fallback;
}

std::string ContextString(const json& context, const char* key) {
  auto it = context.find(key);
  return it != context.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The options object of a call: NULL/"" is {}; unknown keys are refused, by name.
Result<json> ParseOptions(const char* text, const std::set<std::string>& known, const char* what) {
  if (text == nullptr || *text == '\0') return json::object();
  json j = ParseJsonBounded(text);
  if (j.is_discarded() || !j.is_object()) {
    return Status::InvalidArgument(std::string(what) + " options must be a JSON object");
  }
  for (const auto& item : j.items()) {
    if (!known.count(item.key())) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return Status::InvalidArgument(std::string("unknown ") + what + " option '" + item.key() +
                                     "' (this worker knows " + list + ")");
    }
  }
  return j;
}

template <typename T>
Status Get(const json& j, const char* key, T* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  try {
    *out = it->get<T>();
  } catch (const std::exception&) {
    return Status::InvalidArgument(std::string("option '") + key +
                                   "' has the wrong type: " + it->dump());
  }
  return Status::Ok();
}

Result<std::map<std::string, DType>> ParseColumnTypes(const json& j) {
  std::map<std::string, DType> out;
  auto it = j.find("column_types");
  if (it == j.end() || it->is_null()) return out;
  if (!it->is_object()) return Status::InvalidArgument("column_types must be an object");
  for (const auto& item : it->items()) {
    auto d =
        item.value().is_string() ? DTypeFromName(item.value().get<std::string>()) : std::nullopt;
    if (!d) {
      return Status::InvalidArgument("column_types['" + item.key() +
                                     "'] must be one of float64, "
                                     "float32, int64, int32, string; got " +
                                     item.value().dump());
    }
    out[item.key()] = *d;
  }
  return out;
}

json SchemaJson(const Schema& schema) {
  json cols = json::array();
  for (const auto& c : schema) {
    cols.push_back({{"name", c.name}, {"dtype", DTypeName(c.dtype)}, {"shape", c.shape}});
  }
  return cols;
}

void CopyMessage(const std::string& message, char* buf, size_t len) {
  if (buf == nullptr || len == 0) return;
  const size_t n = std::min(message.size(), len - 1);
  std::memcpy(buf, message.data(), n);
  buf[n] = '\0';
}

}  // namespace

struct DatasetService::BatchHolder {
  traintl_batch batch;
  std::unique_ptr<RowBlock> block;
  std::weak_ptr<FreeList<RowBlock>> pool;  // the reader's, for the block's memory
  std::shared_ptr<const Schema> schema;    // owns the names and shapes columns point at
  std::vector<traintl_column> columns;
};

DatasetService::DatasetService(nlohmann::json context, const std::atomic<bool>* cancel)
    : context_(std::move(context)), cancel_(cancel) {
  std::memset(&api_, 0, sizeof api_);
  api_.struct_size = sizeof(traintl_dataset_api);
  api_.ctx = this;
  api_.shard_open = &DatasetService::ShardOpen;
  api_.shard_info = &DatasetService::ShardInfo;
  api_.shard_close = &DatasetService::ShardClose;
  api_.iter_open = &DatasetService::IterOpen;
  api_.iter_next = &DatasetService::IterNext;
  api_.iter_close = &DatasetService::IterClose;
  api_.batch_release = &DatasetService::BatchRelease;
}

DatasetService::~DatasetService() {
  for (const auto& [name, fd] : inline_fds_) ::close(fd);
}

Result<std::string> DatasetService::InlineItemsUri(const std::string& name, const json& items) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = inline_fds_.find(name);
  if (it == inline_fds_.end()) {
    const int fd = ::memfd_create(("traintl-items-" + name).c_str(), MFD_CLOEXEC);
    if (fd < 0) {
      return Status::Unavailable(std::string("cannot hold the inline items in memory: ") +
                                 std::strerror(errno));
    }
    std::string text;
    for (const json& item : items) text += item.dump() + "\n";
    for (size_t off = 0; off < text.size();) {
      const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int e = errno;
        ::close(fd);
        return Status::Unavailable(std::string("cannot hold the inline items in memory: ") +
                                   std::strerror(e));
      }
      off += static_cast<size_t>(n);
    }
    it = inline_fds_.emplace(name, fd).first;
  }
  // Opened by path, like any file: the reader needs nothing else.
  return "file:///proc/self/fd/" + std::to_string(it->second);
}

std::string DatasetService::bad_data_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bad_data_error_;
}

int DatasetService::Fail(const Status& status, char* err, size_t err_len) {
  CopyMessage(status.message(), err, err_len);
  const bool transient = status.code() == Status::Code::kUnavailable ||
                         status.code() == Status::Code::kResourceExhausted;
  if (transient) return TRAINTL_DATA_UNAVAILABLE;
  std::lock_guard<std::mutex> lock(mu_);
  if (bad_data_error_.empty()) bad_data_error_ = status.message();
  return TRAINTL_DATA_BAD;
}

int DatasetService::ShardOpen(void* ctx, const char* name, const char* options_json,
                              traintl_dataset_shard** shard, char* err, size_t err_len) {
  auto* self = static_cast<DatasetService*>(ctx);
  const std::string ds_name = name != nullptr ? name : "";
  const std::string prefix = "dataset '" + ds_name + "': ";
  try {
    auto datasets = self->context_.find("datasets");
    const json* spec = nullptr;
    if (datasets != self->context_.end() && datasets->is_object()) {
      auto it = datasets->find(ds_name);
      if (it != datasets->end()) spec = &*it;
    }
    if (spec == nullptr || !spec->is_object()) {
      std::string names;
      if (datasets != self->context_.end() && datasets->is_object()) {
        for (const auto& item : datasets->items()) {
          names += (names.empty() ? "'" : ", '") + item.key() + "'";
        }
      }
      return self->Fail(
          Status::InvalidArgument(
              "no dataset '" + ds_name + "' in the job spec's \"datasets\" (" +
              (names.empty() ? std::string("it names none") : "it names " + names) + ")"),
          err, err_len);
    }
    auto opts = ParseOptions(
        options_json,
        {"column_names", "column_types", "infer_rows", "chunk_bytes", "http_timeout_s"}, "shard");
    if (!opts.ok())
      return self->Fail(Status::InvalidArgument(prefix + opts.status().message()), err, err_len);
    ShardOptions options;
    Status st = Get(*opts, "column_names", &options.column_names);
    if (st.ok()) st = Get(*opts, "infer_rows", &options.infer_rows);
    if (st.ok()) st = Get(*opts, "chunk_bytes", &options.chunk_bytes);
    if (st.ok()) st = Get(*opts, "http_timeout_s", &options.http.timeout_s);
    // Outside this range the timeout would be none at all (0, negative, NaN, under a
    // millisecond) or overflow its conversion to milliseconds.
    if (st.ok() && !(options.http.timeout_s >= 0.001 && options.http.timeout_s <= 86400)) {
      st = Status::InvalidArgument("http_timeout_s: must be between 0.001 and 86400 seconds");
    }
    if (st.ok()) {
      auto types = ParseColumnTypes(*opts);
      if (types.ok()) {
        options.column_types = std::move(types).value();
      } else {
        st = types.status();
      }
    }
    if (!st.ok()) return self->Fail(Status::InvalidArgument(prefix + st.message()), err, err_len);
    // The ranks of a node share the row index (index_cache.h): one scans each file. The
    // agent names a node-wide directory, which later jobs reuse; a context without one
    // (a worker started by hand) shares within the trial.
    const std::string node_dir = ContextString(self->context_, "data_index_dir");
    const std::string trial_dir = ContextString(self->context_, "trial_dir");
    if (!node_dir.empty()) {
      options.index_dir = node_dir;
    } else if (!trial_dir.empty()) {
      options.index_dir = trial_dir + "/.data_index";
    }

    DatasetConfig config;
    config.name = ds_name;
    config.uri = spec->value("uri", "");
    auto items = spec->find("items");
    const bool from_items = items != spec->end() && items->is_array();
    if (from_items) {
      auto uri = self->InlineItemsUri(ds_name, *items);
      if (!uri.ok())
        return self->Fail(Status(uri.status().code(), prefix + uri.status().message()), err,
                          err_len);
      config.uri = *uri;
    }
    auto format = spec->find("format");
    if (format != spec->end() && format->is_string()) config.format = format->get<std::string>();
    auto split = spec->find("split");
    config.split =
        split != spec->end() && split->is_boolean() ? split->get<bool>() : ds_name == "train";
    config.rank = ContextInt(self->context_, "world_rank", 0);
    config.world_size = ContextInt(self->context_, "world_size", 1);
    auto ds = Dataset::Open(config, options, self->cancel_);
    if (!ds.ok()) {
      return self->Fail(Status(ds.status().code(), prefix + ds.status().message()), err, err_len);
    }
    auto* handle = new traintl_dataset_shard;
    handle->name = ds_name;
    handle->inline_items = from_items;
    handle->dataset = std::move(ds).value();
    *shard = handle;
    return TRAINTL_DATA_OK;
  } catch (const std::exception& e) {
    return self->Fail(Status::ResourceExhausted(prefix + e.what()), err, err_len);
  }
}

const char* DatasetService::ShardInfo(void* ctx, traintl_dataset_shard* shard) {
  (void)ctx;
  try {
    const Dataset& ds = *shard->dataset;
    const DatasetConfig& c = ds.config();
    json files = json::array();
    if (!shard->inline_items) {
      for (const auto& f : ds.files()) files.push_back(f.file.name);
    }
    const auto total = ds.TotalRows();
    // Inline items have no URI a user could open: their memfd is this process's own.
    json info = {{"name", shard->name},
                 {"uri", shard->inline_items ? json(nullptr) : json(c.uri)},
                 {"format", FormatName(ds.format())},
                 {"files", files},
                 {"split", c.split},
                 {"rank", c.rank},
                 {"world_size", c.world_size},
                 {"columns", SchemaJson(ds.schema())},
                 {"total_rows", total ? json(*total) : json()},
                 {"num_rows", total ? json(RowsPerRank(*total, c.world_size, c.split)) : json()}};
    std::lock_guard<std::mutex> lock(shard->mu);
    shard->info = info.dump(-1, ' ', false, json::error_handler_t::replace);
    return shard->info.c_str();
  } catch (const std::exception&) {
    return "{}";
  }
}

void DatasetService::ShardClose(void* ctx, traintl_dataset_shard* shard) {
  (void)ctx;
  delete shard;
}

int DatasetService::IterOpen(void* ctx, traintl_dataset_shard* shard, const char* options_json,
                             traintl_batch_iter** iter, char* err, size_t err_len) {
  auto* self = static_cast<DatasetService*>(ctx);
  const std::string prefix = "dataset '" + shard->name + "': ";
  try {
    auto opts = ParseOptions(
        options_json,
        {"batch_size", "drop_last", "shuffle", "seed", "epoch", "columns", "column_types",
         "prefetch_batches", "shuffle_buffer_rows", "num_threads", "block_bytes"},
        "iteration");
    if (!opts.ok())
      return self->Fail(Status::InvalidArgument(prefix + opts.status().message()), err, err_len);
    IterOptions o;
    Status st = Get(*opts, "batch_size", &o.batch_size);
    if (st.ok()) st = Get(*opts, "drop_last", &o.drop_last);
    if (st.ok()) st = Get(*opts, "shuffle", &o.shuffle);
    if (st.ok()) st = Get(*opts, "seed", &o.seed);
    if (st.ok()) st = Get(*opts, "epoch", &o.epoch);
    if (st.ok()) st = Get(*opts, "columns", &o.columns);
    if (st.ok()) st = Get(*opts, "prefetch_batches", &o.prefetch_batches);
    if (st.ok()) st = Get(*opts, "shuffle_buffer_rows", &o.shuffle_buffer_rows);
    if (st.ok()) st = Get(*opts, "num_threads", &o.num_threads);
    if (st.ok()) st = Get(*opts, "block_bytes", &o.block_bytes);
    if (st.ok()) {
      auto types = ParseColumnTypes(*opts);
      if (types.ok()) {
        o.column_types = std::move(types).value();
      } else {
        st = types.status();
      }
    }
    if (!st.ok()) return self->Fail(Status::InvalidArgument(prefix + st.message()), err, err_len);
    if (o.num_threads == 0) {
      // The ranks of a node share its cores.
      const int local = std::max(1, ContextInt(self->context_, "local_world_size", 1));
      const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      o.num_threads = std::max(1, std::min(4, hw / local));
    }
    auto reader = BatchReader::Start(shard->dataset, o);
    if (!reader.ok()) {
      return self->Fail(Status(reader.status().code(), prefix + reader.status().message()), err,
                        err_len);
    }
    auto* handle = new traintl_batch_iter;
    handle->name = shard->name;
    handle->schema = std::make_shared<const Schema>((*reader)->schema());
    handle->reader = std::move(reader).value();
    *iter = handle;
    return TRAINTL_DATA_OK;
  } catch (const std::exception& e) {
    return self->Fail(Status::ResourceExhausted(prefix + e.what()), err, err_len);
  }
}

int DatasetService::IterNext(void* ctx, traintl_batch_iter* iter, const traintl_batch** batch,
                             char* err, size_t err_len) {
  auto* self = static_cast<DatasetService*>(ctx);
  const std::string prefix = "dataset '" + iter->name + "': ";
  try {
    auto next = iter->reader->Next();
    if (!next.ok()) {
      return self->Fail(Status(next.status().code(), prefix + next.status().message()), err,
                        err_len);
    }
    if (!*next) return TRAINTL_DATA_END;
    auto holder = std::make_unique<BatchHolder>();
    holder->block = std::move(next).value();
    holder->pool = iter->reader->batch_pool();
    holder->schema = iter->schema;
    const Schema& schema = *holder->schema;
    holder->columns.resize(schema.size());
    for (size_t i = 0; i < schema.size(); ++i) {
      traintl_column& c = holder->columns[i];
      const ColumnData& data = holder->block->columns[i];
      c.name = schema[i].name.c_str();
      c.dtype = static_cast<int32_t>(schema[i].dtype);
      c.ndim = static_cast<int32_t>(schema[i].shape.size());
      c.shape = schema[i].shape.empty() ? nullptr : schema[i].shape.data();
      c.data = data.values.data();
      c.offsets = schema[i].dtype == DType::kString ? data.Offsets() : nullptr;
    }
    traintl_batch& b = holder->batch;
    b.struct_size = sizeof(traintl_batch);
    b.column_struct_size = sizeof(traintl_column);
    b.num_rows = holder->block->num_rows;
    b.num_columns = static_cast<int64_t>(holder->columns.size());
    b.columns = holder->columns.data();
    *batch = &b;
    std::lock_guard<std::mutex> lock(self->mu_);
    self->batches_.emplace(&b, std::move(holder));
    return TRAINTL_DATA_OK;
  } catch (const std::exception& e) {
    return self->Fail(Status::ResourceExhausted(prefix + e.what()), err, err_len);
  }
}

void DatasetService::IterClose(void* ctx, traintl_batch_iter* iter) {
  (void)ctx;
  delete iter;
}

void DatasetService::BatchRelease(void* ctx, const traintl_batch* batch) {
  auto* self = static_cast<DatasetService*>(ctx);
  std::unique_ptr<BatchHolder> holder;
  {
    std::lock_guard<std::mutex> lock(self->mu_);
    auto it = self->batches_.find(batch);
    if (it == self->batches_.end()) return;
    holder = std::move(it->second);
    self->batches_.erase(it);
  }
  if (auto pool = holder->pool.lock()) BatchReader::GiveBack(pool.get(), std::move(*holder->block));
}

}  // namespace data
}  // namespace traintl
