// DMatrix, Booster, parameters and the helpers of internal.h.
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xgboost/c_api.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "traintl/xgboost.h"
#include "worker/xgboost/internal.h"

namespace traintl {
namespace xgboost {
namespace internal {

std::string CleanMessage(const std::string& text) {
  std::string s = text;
  // XGBoost appends the C++ stack trace of its LOG(FATAL): noise in a job's status.
  const size_t trace = s.find("Stack trace:");
  if (trace != std::string::npos) s.erase(trace);
  auto trim = [](std::string* t) {
    size_t b = 0;
    while (b < t->size() && std::isspace(static_cast<unsigned char>((*t)[b]))) ++b;
    size_t e = t->size();
    while (e > b && std::isspace(static_cast<unsigned char>((*t)[e - 1]))) --e;
    *t = t->substr(b, e - b);
  };
  trim(&s);
  // "[03:36:01] ./src/objective/objective.cc:26: Unknown objective ...": the time and the
  // source location say nothing to the user.
  if (!s.empty() && s[0] == '[') {
    const size_t close = s.find("] ");
    if (close != std::string::npos && close < 16) s.erase(0, close + 2);
  }
  const size_t colon_space = s.find(": ");
  if (colon_space != std::string::npos && s.find(' ') > colon_space) {
    const std::string location = s.substr(0, colon_space);
    const size_t line_colon = location.rfind(':');
    if (line_colon != std::string::npos && line_colon + 1 < location.size() &&
        location.find_first_not_of("0123456789", line_colon + 1) == std::string::npos &&
        location.find('/') != std::string::npos) {
      s.erase(0, colon_space + 2);
    }
  }
  std::string out;
  bool pending_break = false;
  for (char c : s) {
    if (c == '\n' || c == '\r') {
      pending_break = true;
      continue;
    }
    if (pending_break) {
      out += "; ";
      pending_break = false;
    }
    out += c;
  }
  return out;
}

void Check(int rc, const char* call, const std::string& what) {
  if (rc == 0) return;
  const char* last = XGBGetLastError();
  std::string message = call;
  if (!what.empty()) message += " (" + what + ")";
  message += ": " + CleanMessage(last != nullptr ? last : "unknown error");
  throw Error(message);
}

[[noreturn]] void ThrowBadData(const std::string& message) {
  // The C ABI has no call that marks an attempt's failure as not retryable: the worker
  // ends a failing attempt so when one of its dataset calls failed with TRAINTL_DATA_BAD
  // ("the data or the request is wrong; retrying cannot help"). Data that XGBoost cannot
  // train on is found here, after the worker read it without complaint, so it is made
  // known the same way: by a dataset request the worker refuses as bad (a dataset without
  // a name). Its answer is not needed; the message the user sees is this exception's.
  const traintl_host_api* api = traintl::internal::current_host_api;
  if (api != nullptr && TRAINTL_HOST_API_HAS(api, datasets) && api->datasets != nullptr) {
    const traintl_dataset_api* d = api->datasets;
    traintl_dataset_shard* shard = nullptr;
    char err[256] = {0};
    if (d->shard_open(d->ctx, "", "{}", &shard, err, sizeof err) == TRAINTL_DATA_OK &&
        shard != nullptr) {
      d->shard_close(d->ctx, shard);
    }
  }
  throw DatasetError(message, false);
}

void RequireCollective(const char* who) {
  if (traintl::internal::current_host_api == nullptr) return;  // not in a job: one process
  const int world = get_context().world_size();
  if (world > 1 && XGCommunicatorIsDistributed() == 0) {
    throw std::logic_error(
        std::string(who) + ": the job has " + std::to_string(world) +
        " ranks but no traintl::xgboost::Collective is alive on this thread; create one at the "
        "start of the training function, before the first DMatrix");
  }
}

namespace {

[[noreturn]] void ThrowErrno(const std::string& what, const std::string& path) {
  throw std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}

void WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      ThrowErrno("cannot write", path);
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace

void WriteFile(const std::string& path, const std::string& data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) ThrowErrno("cannot create", path);
  try {
    WriteAll(fd, data, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) ThrowErrno("cannot write", path);
}

void WriteFileAtomic(const std::string& path, const std::string& data) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) ThrowErrno("cannot create", tmp);
  try {
    WriteAll(fd, data, tmp);
    if (::fsync(fd) != 0) ThrowErrno("cannot fsync", tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    ::unlink(tmp.c_str());
    errno = saved;
    ThrowErrno("cannot write", path);
  }
  // The rename is durable once the directory is.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

std::string ReadFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) ThrowErrno("cannot open", path);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int saved = errno;
      ::close(fd);
      errno = saved;
      ThrowErrno("cannot read", path);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

TempDir::TempDir(const std::string& parent, const std::string& prefix) {
  std::string base = parent;
  if (base.empty()) {
    const char* env = ::getenv("TMPDIR");
    base = env != nullptr && *env != '\0' ? env : "/tmp";
  }
  std::string tmpl = base + "/" + prefix + "XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) ThrowErrno("cannot create a directory in", base);
  path_ = tmpl;
}

TempDir::~TempDir() {
  // Flat: train() writes only files here.
  if (DIR* d = ::opendir(path_.c_str())) {
    while (struct dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      ::unlink((path_ + "/" + e->d_name).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(path_.c_str());
}

}  // namespace internal

using internal::Check;

Params ParamsFromJson(const nlohmann::json& object) {
  if (!object.is_object()) {
    throw std::invalid_argument("traintl::xgboost::ParamsFromJson: expected a JSON object, got " +
                                std::string(object.type_name()));
  }
  Params params;
  auto text = [](const std::string& key, const nlohmann::json& v) -> std::string {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
    if (v.is_number()) return v.dump();
    throw std::invalid_argument("traintl::xgboost::ParamsFromJson: parameter '" + key +
                                "' must be a string, number or boolean, got " + v.dump());
  };
  for (const auto& item : object.items()) {
    if (item.value().is_null()) continue;
    if (item.value().is_array()) {
      for (const auto& v : item.value()) params.emplace_back(item.key(), text(item.key(), v));
    } else {
      params.emplace_back(item.key(), text(item.key(), item.value()));
    }
  }
  return params;
}

const char* ModelExtension(ModelFormat format) {
  return format == ModelFormat::kJson ? "json" : "ubj";
}

// ---- DMatrix ----------------------------------------------------------------------------

DMatrix::DMatrix(void* handle) : handle_(handle) {}

DMatrix::DMatrix(DMatrix&& other) noexcept
    : handle_(other.handle_), replicated_(other.replicated_) {
  other.handle_ = nullptr;
}

DMatrix& DMatrix::operator=(DMatrix&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) XGDMatrixFree(handle_);
    handle_ = other.handle_;
    replicated_ = other.replicated_;
    other.handle_ = nullptr;
  }
  return *this;
}

DMatrix::~DMatrix() {
  if (handle_ != nullptr) XGDMatrixFree(handle_);
}

DMatrix DMatrix::FromDense(const float* data, uint64_t rows, uint64_t cols, float missing) {
  internal::RequireCollective("traintl::xgboost::DMatrix::FromDense");
  DMatrixHandle handle = nullptr;
  // An empty matrix may have no buffer; XGBoost reads none of it then.
  static const float kNone = 0;
  Check(
      XGDMatrixCreateFromMat_omp(data != nullptr ? data : &kNone, rows, cols, missing, &handle, 0),
      "XGDMatrixCreateFromMat", std::to_string(rows) + " x " + std::to_string(cols));
  return DMatrix(handle);
}

void DMatrix::SetFloatInfo(const std::string& field, const float* values, uint64_t n) {
  static const float kNone = 0;
  Check(XGDMatrixSetFloatInfo(handle_, field.c_str(), values != nullptr ? values : &kNone, n),
        "XGDMatrixSetFloatInfo", field);
}

std::vector<float> DMatrix::GetFloatInfo(const std::string& field) const {
  bst_ulong len = 0;
  const float* values = nullptr;
  Check(XGDMatrixGetFloatInfo(handle_, field.c_str(), &len, &values), "XGDMatrixGetFloatInfo",
        field);
  return std::vector<float>(values, values + len);
}

void DMatrix::SetFeatureNames(const std::vector<std::string>& names) {
  std::vector<const char*> ptrs;
  for (const auto& n : names) ptrs.push_back(n.c_str());
  Check(XGDMatrixSetStrFeatureInfo(handle_, "feature_name", ptrs.data(), ptrs.size()),
        "XGDMatrixSetStrFeatureInfo", "feature_name");
}

std::vector<std::string> DMatrix::feature_names() const {
  bst_ulong len = 0;
  const char** names = nullptr;
  Check(XGDMatrixGetStrFeatureInfo(handle_, "feature_name", &len, &names),
        "XGDMatrixGetStrFeatureInfo", "feature_name");
  return std::vector<std::string>(names, names + len);
}

uint64_t DMatrix::num_rows() const {
  bst_ulong n = 0;
  Check(XGDMatrixNumRow(handle_, &n), "XGDMatrixNumRow");
  return n;
}

uint64_t DMatrix::num_cols() const {
  bst_ulong n = 0;
  Check(XGDMatrixNumCol(handle_, &n), "XGDMatrixNumCol");
  return n;
}

// ---- Booster ----------------------------------------------------------------------------

Booster::Booster(const std::vector<const DMatrix*>& cache) {
  std::vector<DMatrixHandle> handles;
  for (const DMatrix* m : cache) {
    if (m == nullptr) throw std::invalid_argument("traintl::xgboost::Booster: a null DMatrix");
    handles.push_back(m->handle());
  }
  BoosterHandle handle = nullptr;
  Check(XGBoosterCreate(handles.data(), handles.size(), &handle), "XGBoosterCreate");
  handle_ = handle;
}

Booster::Booster(Booster&& other) noexcept : handle_(other.handle_) { other.handle_ = nullptr; }

Booster& Booster::operator=(Booster&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) XGBoosterFree(handle_);
    handle_ = other.handle_;
    other.handle_ = nullptr;
  }
  return *this;
}

Booster::~Booster() {
  if (handle_ != nullptr) XGBoosterFree(handle_);
}

void Booster::SetParam(const std::string& name, const std::string& value) {
  Check(XGBoosterSetParam(handle_, name.c_str(), value.c_str()), "XGBoosterSetParam",
        name + "=" + value);
}

void Booster::SetParams(const Params& params) {
  for (const auto& [name, value] : params) SetParam(name, value);
}

void Booster::UpdateOneIter(int iteration, const DMatrix& dtrain) {
  Check(XGBoosterUpdateOneIter(handle_, iteration, dtrain.handle()), "XGBoosterUpdateOneIter",
        "round " + std::to_string(iteration));
}

std::string Booster::EvalOneIter(int iteration,
                                 const std::vector<std::pair<DMatrix*, std::string>>& evals) {
  std::vector<DMatrixHandle> handles;
  std::vector<const char*> names;
  for (const auto& [m, name] : evals) {
    if (m == nullptr) {
      throw std::invalid_argument("traintl::xgboost::Booster::EvalOneIter: eval set '" + name +
                                  "' is a null DMatrix");
    }
    handles.push_back(m->handle());
    names.push_back(name.c_str());
  }
  const char* out = nullptr;
  Check(
      XGBoosterEvalOneIter(handle_, iteration, handles.data(), names.data(), handles.size(), &out),
      "XGBoosterEvalOneIter", "round " + std::to_string(iteration));
  return out != nullptr ? out : "";
}

int Booster::boosted_rounds() const {
  int rounds = 0;
  Check(XGBoosterBoostedRounds(handle_, &rounds), "XGBoosterBoostedRounds");
  return rounds;
}

std::string Booster::SaveModelToBuffer(ModelFormat format) const {
  const std::string config = std::string("{\"format\": \"") + ModelExtension(format) + "\"}";
  bst_ulong len = 0;
  const char* data = nullptr;
  Check(XGBoosterSaveModelToBuffer(handle_, config.c_str(), &len, &data),
        "XGBoosterSaveModelToBuffer", ModelExtension(format));
  return std::string(data, len);
}

void Booster::LoadModelFromBuffer(const std::string& buffer) {
  Check(XGBoosterLoadModelFromBuffer(handle_, buffer.data(), buffer.size()),
        "XGBoosterLoadModelFromBuffer", std::to_string(buffer.size()) + " bytes");
}

void Booster::SaveModel(const std::string& path, ModelFormat format) const {
  internal::WriteFileAtomic(path, SaveModelToBuffer(format));
}

void Booster::LoadModel(const std::string& path) {
  const std::string data = internal::ReadFile(path);
  Check(XGBoosterLoadModelFromBuffer(handle_, data.data(), data.size()),
        "XGBoosterLoadModelFromBuffer", path);
}

std::vector<float> Booster::Predict(const DMatrix& data, bool output_margin) const {
  const nlohmann::json config = {{"type", output_margin ? 1 : 0},
                                 {"training", false},
                                 {"iteration_begin", 0},
                                 {"iteration_end", 0},
                                 {"strict_shape", false}};
  const std::string text = config.dump();
  const bst_ulong* shape = nullptr;
  bst_ulong dim = 0;
  const float* result = nullptr;
  Check(XGBoosterPredictFromDMatrix(handle_, data.handle(), text.c_str(), &shape, &dim, &result),
        "XGBoosterPredictFromDMatrix");
  uint64_t n = dim > 0 ? 1 : 0;
  for (bst_ulong i = 0; i < dim; ++i) n *= shape[i];
  return std::vector<float>(result, result + n);
}

std::optional<std::string> Booster::GetAttr(const std::string& key) const {
  const char* out = nullptr;
  int success = 0;
  Check(XGBoosterGetAttr(handle_, key.c_str(), &out, &success), "XGBoosterGetAttr", key);
  if (success == 0 || out == nullptr) return std::nullopt;
  return std::string(out);
}

void Booster::SetAttr(const std::string& key, const std::string& value) {
  Check(XGBoosterSetAttr(handle_, key.c_str(), value.c_str()), "XGBoosterSetAttr", key);
}

}  // namespace xgboost
}  // namespace traintl
