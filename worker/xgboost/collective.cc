// Collective: XGBoost's rabit communicator, configured from the rank's environment.
#include <stdlib.h>
#include <xgboost/c_api.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "traintl/xgboost.h"
#include "worker/xgboost/internal.h"

namespace traintl {
namespace xgboost {
namespace {

// XGBoost has one communicator per thread, but rabit's engine and the tracker's view of a
// process allow one connection: a second Collective would join the job twice.
std::atomic<bool> g_alive{false};

constexpr char kWho[] = "traintl::xgboost::Collective";

std::string Env(const std::function<const char*(const char*)>& getenv, const char* name) {
  const char* v = getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

// A whole decimal integer in [lo, hi].
bool ParseInt(const std::string& text, long lo, long hi, long* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || end == nullptr || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

nlohmann::json CollectiveConfig(const Context& context, const CollectiveOptions& options,
                                const std::function<const char*(const char*)>& getenv) {
  const int world = context.world_size();
  if (world <= 1) return nullptr;
  const std::string ranks = std::to_string(world) + " ranks";
  const std::string uri = Env(getenv, "DMLC_TRACKER_URI");
  if (uri.empty()) {
    throw Error(std::string(kWho) + ": the job has " + ranks +
                " but DMLC_TRACKER_URI is not set: distributed XGBoost needs the tracker "
                "traintld runs for a job spec with \"framework\": \"xgboost\"");
  }
  long port = 0;
  const std::string port_text = Env(getenv, "DMLC_TRACKER_PORT");
  if (!ParseInt(port_text, 1, 65535, &port)) {
    throw Error(std::string(kWho) + ": DMLC_TRACKER_PORT is " +
                (port_text.empty() ? std::string("not set") : "'" + port_text + "'") +
                ", not a port number");
  }
  const std::string workers_text = Env(getenv, "DMLC_NUM_WORKER");
  long workers = world;
  if (!workers_text.empty() &&
      (!ParseInt(workers_text, 1, 1 << 20, &workers) || workers != world)) {
    throw Error(std::string(kWho) + ": DMLC_NUM_WORKER is '" + workers_text + "' but the job has " +
                ranks);
  }
  const std::string task_env = Env(getenv, "DMLC_TASK_ID");
  const std::string task = task_env.empty() ? std::to_string(context.world_rank()) : task_env;
  // rabit reads its arguments with sscanf("%[^=]=%s") into 256-byte buffers.
  for (const std::string* v : {&uri, &task}) {
    if (v->size() > 200 || v->find_first_of(" \t\n=") != std::string::npos) {
      throw Error(std::string(kWho) + ": '" + *v + "' cannot be passed to XGBoost's rabit");
    }
  }
  nlohmann::json config = {{"xgboost_communicator", "rabit"},
                           {"DMLC_TRACKER_URI", uri},
                           {"DMLC_TRACKER_PORT", port},
                           {"DMLC_TASK_ID", task},
                           {"rabit_world_size", workers}};
  const int timeout = options.timeout_s > 0 ? options.timeout_s : context.collective_timeout_s();
  if (timeout > 0) {
    config["rabit_timeout"] = true;
    config["rabit_timeout_sec"] = timeout;
  }
  if (options.connect_retry > 0) config["DMLC_WORKER_CONNECT_RETRY"] = options.connect_retry;
  return config;
}

Collective::Collective(const CollectiveOptions& options) {
  const Context context = get_context();
  const nlohmann::json config = CollectiveConfig(
      context, options, [](const char* name) { return static_cast<const char*>(::getenv(name)); });
  if (config.is_null()) return;
  if (g_alive.exchange(true)) {
    throw std::logic_error(std::string(kWho) + ": another Collective is alive in this process");
  }
  const std::string where = "tracker " + config["DMLC_TRACKER_URI"].get<std::string>() + ":" +
                            std::to_string(config["DMLC_TRACKER_PORT"].get<long>()) + ", task " +
                            config["DMLC_TASK_ID"].get<std::string>() + " of " +
                            std::to_string(config["rabit_world_size"].get<long>());
  log_message(TRAINTL_LOG_INFO, "traintl::xgboost: joining the XGBoost collective (" + where + ")");
  try {
    internal::Check(XGCommunicatorInit(config.dump().c_str()), "XGCommunicatorInit", where);
  } catch (...) {
    g_alive = false;
    throw;
  }
  distributed_ = true;
  log_message(TRAINTL_LOG_INFO, "traintl::xgboost: XGBoost rank " +
                                    std::to_string(XGCommunicatorGetRank()) + " of " +
                                    std::to_string(XGCommunicatorGetWorldSize()));
}

Collective::~Collective() {
  if (!distributed_) return;
  // Tells the tracker this rank is done. A failure cannot be reported from here, and the
  // training result stands either way.
  if (XGCommunicatorFinalize() != 0) {
    const char* err = XGBGetLastError();
    try {
      log_message(TRAINTL_LOG_WARNING,
                  "traintl::xgboost: XGCommunicatorFinalize: " +
                      internal::CleanMessage(err != nullptr ? err : "unknown error"));
    } catch (...) {
    }
  }
  g_alive = false;
}

int Collective::rank() const { return distributed_ ? XGCommunicatorGetRank() : 0; }

int Collective::world_size() const { return distributed_ ? XGCommunicatorGetWorldSize() : 1; }

}  // namespace xgboost
}  // namespace traintl
