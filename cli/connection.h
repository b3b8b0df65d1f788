// Connection discovery: which daemon address, data directory and token the CLI uses.
//
//   data_dir = --data-dir, else $TRAINTL_DATA_DIR, else `data-dir` of a config file, else
//              /var/lib/traintl when its token is readable, else $XDG_STATE_HOME/traintl,
//              else ~/.local/state/traintl (the daemon's default when it does not run as
//              root).
//   address  = --address, else $TRAINTL_ADDRESS, else `address` of a config file, else the
//              first line of <data_dir>/api_address (written by the daemon), else
//              127.0.0.1:7450.
//   token    = $TRAINTL_TOKEN, else the file named by --token-file, else `token-file` of a
//              config file, else <data_dir>/token.
//   TLS      = an address written "https://host:port" (the daemon writes its api_address
//              so when it serves HTTPS); the server is verified against --ca-file, else
//              $TRAINTL_CA_FILE, else `ca-file` of a config file, else the system's store.
//
// Config files (Boost.Program_options syntax: "key = value" lines, '#' comments) may set
// address, token-file, data-dir and ca-file: the user's $XDG_CONFIG_HOME/traintl/config (else
// ~/.config/traintl/config) wins over the system-wide /etc/traintl/traintl.conf. A
// relative token-file or data-dir is relative to the file's directory; "~/" is $HOME.
//
// Thread-safety: free functions over their arguments; no shared state.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace traintl {
namespace cli {

constexpr char kDefaultAddress[] = "127.0.0.1:7450";
constexpr uint16_t kDefaultPort = 7450;

// What discovery looks at; tests substitute the environment and the system directory.
struct DiscoveryInputs {
  // Command-line flags; empty when not given.
  std::string address_flag;
  std::string token_file_flag;
  std::string data_dir_flag;
  std::string ca_file_flag;
  // Reads an environment variable; nullopt when unset. Default: none set.
  std::function<std::optional<std::string>(const std::string&)> getenv;
  // The system-wide data directory of a daemon running as root.
  std::string system_data_dir = "/var/lib/traintl";
  // The system-wide config file; read when it exists. Empty: none.
  std::string system_config_file = "/etc/traintl/traintl.conf";
  // The user's config file; read when it exists. Empty (the default): derived from
  // XDG_CONFIG_HOME / HOME through getenv.
  std::string user_config_file;
};

// Settings from the config files; empty when not set.
struct ConfigSettings {
  std::string address;
  std::string address_source;  // the file that set it
  std::string token_file;      // resolved against the file's directory
  std::string token_file_source;
  std::string data_dir;
  std::string ca_file;                  // resolved against the file's directory
  std::vector<std::string> files_read;  // in the order read
};

// Reads the config files of `inputs` (system first, then the user's, which wins).
// Missing files are skipped. Errors (InvalidArgument) name the file: unreadable, unknown
// key, or a key given twice.
Result<ConfigSettings> ReadConfigFiles(const DiscoveryInputs& inputs);

// The user's config file for `inputs`: user_config_file, else
// $XDG_CONFIG_HOME/traintl/config, else $HOME/.config/traintl/config; "" without HOME.
std::string UserConfigPath(const DiscoveryInputs& inputs);

// DiscoveryInputs::getenv over the process environment.
std::optional<std::string> ProcessGetenv(const std::string& name);

struct Connection {
  std::string address;  // "host:port", as shown in messages
  std::string host;
  uint16_t port = kDefaultPort;
  bool tls = false;            // the address was "https://..."
  std::string ca_file;         // PEM CAs to verify the daemon with; "" = the system's store
  std::string address_source;  // "--address", "TRAINTL_ADDRESS", "<dir>/api_address", "default"
  std::string data_dir;
  std::string token;  // empty when none was found
  // Where the token came from: "TRAINTL_TOKEN" or a file path; when none was found, the
  // file where it was looked for.
  std::string token_source;
  // The token file that applies without TRAINTL_TOKEN: --token-file, else <data_dir>/token.
  std::string token_path;
  // Why no token was found (e.g. "/var/lib/traintl/token: permission denied"); empty
  // when there is a token.
  std::string token_problem;
  // The config files that were read, in order.
  std::vector<std::string> config_files;
};

// Resolves the connection. Errors: InvalidArgument for a malformed address or config
// file; PermissionDenied when an explicit --token-file (or a config file's token-file)
// cannot be read.
Result<Connection> DiscoverConnection(const DiscoveryInputs& inputs);

// Splits "host:port", "[v6]:port", "host" (port 7450), optionally prefixed by "http://" or
// "https://"; `tls` (when given) says whether it was "https://".
Status ParseAddress(const std::string& text, std::string* host, uint16_t* port,
                    bool* tls = nullptr);

}  // namespace cli
}  // namespace traintl
