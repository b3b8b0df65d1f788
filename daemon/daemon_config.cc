#include "daemon/daemon_config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "common/crypto.h"
#include "common/file_util.h"

namespace traintl {

namespace po = boost::program_options;

std::string DefaultDataDir() {
  if (::geteuid() == 0) return "/var/lib/traintl";
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x) return std::string(x) + "/traintl";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/tmp") + "/.local/state/traintl";
}

namespace {

std::string SelfDir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  return DirName(buf);
}

bool SplitHostPort(const std::string& s, std::string* host, uint16_t* port) {
  size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  std::string h = s.substr(0, colon), p = s.substr(colon + 1);
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos)
    return false;
  int v = std::stoi(p);
  if (v > 65535) return false;
  *host = h;
  *port = static_cast<uint16_t>(v);
  return true;
}

}  // namespace

bool ParseDaemonConfig(int argc, char** argv, DaemonConfig* cfg, int* exit_code) {
  std::string api_address, config_file, resources_json, log_level = "info";
  double num_cpus = -1;
  int num_gpus = -1;
  int64_t stop_grace_ms = 3000, max_upload_mb = 512;
  int64_t heartbeat_ms = 500, loss_ms = 4000, lease_ms = -1;
  std::string join;
  po::options_description opts("traintld options");
  opts.add_options()("help,h", "show this help")("version", "show the version")(
      "config", po::value(&config_file),
      "config file (key = value lines, same names as the options); default "
      "/etc/traintl/traintld.conf when it exists")("data-dir", po::value(&cfg->data_dir),
                                                   "state directory (default /var/lib/traintl for "
                                                   "root, else ~/.local/state/traintl)")(
      "api-address", po::value(&api_address)->default_value("127.0.0.1:7450"),
      "HTTP API host:port (port 0 = any free port; the bound address is written to "
      "<data-dir>/api_address)")("raft-address",
                                 po::value(&cfg->raft_address)->default_value(cfg->raft_address),
                                 "Raft host:port (port 0 = pick once and keep)")(
      "worker-binary", po::value(&cfg->worker_binary),
      "path of traintl-worker (default: "
      "beside traintld)")("num-cpus", po::value(&num_cpus),
                          "CPUs to offer (default: detected, affinity and "
                          "cgroup aware)")("num-gpus", po::value(&num_gpus),
                                           "GPUs to offer (default: detected with NVML)")(
      "resources", po::value(&resources_json),
      "custom resources as JSON, e.g. "
      "'{\"tpu_slice\": 2}'")("collective-timeout",
                              po::value(&cfg->collective_timeout_s)->default_value(300),
                              "seconds a collective may wait on a peer before the attempt fails")(
      "worker-stop-grace-ms", po::value(&stop_grace_ms)->default_value(3000),
      "grace between the stop request and SIGTERM, and between SIGTERM and SIGKILL")(
      "warm-workers", po::value(&cfg->warm_workers)->default_value(0),
      "workers kept started, with LibTorch and Python loaded, for the next ranks to start "
      "without that wait (each holds that memory while it waits)")(
      "max-rank-log-mb", po::value(&cfg->max_rank_log_mb)->default_value(1024),
      "disk space a rank's log may use: past it, its oldest part is dropped (the file keeps "
      "its size, the space is freed); 0: no bound")(
      "metrics-per-rank", po::value(&cfg->metrics_per_rank)->default_value(1000),
      "reports of every rank of a running job the head keeps in memory (traintl metrics "
      "--all-ranks, the dashboard); rank 0's are stored in full regardless")(
      "retain-jobs", po::value(&cfg->retain_jobs)->default_value(0),
      "finished jobs kept: older ones are deleted (records and logs, not their trial dirs); "
      "0 keeps every one")("retain-days", po::value(&cfg->retain_days)->default_value(0),
                           "days a finished job is kept before it is deleted (records and "
                           "logs, not its trial dir); 0 keeps it forever")(
      "max-upload-mb", po::value(&max_upload_mb)->default_value(512),
      "largest training library accepted, in MiB")(
      "max-log-streams", po::value(&cfg->max_log_streams)->default_value(64),
      "most log streams (traintl logs) served at once")(
      "min-free-disk-mb", po::value(&cfg->min_free_disk_mb)->default_value(128),
      "free space the replicated log keeps on its file system: below it, writes are "
      "refused with 507 (0: no check)")("log-level", po::value(&log_level)->default_value("info"),
                                        "debug|info|warning|error")(
      "server", po::bool_switch(&cfg->server),
      "be a Raft voter (a head candidate); with "
      "--join, ask the head to add this node as a voter")(
      "join", po::value(&join),
      "comma-separated API addresses (host:port) of daemons of "
      "the cluster to join; without --server this daemon is an agent")(
      "token-file", po::value(&cfg->token_file),
      "the cluster's bearer token (every daemon "
      "of a cluster uses the same one); default <data-dir>/token, created when missing")(
      "heartbeat-interval-ms", po::value(&heartbeat_ms)->default_value(500),
      "how often a node heartbeats to the head")(
      "node-loss-timeout-ms", po::value(&loss_ms)->default_value(4000),
      "a node silent this long is lost and its workers fail; a node without a head stops "
      "its workers after 60% of it")(
      "worker-lease-ms", po::value(&lease_ms)->default_value(-1),
      "a worker ends itself when this daemon has shown no sign of life for this long "
      "(frozen or wedged); -1: half of --node-loss-timeout-ms")(
      "tls-cert", po::value(&cfg->tls_cert_file),
      "PEM certificate (chain) of this node: serve the API over HTTPS only (needs --tls-key)")(
      "tls-key", po::value(&cfg->tls_key_file), "PEM private key of --tls-cert (mode 0600)")(
      "tls-ca-file", po::value(&cfg->tls_ca_file),
      "PEM CA certificates that other daemons' HTTPS certificates are verified against "
      "(default: the system store)")(
      "cluster-secret-file", po::value(&cfg->cluster_secret_file),
      "secret every daemon of the cluster shares (created 0600 when missing; copy it to "
      "the other nodes); authenticates Raft connections and daemon-to-daemon calls. "
      "Default: a key derived from the cluster's token")(
      "insecure-allow-remote-without-tls", po::bool_switch(&cfg->insecure_allow_remote_without_tls),
      "allow plain HTTP on a non-loopback --api-address (the token then travels in clear)")(
      "worker-user", po::value(&cfg->worker_user),
      "run workers as this unprivileged user (name or uid; traintld must run as root)");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    std::string file = vm.count("config") ? vm["config"].as<std::string>() : "";
    if (file.empty() && PathExists("/etc/traintl/traintld.conf"))
      file = "/etc/traintl/traintld.conf";
    if (!file.empty()) {
      std::ifstream in(file);
      if (!in) throw po::error("cannot read config file " + file);
      po::store(po::parse_config_file(in, opts), vm);  // the command line, stored first, wins
    }
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "traintld: " << e.what() << "\n"
              << "Try 'traintld --help'.\n";
    *exit_code = 2;
    return false;
  }
  if (vm.count("version")) {
    std::cout << "traintld " << TRAINTL_VERSION << "\n";
    *exit_code = 0;
    return false;
  }
  if (vm.count("help")) {
    std::cout << "Usage: traintld [options]\n\nRuns a traintl node; with no options, a "
                 "single-node cluster on 127.0.0.1:7450.\n\n"
              << opts << "\n";
    *exit_code = 0;
    return false;
  }
  auto fail = [&](const std::string& msg) {
    std::cerr << "traintld: " << msg << "\n";
    *exit_code = 2;
    return false;
  };
  if (!SplitHostPort(api_address, &cfg->api_host, &cfg->api_port))
    return fail("--api-address must be host:port, got '" + api_address + "'");
  if (!ParseLogLevel(log_level, &cfg->log_level))
    return fail("--log-level must be debug, info, warning or error");
  if (cfg->data_dir.empty()) cfg->data_dir = DefaultDataDir();
  cfg->data_dir = AbsolutePath(cfg->data_dir);
  if (cfg->worker_binary.empty()) cfg->worker_binary = SelfDir() + "/traintl-worker";
  if (::access(cfg->worker_binary.c_str(), X_OK) != 0)
    return fail("worker binary " + cfg->worker_binary + " is not executable (--worker-binary)");
  if (vm.count("num-cpus")) {
    if (num_cpus <= 0) return fail("--num-cpus must be > 0");
    cfg->overrides.num_cpus = num_cpus;
  }
  if (vm.count("num-gpus")) {
    if (num_gpus < 0) return fail("--num-gpus must be >= 0");
    cfg->overrides.num_gpus = num_gpus;
  }
  if (!resources_json.empty()) {
    auto j = nlohmann::json::parse(resources_json, nullptr, false);
    if (!j.is_object()) return fail("--resources must be a JSON object of name: amount");
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!it->is_number() || it->get<double>() < 0)
        return fail("--resources: " + it.key() + " must be a number >= 0");
      if (it.key() == "CPU" || it.key() == "GPU" || it.key() == "memory")
        return fail("--resources: use --num-cpus / --num-gpus for " + it.key());
      cfg->overrides.custom[it.key()] = it->get<double>();
    }
  }
  if (cfg->collective_timeout_s <= 0) return fail("--collective-timeout must be > 0");
  if (stop_grace_ms < 0) return fail("--worker-stop-grace-ms must be >= 0");
  if (cfg->warm_workers < 0 || cfg->warm_workers > 64)
    return fail("--warm-workers must be between 0 and 64");
  if (cfg->retain_jobs < 0) return fail("--retain-jobs must be >= 0");
  if (cfg->metrics_per_rank < 1 || cfg->metrics_per_rank > 1000000)
    return fail("--metrics-per-rank must be between 1 and 1000000");
  if (const char* d = std::getenv("TRAINTL_UI_DIR"); d != nullptr && *d) cfg->ui_files_dir = d;
  if (!(cfg->retain_days >= 0 && cfg->retain_days <= 36500))
    return fail("--retain-days must be between 0 and 36500");
  cfg->worker_stop_grace = std::chrono::milliseconds(stop_grace_ms);
  if (max_upload_mb <= 0) return fail("--max-upload-mb must be > 0");
  cfg->max_upload_bytes = static_cast<size_t>(max_upload_mb) << 20;
  if (cfg->max_log_streams <= 0) return fail("--max-log-streams must be > 0");
  for (size_t pos = 0; pos < join.size();) {
    size_t comma = join.find(',', pos);
    std::string item =
        join.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? join.size() : comma + 1;
    if (item.empty()) continue;
    std::string h;
    uint16_t p = 0;
    if (!SplitHostPort(item, &h, &p) || p == 0)
      return fail("--join: '" + item + "' is not host:port");
    cfg->join.push_back(item);
  }
  if (heartbeat_ms <= 0 || loss_ms <= 2 * heartbeat_ms)
    return fail("--node-loss-timeout-ms must exceed twice --heartbeat-interval-ms (> 0)");
  cfg->heartbeat_interval = std::chrono::milliseconds(heartbeat_ms);
  cfg->node_loss_timeout = std::chrono::milliseconds(loss_ms);
  if (lease_ms < 0) lease_ms = loss_ms / 2;
  // A new head reuses a lost node's ranks only after its settle period (the node-loss
  // timeout): the lease must run out before that, with room for the watchdog's poll.
  if (lease_ms < 200 || lease_ms + 200 > loss_ms)
    return fail("--worker-lease-ms must be at least 200 and 200 below --node-loss-timeout-ms");
  cfg->worker_lease = std::chrono::milliseconds(lease_ms);
  if (!cfg->token_file.empty()) cfg->token_file = AbsolutePath(cfg->token_file);
  if (cfg->tls_cert_file.empty() != cfg->tls_key_file.empty())
    return fail("--tls-cert and --tls-key go together");
  for (std::string* f :
       {&cfg->tls_cert_file, &cfg->tls_key_file, &cfg->tls_ca_file, &cfg->cluster_secret_file}) {
    if (!f->empty()) *f = AbsolutePath(*f);
  }
  return true;
}

Result<std::string> LoadOrCreateSecret(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if ((st.st_mode & 077) != 0)
      return Status::PermissionDenied(path + " is readable by others; chmod 600 it");
    TRAINTL_ASSIGN_OR_RETURN(std::string s, ReadFile(path));
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    if (s.size() < 32) return Status::FailedPrecondition(path + " holds a too-short secret");
    return s;
  }
  std::string secret = RandomHex(32);
  TRAINTL_RETURN_IF_ERROR(WriteFileAtomic(path, secret + "\n", 0600));
  return secret;
}

Result<std::string> LoadOrCreateNodeId(const std::string& path) {
  auto existing = ReadFile(path);
  if (existing.ok()) {
    std::string s = *existing;
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    if (!s.empty()) return s;
  }
  std::string id = "node-" + RandomHex(4);
  TRAINTL_RETURN_IF_ERROR(WriteFileAtomic(path, id + "\n", 0644));
  return id;
}

uint64_t RaftIdForNode(const std::string& node_id) {
  // Node ids are "node-" + 8 random hex digits; anything else is hashed.
  uint64_t v = 0;
  const std::string hex = Sha256Hex(node_id).substr(0, 12);
  for (char c : hex) v = v * 16 + static_cast<uint64_t>(std::isdigit(c) ? c - '0' : c - 'a' + 10);
  return v + 2;
}

}  // namespace traintl
