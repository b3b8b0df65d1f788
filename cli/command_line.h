// Command-line parsing for `traintl`: the verbs, their options, and help texts.
//
//   traintl [GLOBAL OPTIONS] VERB [ARGS] [OPTIONS]
//
// Global options may appear before or after the verb. `--help` works alone, with a verb
// (`traintl submit --help`), and as `traintl help [VERB]`.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"

namespace traintl {
namespace cli {

struct GlobalOptions {
  std::string address;     // --address host:port; "" = discover
  std::string token_file;  // --token-file PATH; "" = discover
  std::string data_dir;    // --data-dir DIR; "" = discover
  std::string ca_file;     // --ca-file PATH; "" = discover
  bool json = false;       // --json
  bool help = false;       // -h/--help (or the `help` verb)
  bool version = false;    // --version
};

struct SubmitOptions {
  std::string spec_path;  // the job.json argument
  bool wait = false;      // --wait: follow the job to its end; exit code = outcome
  bool logs = false;      // --logs (with --wait): also print rank 0's output as it comes
};

struct LogsOptions {
  std::string job;
  // --rank N or --rank 0,2; empty = every rank, interleaved (each line prefixed with its
  // rank when more than one is shown).
  std::vector<int> ranks;
  int attempt = 0;      // --attempt N; 0 = the latest attempt (and, with -f, those after it)
  bool follow = false;  // -f/--follow
  int tail = -1;        // --tail/-n N; -1 = the whole log
  std::string since;    // --since 5m|2h|30s|1d or an ISO time (UTC); "" = from the start
};

struct ListOptions {
  std::string state;  // --state S; "" = any
  std::string name;   // --name N; "" = any
  int limit = 20;     // --limit N: the newest N jobs
  bool all = false;   // --all: every matching job (page by page)
};

// Options of the verbs that act on one job (stop, resubmit, delete).
struct JobVerbOptions {
  bool wait = false;         // stop --wait: until the job has ended; resubmit --wait: as submit's
  bool checkpoints = false;  // delete --checkpoints: also remove the trial dir
};

// `traintl tune`: run a tune spec, or act on an experiment.
struct TuneOptions {
  std::string action;        // "run" (TUNE_JSON), "status", "stop", "resume", "delete" or "list"
  std::string argument;      // the tune.json path (run) or the experiment (the others)
  bool wait = false;         // --wait (run, resume): follow the experiment until it ends
  bool checkpoints = false;  // --checkpoints (delete): remove the experiment dir too
};

// `traintl metrics JOB`: the table, or with --plot a picture of the curves.
struct MetricsOptions {
  std::string plot;                  // --plot FILE: .svg or .png; "" = print the table
  std::vector<std::string> metrics;  // --metric NAME[,NAME..]: the panels; empty = default
  std::vector<int> ranks;            // --rank N[,M..]: these ranks' reports; empty = rank 0's
  bool all_ranks = false;            // --all-ranks: every rank's reports
};

struct CommandLine {
  std::string verb;  // "" when only global options were given (e.g. `traintl --help`)
  GlobalOptions global;
  SubmitOptions submit;
  LogsOptions logs;
  ListOptions list;
  JobVerbOptions job_verb;
  TuneOptions tune;
  MetricsOptions metrics;
  // The JOB argument of status, stop, checkpoints and metrics ("" for `status` alone).
  std::string job;
};

// Parses the arguments after argv[0]. Errors (InvalidArgument) carry a message fit to
// print after "traintl: "; the caller exits with kExitUsage. With --help, missing
// arguments are not errors.
Result<CommandLine> ParseCommandLine(const std::vector<std::string>& args);

// The help text: general usage (verbs, global options, exit codes) when `verb` is empty,
// else that verb's usage and options. Unknown verbs get the general text.
std::string HelpText(const std::string& verb);

// The unix ms that `--since` text means at `now_ms`: a duration back from now ("30s",
// "5m", "2h", "1d") or a UTC time ("2026-12-03T09:00:00", "2026-12-03T09:00:00.250",
// "2026-12-03 09:00", a trailing "Z" allowed). InvalidArgument saying what is accepted.
Result<int64_t> ParseSince(const std::string& text, int64_t now_ms);

// The verbs, in help order.
const std::vector<std::string>& VerbNames();

}  // namespace cli
}  // namespace traintl
