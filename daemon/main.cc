// traintld: parses the options and runs the daemon (daemon/daemon.h owns the rest).
#include <signal.h>

#include "daemon/daemon.h"
#include "daemon/daemon_config.h"

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  traintl::DaemonConfig cfg;
  int exit_code = 0;
  if (!traintl::ParseDaemonConfig(argc, argv, &cfg, &exit_code)) return exit_code;
  traintl::Daemon daemon(std::move(cfg), argc, argv);
  return daemon.Run();
}
