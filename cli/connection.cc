#include "cli/connection.h"

#include <unistd.h>

#include <boost/program_options.hpp>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/file_util.h"

namespace traintl {
namespace cli {
namespace {

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::optional<std::string> Env(const DiscoveryInputs& in, const std::string& name) {
  if (!in.getenv) return std::nullopt;
  auto v = in.getenv(name);
  if (!v || v->empty()) return std::nullopt;
  return v;
}

// Reads a small config or secret file. The error names the path and errno's reason,
// lower-cased so that it reads well inside a sentence.
Result<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    std::string why = err != 0 ? std::strerror(err) : "cannot open";
    if (!why.empty()) why[0] = static_cast<char>(std::tolower(why[0]));
    if (err == ENOENT) return Status::NotFound(path + ": " + why);
    return Status::PermissionDenied(path + ": " + why);
  }
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return data;
}

// A path from a config file: "~/" is the user's home, a relative path is relative to
// the file's directory.
std::string ConfigPath(const DiscoveryInputs& in, const std::string& file,
                       const std::string& value) {
  if (value.rfind("~/", 0) == 0) {
    if (auto home = Env(in, "HOME")) return JoinPath(*home, value.substr(2));
  }
  return JoinPath(DirName(file), value);
}

Status ReadConfigFile(const DiscoveryInputs& in, const std::string& file, ConfigSettings* out) {
  auto content = ReadSmallFile(file);
  if (!content.ok()) {
    if (content.status().code() == Status::Code::kNotFound) return Status::Ok();
    return Status::InvalidArgument("cannot read the config file " + content.status().message());
  }
  namespace po = boost::program_options;
  po::options_description keys;
  keys.add_options()("address", po::value<std::string>())("token-file", po::value<std::string>())(
      "data-dir", po::value<std::string>())("ca-file", po::value<std::string>());
  po::variables_map vm;
  try {
    std::istringstream stream(*content);
    po::store(po::parse_config_file(stream, keys), vm);
  } catch (const po::error& e) {
    return Status::InvalidArgument(file + ": " + e.what() +
                                   " (the keys are address, token-file, data-dir, ca-file)");
  }
  auto value = [&vm](const char* key) {
    return vm.count(key) ? Trim(vm[key].as<std::string>()) : std::string();
  };
  if (std::string v = value("address"); !v.empty()) {
    out->address = v;
    out->address_source = file;
  }
  if (std::string v = value("token-file"); !v.empty()) {
    out->token_file = ConfigPath(in, file, v);
    out->token_file_source = file;
  }
  if (std::string v = value("data-dir"); !v.empty()) out->data_dir = ConfigPath(in, file, v);
  if (std::string v = value("ca-file"); !v.empty()) out->ca_file = ConfigPath(in, file, v);
  out->files_read.push_back(file);
  return Status::Ok();
}

std::string DefaultDataDir(const DiscoveryInputs& in) {
  if (access(JoinPath(in.system_data_dir, "token").c_str(), R_OK) == 0) {
    return in.system_data_dir;
  }
  if (auto xdg = Env(in, "XDG_STATE_HOME"); xdg && (*xdg)[0] == '/') {
    return JoinPath(*xdg, "traintl");
  }
  std::string home = Env(in, "HOME").value_or("");
  if (home.empty()) return in.system_data_dir;
  return JoinPath(home, ".local/state/traintl");
}

}  // namespace

std::optional<std::string> ProcessGetenv(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

Status ParseAddress(const std::string& text, std::string* host, uint16_t* port, bool* tls) {
  std::string s = Trim(text);
  const bool https = s.rfind("https://", 0) == 0;
  if (tls != nullptr) *tls = https;
  if (https) {
    s = s.substr(8);
  } else if (s.rfind("http://", 0) == 0) {
    s = s.substr(7);
  }
  while (!s.empty() && s.back() == '/') s.pop_back();
  if (s.empty()) return Status::InvalidArgument("empty address");
  std::string port_text;
  if (s[0] == '[') {
    size_t close = s.find(']');
    if (close == std::string::npos) return Status::InvalidArgument("bad address '" + text + "'");
    *host = s.substr(1, close - 1);
    if (close + 1 < s.size()) {
      if (s[close + 1] != ':') return Status::InvalidArgument("bad address '" + text + "'");
      port_text = s.substr(close + 2);
    }
  } else {
    size_t colon = s.rfind(':');
    if (colon != std::string::npos && s.find(':') != colon) {
      // A bare IPv6 address without brackets has no port.
      *host = s;
    } else if (colon != std::string::npos) {
      *host = s.substr(0, colon);
      port_text = s.substr(colon + 1);
    } else {
      *host = s;
    }
  }
  if (host->empty()) return Status::InvalidArgument("bad address '" + text + "': no host");
  *port = kDefaultPort;
  if (!port_text.empty() || s.back() == ':') {
    char* end = nullptr;
    errno = 0;
    long p = std::strtol(port_text.c_str(), &end, 10);
    if (port_text.empty() || *end != '\0' || errno != 0 || p < 1 || p > 65535) {
      return Status::InvalidArgument("bad port in address '" + text + "'");
    }
    *port = static_cast<uint16_t>(p);
  }
  return Status::Ok();
}

std::string UserConfigPath(const DiscoveryInputs& in) {
  if (!in.user_config_file.empty()) return in.user_config_file;
  if (auto xdg = Env(in, "XDG_CONFIG_HOME"); xdg && (*xdg)[0] == '/') {
    return JoinPath(*xdg, "traintl/config");
  }
  if (auto home = Env(in, "HOME")) return JoinPath(*home, ".config/traintl/config");
  return "";
}

Result<ConfigSettings> ReadConfigFiles(const DiscoveryInputs& in) {
  ConfigSettings settings;
  for (const std::string& file : {in.system_config_file, UserConfigPath(in)}) {
    if (file.empty()) continue;
    TRAINTL_RETURN_IF_ERROR(ReadConfigFile(in, file, &settings));
  }
  return settings;
}

Result<Connection> DiscoverConnection(const DiscoveryInputs& in) {
  Connection c;
  TRAINTL_ASSIGN_OR_RETURN(ConfigSettings config, ReadConfigFiles(in));
  c.config_files = config.files_read;
  if (!in.data_dir_flag.empty()) {
    c.data_dir = in.data_dir_flag;
  } else if (auto env = Env(in, "TRAINTL_DATA_DIR")) {
    c.data_dir = *env;
  } else if (!config.data_dir.empty()) {
    c.data_dir = config.data_dir;
  } else {
    c.data_dir = DefaultDataDir(in);
  }

  std::string address;
  if (!in.address_flag.empty()) {
    address = in.address_flag;
    c.address_source = "--address";
  } else if (auto env = Env(in, "TRAINTL_ADDRESS")) {
    address = *env;
    c.address_source = "TRAINTL_ADDRESS";
  } else if (!config.address.empty()) {
    address = config.address;
    c.address_source = config.address_source;
  } else {
    std::string file = JoinPath(c.data_dir, "api_address");
    auto content = ReadSmallFile(file);
    std::string line;
    if (content.ok()) line = Trim(content->substr(0, content->find('\n')));
    if (!line.empty()) {
      address = line;
      c.address_source = file;
    } else {
      address = kDefaultAddress;
      c.address_source = "default";
    }
  }
  Status st = ParseAddress(address, &c.host, &c.port, &c.tls);
  if (!st.ok()) {
    return Status::InvalidArgument(st.message() + " (from " + c.address_source + ")");
  }
  c.address = (c.host.find(':') != std::string::npos ? "[" + c.host + "]" : c.host) + ":" +
              std::to_string(c.port);
  if (c.tls) c.address = "https://" + c.address;
  if (!in.ca_file_flag.empty()) {
    c.ca_file = in.ca_file_flag;
  } else if (auto env = Env(in, "TRAINTL_CA_FILE")) {
    c.ca_file = *env;
  } else {
    c.ca_file = config.ca_file;
  }

  // An explicitly named token file (flag or config) must be readable; the default one
  // may be missing (the daemon may run elsewhere, or not yet).
  std::string explicit_token_file =
      !in.token_file_flag.empty() ? in.token_file_flag : config.token_file;
  c.token_path = explicit_token_file.empty() ? JoinPath(c.data_dir, "token") : explicit_token_file;
  if (auto env = Env(in, "TRAINTL_TOKEN")) {
    c.token = Trim(*env);
    c.token_source = "TRAINTL_TOKEN";
  } else if (!explicit_token_file.empty()) {
    c.token_source = explicit_token_file;
    auto content = ReadSmallFile(explicit_token_file);
    if (!content.ok()) {
      std::string named_by =
          in.token_file_flag.empty() ? " (token-file in " + config.token_file_source + ")" : "";
      return Status::PermissionDenied("cannot read the token file " + content.status().message() +
                                      named_by);
    }
    c.token = Trim(*content);
    if (c.token.empty()) c.token_problem = explicit_token_file + " is empty";
  } else {
    c.token_source = JoinPath(c.data_dir, "token");
    auto content = ReadSmallFile(c.token_source);
    if (content.ok()) {
      c.token = Trim(*content);
      if (c.token.empty()) c.token_problem = c.token_source + " is empty";
    } else {
      c.token_problem = content.status().message();
    }
  }
  return c;
}

}  // namespace cli
}  // namespace traintl
