// DaemonConfig: traintld's settings from the command line and an optional config file
// (Boost.Program_options; the command line wins), plus the files a data directory holds
// (token, node id).
//
// Thread-safety: plain values and free functions.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/logging.h"
#include "common/result.h"
#include "daemon/node/fingerprint.h"

namespace traintl {

struct DaemonConfig {
  std::string data_dir;                         // --data-dir; default: DefaultDataDir()
  std::string api_host = "127.0.0.1";           // --api-address host part
  uint16_t api_port = 7450;                     // --api-address port; 0 = any free port
  std::string raft_address = "127.0.0.1:7451";  // --raft-address; port 0 = pick and persist
  std::string worker_binary;       // --worker-binary; default: traintl-worker beside traintld
  FingerprintOverrides overrides;  // --num-cpus, --num-gpus, --resources
  int collective_timeout_s = 300;  // --collective-timeout
  std::chrono::milliseconds worker_stop_grace{3000};  // --worker-stop-grace-ms
  int warm_workers = 0;                               // --warm-workers
  uint64_t max_rank_log_mb = 1024;  // --max-rank-log-mb: disk a rank's log may use; 0 = no bound
  int metrics_per_rank = 1000;      // --metrics-per-rank: the head's ring per rank
  int retain_jobs = 0;              // --retain-jobs: finished jobs kept (newest); 0 = all
  double retain_days = 0;           // --retain-days: finished jobs kept this long; 0 = forever
  size_t max_upload_bytes = 512u << 20;  // --max-upload-mb
  int max_log_streams = 64;              // --max-log-streams
  uint64_t min_free_disk_mb = 128;       // --min-free-disk-mb
  LogLevel log_level = LogLevel::kInfo;  // --log-level
  // Multi-node (DESIGN §5). --server: a Raft voter; --join: API addresses (host:port) of
  // daemons already in the cluster. A daemon with neither is a one-node cluster; with
  // --join but no --server it is an agent.
  bool server = false;
  std::vector<std::string> join;
  std::string token_file;  // --token-file: the cluster's shared token; default <data-dir>/token
  std::chrono::milliseconds heartbeat_interval{500};  // --heartbeat-interval-ms
  std::chrono::milliseconds node_loss_timeout{4000};  // --node-loss-timeout-ms
  std::chrono::milliseconds worker_lease{2000};       // --worker-lease-ms
  std::string tls_cert_file;        // --tls-cert: PEM chain; with --tls-key the API is HTTPS only
  std::string tls_key_file;         // --tls-key
  std::string tls_ca_file;          // --tls-ca-file: CAs that peers' HTTPS is verified against
  std::string cluster_secret_file;  // --cluster-secret-file; default: derived from the token
  bool insecure_allow_remote_without_tls = false;  // --insecure-allow-remote-without-tls
  std::string worker_user;  // --worker-user: account workers run as (root daemons)
  // $TRAINTL_UI_DIR: serve the dashboard's files from this directory (for working on the
  // dashboard); default "": the copies built into traintld.
  std::string ui_files_dir;
  bool clustered() const { return server || !join.empty(); }
};

// /var/lib/traintl for root, else $XDG_STATE_HOME/traintl or ~/.local/state/traintl.
std::string DefaultDataDir();

// Fills *cfg. Returns false when the process should exit now with *exit_code (help
// printed: 0; bad options: 2, with the reason on stderr).
bool ParseDaemonConfig(int argc, char** argv, DaemonConfig* cfg, int* exit_code);

// Reads a secret file, or creates it (mode 0600) with 32 random bytes in hex. Refuses a
// file that others can read.
Result<std::string> LoadOrCreateSecret(const std::string& path);
// Reads or creates this node's id ("node-" + 8 hex chars).
Result<std::string> LoadOrCreateNodeId(const std::string& path);
// Raft id of a joining voter, derived from its node id (never 1, the bootstrap voter's).
uint64_t RaftIdForNode(const std::string& node_id);

}  // namespace traintl
