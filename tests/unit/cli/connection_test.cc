#include <sys/stat.h>
#include <unistd.h>

#include <map>

#include <catch2/catch.hpp>

#include "cli/connection.h"
#include "test_util.h"

using namespace traintl::cli;
using traintl::JoinPath;
using traintl::cli::testing::TempDir;

namespace {

struct Env {
  std::map<std::string, std::string> vars;
  DiscoveryInputs Inputs(const std::string& system_dir) const {
    DiscoveryInputs in;
    auto copy = vars;
    in.getenv = [copy](const std::string& name) -> std::optional<std::string> {
      auto it = copy.find(name);
      if (it == copy.end()) return std::nullopt;
      return it->second;
    };
    in.system_data_dir = system_dir;
    // Hermetic: never the machine's /etc/traintl/traintl.conf.
    in.system_config_file = JoinPath(system_dir, "etc/traintl.conf");
    return in;
  }
};

Connection Discover(const DiscoveryInputs& in) {
  auto r = DiscoverConnection(in);
  INFO(r.status().message());
  REQUIRE(r.ok());
  return *r;
}

}  // namespace

TEST_CASE("ParseAddress") {
  std::string host;
  uint16_t port = 0;
  REQUIRE(ParseAddress("10.1.2.3:9000", &host, &port).ok());
  CHECK(host == "10.1.2.3");
  CHECK(port == 9000);
  REQUIRE(ParseAddress("http://example:81/", &host, &port).ok());
  CHECK(host == "example");
  CHECK(port == 81);
  REQUIRE(ParseAddress("node7", &host, &port).ok());
  CHECK(host == "node7");
  CHECK(port == 7450);
  REQUIRE(ParseAddress("[::1]:7451", &host, &port).ok());
  CHECK(host == "::1");
  CHECK(port == 7451);
  CHECK_FALSE(ParseAddress("h:0", &host, &port).ok());
  CHECK_FALSE(ParseAddress("h:70000", &host, &port).ok());
  CHECK_FALSE(ParseAddress("h:x", &host, &port).ok());
  CHECK_FALSE(ParseAddress("h:", &host, &port).ok());
  CHECK_FALSE(ParseAddress(":80", &host, &port).ok());
  CHECK_FALSE(ParseAddress("", &host, &port).ok());
  bool tls = true;
  REQUIRE(ParseAddress("http://example:81/", &host, &port, &tls).ok());
  CHECK_FALSE(tls);
  REQUIRE(ParseAddress("https://10.0.0.9:7450", &host, &port, &tls).ok());
  CHECK(tls);
  CHECK(host == "10.0.0.9");
  CHECK(port == 7450);
  REQUIRE(ParseAddress("https://[::1]", &host, &port, &tls).ok());
  CHECK(tls);
  CHECK(host == "::1");
  CHECK_FALSE(ParseAddress("https://", &host, &port, &tls).ok());
}

TEST_CASE("TLS: an https:// address, CA file from --ca-file, TRAINTL_CA_FILE, config") {
  TempDir data;
  TempDir system;
  Env env;
  env.vars["TRAINTL_DATA_DIR"] = data.path();
  auto in = env.Inputs(system.path());
  in.user_config_file = JoinPath(data.path(), "config");

  // A TLS daemon writes "https://..." into api_address.
  data.Write("api_address", "https://127.0.0.1:7999\n");
  Connection c = Discover(in);
  CHECK(c.tls);
  CHECK(c.host == "127.0.0.1");
  CHECK(c.port == 7999);
  CHECK(c.address == "https://127.0.0.1:7999");
  CHECK(c.ca_file.empty());  // the system store

  data.Write("config", "ca-file = certs/ca.pem\n");
  c = Discover(in);
  CHECK(c.ca_file == JoinPath(data.path(), "certs/ca.pem"));

  env.vars["TRAINTL_CA_FILE"] = "/env/ca.pem";
  in = env.Inputs(system.path());
  in.user_config_file = JoinPath(data.path(), "config");
  c = Discover(in);
  CHECK(c.ca_file == "/env/ca.pem");

  in.ca_file_flag = "/flag/ca.pem";
  in.address_flag = "127.0.0.1:7450";  // plain: TLS only when the address says so
  c = Discover(in);
  CHECK(c.ca_file == "/flag/ca.pem");
  CHECK_FALSE(c.tls);
}

TEST_CASE("address: --address, then TRAINTL_ADDRESS, then api_address, then default") {
  TempDir data;
  TempDir system;  // holds no token: never chosen
  Env env;
  env.vars["TRAINTL_DATA_DIR"] = data.path();
  auto in = env.Inputs(system.path());

  // Nothing: the default.
  Connection c = Discover(in);
  CHECK(c.data_dir == data.path());
  CHECK(c.address == "127.0.0.1:7450");
  CHECK(c.address_source == "default");

  data.Write("api_address", "127.0.0.5:7999\n");
  c = Discover(in);
  CHECK(c.address == "127.0.0.5:7999");
  CHECK(c.address_source == data.path() + "/api_address");

  env.vars["TRAINTL_ADDRESS"] = "10.0.0.2:7000";
  in = env.Inputs(system.path());
  c = Discover(in);
  CHECK(c.address == "10.0.0.2:7000");
  CHECK(c.address_source == "TRAINTL_ADDRESS");

  in.address_flag = "10.0.0.3:7001";
  c = Discover(in);
  CHECK(c.host == "10.0.0.3");
  CHECK(c.port == 7001);
  CHECK(c.address_source == "--address");

  in.address_flag = "bad:port";
  auto bad = DiscoverConnection(in);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("--address"));
}

TEST_CASE("token: TRAINTL_TOKEN, then --token-file, then <data_dir>/token") {
  TempDir data;
  TempDir system;
  data.Write("token", "file-token\n");
  std::string other = data.Write("other-token", "  flag-token \n");
  Env env;
  auto in = env.Inputs(system.path());
  in.data_dir_flag = data.path();

  Connection c = Discover(in);
  CHECK(c.token == "file-token");
  CHECK(c.token_source == data.path() + "/token");
  CHECK(c.token_path == data.path() + "/token");
  CHECK(c.token_problem.empty());

  in.token_file_flag = other;
  c = Discover(in);
  CHECK(c.token == "flag-token");
  CHECK(c.token_source == other);
  CHECK(c.token_path == other);

  env.vars["TRAINTL_TOKEN"] = "env-token";
  auto in2 = env.Inputs(system.path());
  in2.data_dir_flag = data.path();
  in2.token_file_flag = other;
  c = Discover(in2);
  CHECK(c.token == "env-token");
  CHECK(c.token_source == "TRAINTL_TOKEN");
  CHECK(c.token_path == other);

  // An explicit token file that cannot be read is an error; a missing default is not.
  in.token_file_flag = data.path() + "/nope";
  auto bad = DiscoverConnection(in);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == traintl::Status::Code::kPermissionDenied);
  CHECK_THAT(bad.status().message(), Catch::Contains("nope"));

  TempDir empty;
  in.token_file_flag.clear();
  in.data_dir_flag = empty.path();
  c = Discover(in);
  CHECK(c.token.empty());
  CHECK_THAT(c.token_problem, Catch::Contains(empty.path() + "/token"));
}

TEST_CASE("data dir: flag, env, system dir with a readable token, XDG, HOME") {
  TempDir system;
  TempDir home;
  Env env;
  env.vars["HOME"] = home.path();

  // The system dir has no token yet: ~/.local/state/traintl.
  Connection c = Discover(env.Inputs(system.path()));
  CHECK(c.data_dir == home.path() + "/.local/state/traintl");

  env.vars["XDG_STATE_HOME"] = home.path() + "/state";
  c = Discover(env.Inputs(system.path()));
  CHECK(c.data_dir == home.path() + "/state/traintl");

  system.Write("token", "root-token");
  c = Discover(env.Inputs(system.path()));
  CHECK(c.data_dir == system.path());
  CHECK(c.token == "root-token");

  if (geteuid() != 0) {  // root reads everything
    REQUIRE(chmod((system.path() + "/token").c_str(), 0) == 0);
    c = Discover(env.Inputs(system.path()));
    CHECK(c.data_dir == home.path() + "/state/traintl");
  }

  env.vars["TRAINTL_DATA_DIR"] = "/from/env";
  c = Discover(env.Inputs(system.path()));
  CHECK(c.data_dir == "/from/env");

  auto in = env.Inputs(system.path());
  in.data_dir_flag = "/from/flag";
  c = Discover(in);
  CHECK(c.data_dir == "/from/flag");
  CHECK(c.token_path == "/from/flag/token");
}

TEST_CASE("config files: the user's wins over the system's, flags and env win over both") {
  TempDir system;
  TempDir home;
  TempDir data;
  Env env;
  env.vars["HOME"] = home.path();
  env.vars["TRAINTL_DATA_DIR"] = data.path();
  data.Write("api_address", "127.0.0.9:7001\n");
  data.Write("token", "data-token");

  // No config file: as before.
  Connection c = Discover(env.Inputs(system.path()));
  CHECK(c.address == "127.0.0.9:7001");
  CHECK(c.token == "data-token");
  CHECK(c.config_files.empty());

  // The system file: address and a token file relative to its directory.
  std::string sys_conf = system.Write("etc/traintl.conf",
                                      "# cluster head\naddress = 10.0.0.1:7450\n"
                                      "token-file = cluster.token\n");
  system.Write("etc/cluster.token", "cluster-token\n");
  c = Discover(env.Inputs(system.path()));
  CHECK(c.address == "10.0.0.1:7450");
  CHECK(c.address_source == sys_conf);
  CHECK(c.token == "cluster-token");
  CHECK(c.token_source == system.path() + "/etc/cluster.token");
  CHECK(c.token_path == c.token_source);
  CHECK(c.config_files == std::vector<std::string>{sys_conf});

  // ~/.config/traintl/config overrides what it sets, keeps the rest; "~/" is HOME.
  std::string user_conf = home.Write(".config/traintl/config", "token-file = ~/my.token\n");
  home.Write("my.token", "user-token");
  c = Discover(env.Inputs(system.path()));
  CHECK(c.address == "10.0.0.1:7450");
  CHECK(c.token == "user-token");
  CHECK(c.token_source == home.path() + "/my.token");
  CHECK(c.config_files == std::vector<std::string>{sys_conf, user_conf});

  // $XDG_CONFIG_HOME moves the user's file.
  TempDir xdg;
  xdg.Write("traintl/config", "address = 10.0.0.2:7450\n");
  env.vars["XDG_CONFIG_HOME"] = xdg.path();
  c = Discover(env.Inputs(system.path()));
  CHECK(c.address == "10.0.0.2:7450");
  CHECK(c.address_source == xdg.path() + "/traintl/config");
  CHECK(c.token == "cluster-token");  // ~/.config/traintl/config is no longer read
  env.vars.erase("XDG_CONFIG_HOME");

  // Environment and flags win.
  env.vars["TRAINTL_ADDRESS"] = "10.0.0.3:7450";
  auto in = env.Inputs(system.path());
  c = Discover(in);
  CHECK(c.address == "10.0.0.3:7450");
  CHECK(c.address_source == "TRAINTL_ADDRESS");
  in.address_flag = "10.0.0.4:7450";
  std::string flag_token = data.Write("flag.token", "flag-token");
  in.token_file_flag = flag_token;
  c = Discover(in);
  CHECK(c.address == "10.0.0.4:7450");
  CHECK(c.token == "flag-token");
  env.vars["TRAINTL_TOKEN"] = "env-token";
  in = env.Inputs(system.path());
  c = Discover(in);
  CHECK(c.token == "env-token");
}

TEST_CASE("config files: data-dir, then the data dir's files") {
  TempDir system;
  TempDir data;
  Env env;
  data.Write("api_address", "127.0.0.7:7002\n");
  data.Write("token", "t");
  system.Write("etc/traintl.conf", "data-dir = " + data.path() + "\n");
  Connection c = Discover(env.Inputs(system.path()));
  CHECK(c.data_dir == data.path());
  CHECK(c.address == "127.0.0.7:7002");
  CHECK(c.token == "t");
  // TRAINTL_DATA_DIR wins.
  TempDir other;
  env.vars["TRAINTL_DATA_DIR"] = other.path();
  c = Discover(env.Inputs(system.path()));
  CHECK(c.data_dir == other.path());
}

TEST_CASE("config files: mistakes are errors that name the file") {
  TempDir system;
  Env env;
  auto in = env.Inputs(system.path());
  std::string conf = system.Write("etc/traintl.conf", "adress = 10.0.0.1:7450\n");
  auto r = DiscoverConnection(in);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == traintl::Status::Code::kInvalidArgument);
  CHECK_THAT(r.status().message(), Catch::Contains(conf));
  CHECK_THAT(r.status().message(), Catch::Contains("adress"));

  system.Write("etc/traintl.conf", "address = a:1\naddress = b:2\n");
  r = DiscoverConnection(in);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains(conf));

  system.Write("etc/traintl.conf", "address = host:99999\n");
  r = DiscoverConnection(in);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains(conf));

  // A token file named in a config file must be readable, like --token-file.
  system.Write("etc/traintl.conf", "token-file = /nonexistent/traintl.token\n");
  r = DiscoverConnection(in);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == traintl::Status::Code::kPermissionDenied);
  CHECK_THAT(r.status().message(), Catch::Contains("/nonexistent/traintl.token"));
  CHECK_THAT(r.status().message(), Catch::Contains(conf));

  if (geteuid() != 0) {
    system.Write("etc/traintl.conf", "address = a:1\n");
    REQUIRE(chmod(conf.c_str(), 0) == 0);
    r = DiscoverConnection(in);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(), Catch::Contains(conf));
  }
}
