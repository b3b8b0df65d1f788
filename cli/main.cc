// traintl: the command-line client of traintld. Wiring only: parse, discover the daemon,
// build the HTTP client and the context, run the verb.

#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "cli/command_line.h"
#include "cli/connection.h"
#include "cli/context.h"
#include "cli/exit_codes.h"
#include "cli/http_client.h"
#include "cli/verbs.h"

namespace {

int TerminalWidth() {
  struct winsize ws {};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace traintl::cli;
  std::vector<std::string> args(argv + 1, argv + argc);
  auto parsed = ParseCommandLine(args);
  if (!parsed.ok()) {
    std::cerr << "traintl: " << parsed.status().message() << "\n";
    return kExitUsage;
  }
  const CommandLine& cl = *parsed;
  if (cl.global.help) {
    std::cout << HelpText(cl.verb);
    return kExitOk;
  }
  if (cl.global.version) {
    std::cout << "traintl 0.1.0\n";
    return kExitOk;
  }

  DiscoveryInputs inputs;
  inputs.address_flag = cl.global.address;
  inputs.token_file_flag = cl.global.token_file;
  inputs.data_dir_flag = cl.global.data_dir;
  inputs.ca_file_flag = cl.global.ca_file;
  inputs.getenv = ProcessGetenv;
  auto connection = DiscoverConnection(inputs);
  if (!connection.ok()) {
    std::cerr << "traintl: " << connection.status().message() << "\n";
    return connection.status().code() == traintl::Status::Code::kPermissionDenied ? kExitAuth
                                                                                  : kExitUsage;
  }

  BeastHttpClientOptions client_options;
  client_options.host = connection->host;
  client_options.port = connection->port;
  client_options.token = connection->token;
  client_options.tls = connection->tls;
  client_options.tls_ca_file = connection->ca_file;
  BeastHttpClient client(client_options);

  CliContext ctx;
  ctx.client = &client;
  ctx.connection = *connection;
  ctx.out = &std::cout;
  ctx.err = &std::cerr;
  ctx.json = cl.global.json;
  ctx.out_is_tty = isatty(STDOUT_FILENO) == 1;
  ctx.terminal_width = ctx.out_is_tty ? TerminalWidth() : 0;
  ctx.now_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  ctx.sleep_ms = [](int64_t ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); };
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/') {
    ctx.cache_dir = std::string(xdg) + "/traintl";
  } else if (const char* home = std::getenv("HOME"); home != nullptr && home[0] == '/') {
    ctx.cache_dir = std::string(home) + "/.cache/traintl";
  }
  ctx.new_client = [client_options]() -> std::unique_ptr<HttpClient> {
    return std::make_unique<BeastHttpClient>(client_options);
  };
  int code = RunVerb(cl, ctx);
  std::cout.flush();
  return code;
}
