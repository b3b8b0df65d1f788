#include "cli/command_line.h"

#include <algorithm>
#include <boost/program_options.hpp>
#include <ctime>
#include <sstream>

#include "cli/plot.h"
#include "common/spelling.h"
#include "proto/rank_list.h"

namespace traintl {
namespace cli {
namespace {

namespace po = boost::program_options;

struct VerbDef {
  const char* name;
  const char* args;  // argument synopsis
  const char* summary;
  const char* details;  // extra help paragraph; may be ""
  size_t min_args;
  size_t max_args;
  void (*add_options)(po::options_description*, CommandLine*);
  void (*assign)(const std::vector<std::string>&, CommandLine*);
};

void NoOptions(po::options_description*, CommandLine*) {}
void NoArgs(const std::vector<std::string>&, CommandLine*) {}
void AssignJob(const std::vector<std::string>& a, CommandLine* cl) {
  if (!a.empty()) cl->job = a[0];
}

const std::vector<VerbDef>& Verbs() {
  static const std::vector<VerbDef> kVerbs = {
      {"submit", "JOB_JSON [--wait [--logs]]", "upload the training library and submit a job",
       "Reads JOB_JSON, uploads the file named by entrypoint.library (content-addressed by\n"
       "SHA-256, skipped when the cluster already has it) and submits the job. A relative\n"
       "library path is resolved against the current directory, not the spec's directory.\n"
       "Prints the job id. With --wait, shows the job's progress until it ends and exits\n"
       "with its outcome: 0 SUCCEEDED, 1 FAILED, 6 STOPPED.\n",
       1, 1,
       [](po::options_description* d, CommandLine* cl) {
         d->add_options()("wait", po::bool_switch(&cl->submit.wait),
                          "follow the job until it ends; the exit code is its outcome")(
             "logs", po::bool_switch(&cl->submit.logs),
             "with --wait: also print rank 0's output as it comes, across restarts");
       },
       [](const std::vector<std::string>& a, CommandLine* cl) { cl->submit.spec_path = a[0]; }},
      {"validate", "JOB_JSON", "check a job spec and its code without submitting",
       "Runs every check `submit` does - the spec, the working_dir's module and function or\n"
       "command, the daemon's checks (could the cluster ever run it) - plus the training\n"
       "library's ELF file: a shared object of this machine exporting traintl's ABI and the\n"
       "entry point. Nothing is uploaded or stored. Exit 0 when valid, 2 when not.\n",
       1, 1, NoOptions,
       [](const std::vector<std::string>& a, CommandLine* cl) { cl->submit.spec_path = a[0]; }},
      {"status", "[JOB]", "show one job in detail, or the newest jobs as a table",
       "With JOB: state, attempts (with failed rank, exit code or signal), metrics, the\n"
       "latest checkpoint and, for a failed job, the tail of the failing rank's log.\n"
       "Without JOB: the same table as `traintl list`.\n",
       0, 1, NoOptions, AssignJob},
      {"list", "[--state S] [--name N] [--limit N | --all]", "list jobs, newest first",
       "Shows the newest 20 jobs (--limit N for another count, --all for every job),\n"
       "optionally only those in one state or of one name.\n",
       0, 0,
       [](po::options_description* d, CommandLine* cl) {
         d->add_options()("state", po::value<std::string>(&cl->list.state)->value_name("S"),
                          "only jobs in this state: pending, starting, running, succeeded, "
                          "failed or stopped")(
             "name", po::value<std::string>(&cl->list.name)->value_name("N"),
             "only jobs of this name")("limit", po::value<int>(&cl->list.limit)->value_name("N"),
                                       "show the newest N jobs (default 20)")(
             "all", po::bool_switch(&cl->list.all), "show every matching job");
       },
       NoArgs},
      {"logs", "JOB [--rank N[,M..]] [--attempt N] [-f] [-n N] [--since T]",
       "print the logs of a job's ranks",
       "Prints the log of every rank of the latest attempt, interleaved in the order the\n"
       "lines were written (to within 0.25 s), each line prefixed with its rank ([rank 1]);\n"
       "--rank picks ranks (one rank: no prefix). With -f, waits for a job that has not\n"
       "started, keeps printing new lines, follows the job across restarts (a line\n"
       "\"--- attempt N ---\" marks each) and ends when the job ends; with --attempt, only\n"
       "that attempt. --since takes 30s, 5m, 2h, 1d or a UTC time (2026-12-03T09:00:00).\n"
       "The output is the log text, also with --json.\n",
       1, 1,
       [](po::options_description* d, CommandLine* cl) {
         d->add_options()("rank", po::value<std::string>()->value_name("N[,M..]"),
                          "the ranks whose logs to print (default: every rank)")(
             "attempt", po::value<int>(&cl->logs.attempt)->value_name("N"),
             "the attempt (1, 2, ...; default: the latest)")(
             "follow,f", po::bool_switch(&cl->logs.follow),
             "keep printing new lines, across restarts, until the job ends")(
             "tail,n", po::value<int>(&cl->logs.tail)->value_name("N"), "only the last N lines")(
             "since", po::value<std::string>(&cl->logs.since)->value_name("T"),
             "only lines written since T (30s, 5m, 2h, 1d, or a UTC time)");
       },
       [](const std::vector<std::string>& a, CommandLine* cl) { cl->logs.job = a[0]; }},
      {"stop", "JOB [--wait]", "stop a job (its workers get SIGTERM, then SIGKILL)",
       "Asks the job to stop: its ranks get the stop request, then SIGTERM and SIGKILL after\n"
       "the daemon's graces. With --wait, returns once the job has ended.\n",
       1, 1,
       [](po::options_description* d, CommandLine* cl) {
         d->add_options()("wait", po::bool_switch(&cl->job_verb.wait),
                          "return once the job has ended and its workers are gone");
       },
       AssignJob},
      {"resubmit", "JOB [--wait]", "submit a job again: same spec, same code",
       "Creates a new job with JOB's spec and the library or working_dir it was submitted\n"
       "with (as stored by the cluster; local files are not read again). Prints the new id.\n"
       "With --wait, follows it as `submit --wait` does.\n",
       1, 1,
       [](po::options_description* d, CommandLine* cl) {
         d->add_options()("wait", po::bool_switch(&cl->job_verb.wait),
                          "follow the new job until it ends; the exit code is its outcome");
       },
       AssignJob},
      {"delete", "JOB [--checkpoints]", "forget a finished job: its records and logs",
       "Deletes a job that has ended: its records (attempts, metrics, checkpoint records) and\n"
       "its logs. Its trial dir, with the checkpoint files, stays unless --checkpoints is\n"
       "given. A job that has not ended is refused: stop it first.\n",
       1, 1,
       [](po::options_description* d, CommandLine* cl) {
         d->add_options()("checkpoints", po::bool_switch(&cl->job_verb.checkpoints),
                          "also remove the job's trial dir (its checkpoints)");
       },
       AssignJob},
      {"tune",
       "TUNE_JSON [--wait] | status [EXP] | stop EXP | resume EXP [--wait] | delete EXP "
       "[--checkpoints] | list",
       "tune hyperparameters: trials as jobs, with search spaces and schedulers",
       "`tune TUNE_JSON` uploads the trainer's code and starts the experiment that the tune\n"
       "spec describes ({\"trainer\": <job spec>, \"param_space\": {...}, \"tune_config\":\n"
       "{...}}; see traintl-job(5)) and prints its id. Each trial is a job of its own.\n"
       "`tune status EXP` shows the trials sorted by the metric, the best trial and its best\n"
       "checkpoint (without EXP: the experiments, newest first, as `tune list`). `tune stop\n"
       "EXP` stops the experiment and its trials; `tune resume EXP` continues them from\n"
       "their latest checkpoints. With --wait, follows the experiment until it ends: exit 0\n"
       "when it ended with a best trial, 1 otherwise, 6 when stopped. `tune delete EXP`\n"
       "forgets an experiment that has ended or was stopped, with its trials' jobs (as\n"
       "`delete`); its experiment dir stays unless --checkpoints is given.\n",
       1, 2,
       [](po::options_description* d, CommandLine* cl) {
         d->add_options()("wait", po::bool_switch(&cl->tune.wait),
                          "follow the experiment until it ends")(
             "checkpoints", po::bool_switch(&cl->tune.checkpoints),
             "tune delete: also remove the experiment dir (its trials' checkpoints and results)");
       },
       [](const std::vector<std::string>& a, CommandLine* cl) {
         static const char* kActions[] = {"status", "stop", "resume", "delete", "list"};
         cl->tune.action = "run";
         for (const char* action : kActions) {
           if (a[0] == action) cl->tune.action = action;
         }
         if (cl->tune.action == "run") {
           cl->tune.argument = a[0];
           if (a.size() > 1) cl->tune.action = "error: unexpected argument '" + a[1] + "'";
         } else if (a.size() > 1) {
           cl->tune.argument = a[1];
         }
       }},
      {"nodes", "", "list the cluster's nodes and their resources", "", 0, 0, NoOptions, NoArgs},
      {"dashboard", "", "print the web dashboard's address and a link that logs in",
       "The dashboard is served by every daemon under /ui/ on the API address. The link\n"
       "carries the cluster token (the page turns it into a session cookie and drops it\n"
       "from the address bar); the page's login form takes the token too.\n",
       0, 0, NoOptions, NoArgs},
      {"checkpoints", "JOB", "list a job's retained checkpoints, oldest first",
       "The latest committed checkpoint (the one a restart resumes from) is marked *.\n", 1, 1,
       NoOptions, AssignJob},
      {"metrics", "JOB [--rank N[,M..] | --all-ranks] [--plot FILE [--metric NAME[,NAME..]]]",
       "show the metrics a job reported (rank 0), and the latest; or plot them",
       "Prints rank 0's reports, every attempt's, and the latest metrics; --rank or\n"
       "--all-ranks print those ranks' latest reports as the head keeps them (1000 per rank)\n"
       "instead. With --plot, draws\n"
       "them instead to FILE (.svg or .png): one panel per metric, stacked, each with a curve\n"
       "per rank and attempt (rank 0 thick, the other ranks thin) against the seconds since\n"
       "the job's first report, and a dashed line where each restart's attempt began. The\n"
       "default panels are every numeric metric but epoch, rank, world_size, local_rank,\n"
       "node_rank, attempt, restored_epoch, training_iteration and seq; --metric picks\n"
       "them. Prints \"wrote FILE (N points, M metrics)\", also with --json. Exit 5 when the\n"
       "job has reported no metrics yet, 2 for a metric its reports lack.\n",
       1, 1,
       [](po::options_description* d, CommandLine* cl) {
         d->add_options()("plot", po::value<std::string>(&cl->metrics.plot)->value_name("FILE"),
                          "draw the metrics to FILE, an .svg or .png, instead of printing them")(
             "metric", po::value<std::vector<std::string>>()->value_name("NAME[,NAME..]"),
             "with --plot: the metrics to draw, in this order (default: every numeric one but "
             "bookkeeping)")("rank", po::value<std::string>()->value_name("N[,M..]"),
                             "these ranks' reports")("all-ranks",
                                                     po::bool_switch(&cl->metrics.all_ranks),
                                                     "every rank's reports, not only rank 0's");
       },
       AssignJob},
  };
  return kVerbs;
}

const VerbDef* FindVerb(const std::string& name) {
  for (const auto& v : Verbs()) {
    if (name == v.name) return &v;
  }
  return nullptr;
}

po::options_description GlobalDescription(GlobalOptions* g) {
  po::options_description d("Global options (before or after the command)", 100, 50);
  d.add_options()("address", po::value<std::string>(&g->address)->value_name("HOST:PORT"),
                  "the traintld to talk to (default: $TRAINTL_ADDRESS, else the config "
                  "files' address, else <data-dir>/api_address, else 127.0.0.1:7450)")(
      "token-file", po::value<std::string>(&g->token_file)->value_name("PATH"),
      "file holding the API token (default: the config files' token-file, else "
      "<data-dir>/token). $TRAINTL_TOKEN, when set, holds the token itself and wins over "
      "any file")("data-dir", po::value<std::string>(&g->data_dir)->value_name("DIR"),
                  "the daemon's data directory (default: $TRAINTL_DATA_DIR, else the config files' "
                  "data-dir, else /var/lib/traintl when its token is readable, else "
                  "$XDG_STATE_HOME/traintl or ~/.local/state/traintl)")(
      "ca-file", po::value<std::string>(&g->ca_file)->value_name("PATH"),
      "PEM CA certificates to verify an https:// daemon with (default: $TRAINTL_CA_FILE, "
      "else the config files' ca-file, else the system's store)")(
      "json", po::bool_switch(&g->json), "print the daemon's JSON answer (for scripts)")(
      "help,h", po::bool_switch(&g->help), "show help")("version", po::bool_switch(&g->version),
                                                        "show the version");
  return d;
}

// Options that take a value as the next argument, so that scanning for the verb can skip it.
bool TakesValue(const std::string& arg) {
  static const char* kWithValue[] = {
      "--address", "--token-file", "--data-dir", "--ca-file", "--rank",  "--attempt", "--tail",
      "-n",        "--since",      "--state",    "--name",    "--limit", "--plot",    "--metric"};
  return std::find(std::begin(kWithValue), std::end(kWithValue), arg) != std::end(kWithValue);
}

std::string UsageLine(const VerbDef& v) {
  std::string line = std::string("traintl ") + v.name;
  if (*v.args) line += std::string(" ") + v.args;
  return line;
}

}  // namespace

Result<int64_t> ParseSince(const std::string& text, int64_t now_ms) {
  const Status bad = Status::InvalidArgument(
      "--since takes a duration (30s, 5m, 2h, 1d) or a UTC time (2026-12-03T09:00:00), got '" +
      text + "'");
  if (text.size() >= 2 && text.size() <= 10 &&
      text.find_first_not_of("0123456789", 0) == text.size() - 1) {
    const int64_t n = std::stoll(text.substr(0, text.size() - 1));
    const char unit = text.back();
    const int64_t ms = unit == 's'   ? 1000
                       : unit == 'm' ? 60000
                       : unit == 'h' ? 3600000
                       : unit == 'd' ? 86400000
                                     : 0;
    if (ms == 0) return bad;
    return now_ms - n * ms;
  }
  std::tm tm{};
  std::string t = text;
  if (!t.empty() && (t.back() == 'Z' || t.back() == 'z')) t.pop_back();
  // Milliseconds after the seconds: "...:00.250".
  int64_t frac_ms = 0;
  if (const size_t dot = t.rfind('.');
      dot != std::string::npos && dot + 1 < t.size() && t.size() - dot - 1 <= 3 &&
      t.find_first_not_of("0123456789", dot + 1) == std::string::npos) {
    frac_ms = std::stoll(t.substr(dot + 1));
    for (size_t digits = t.size() - dot - 1; digits < 3; ++digits) frac_ms *= 10;
    t.resize(dot);
  }
  for (const char* format :
       {"%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%d"}) {
    tm = std::tm{};
    const char* end = strptime(t.c_str(), format, &tm);
    if (end != nullptr && *end == '\0') return static_cast<int64_t>(timegm(&tm)) * 1000 + frac_ms;
  }
  return bad;
}

const std::vector<std::string>& VerbNames() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names;
    for (const auto& v : Verbs()) names.push_back(v.name);
    return names;
  }();
  return kNames;
}

Result<CommandLine> ParseCommandLine(const std::vector<std::string>& args) {
  CommandLine cl;
  std::vector<std::string> rest;
  bool help_verb = false;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") break;
    if (a.size() > 1 && a[0] == '-') {
      rest.push_back(a);
      if (TakesValue(a) && i + 1 < args.size()) rest.push_back(args[++i]);
      continue;
    }
    if (a == "help" && !help_verb && cl.verb.empty()) {
      help_verb = true;
      continue;
    }
    cl.verb = a;
    ++i;
    break;
  }
  rest.insert(rest.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());

  const VerbDef* verb = nullptr;
  if (!cl.verb.empty()) {
    verb = FindVerb(cl.verb);
    if (verb == nullptr) {
      std::vector<std::string> names;
      for (const auto& v : Verbs()) names.push_back(v.name);
      const std::string near = Closest(cl.verb, names);
      return Status::InvalidArgument(
          "unknown command '" + cl.verb + "'" +
          (near.empty() ? " (run 'traintl --help' for the list)"
                        : " (did you mean '" + near + "'? run 'traintl --help' for the list)"));
    }
  }

  po::options_description all = GlobalDescription(&cl.global);
  if (verb != nullptr) {
    po::options_description verb_options;
    verb->add_options(&verb_options, &cl);
    all.add(verb_options);
  }
  std::vector<std::string> positionals;
  all.add_options()("positional", po::value<std::vector<std::string>>(&positionals));
  po::positional_options_description pos;
  pos.add("positional", -1);

  std::string context = verb ? std::string(" (see 'traintl ") + verb->name + " --help')"
                             : std::string(" (see 'traintl --help')");
  try {
    po::variables_map vm;
    po::store(
        po::command_line_parser(rest)
            .options(all)
            .positional(pos)
            .style(po::command_line_style::default_style & ~po::command_line_style::allow_guessing)
            .run(),
        vm);
    po::notify(vm);
    if (verb != nullptr) {
      if (vm.count("rank")) {
        Result<std::vector<int>> ranks = ParseRankList(vm["rank"].as<std::string>());
        if (!ranks.ok())
          return Status::InvalidArgument("--rank must be " + ranks.status().message());
        cl.logs.ranks = std::move(*ranks);
        cl.metrics.ranks = cl.logs.ranks;  // --rank of `metrics`
      }
      if (vm.count("since")) {
        if (Result<int64_t> since = ParseSince(cl.logs.since, 0); !since.ok())
          return since.status();
      }
      if (vm.count("attempt") && cl.logs.attempt < 1) {
        return Status::InvalidArgument("--attempt must be 1 or more");
      }
      if (vm.count("tail") && cl.logs.tail < 0) {
        return Status::InvalidArgument("--tail must be 0 or more");
      }
      if (vm.count("limit") && (cl.list.limit < 1 || cl.list.limit > 1000)) {
        return Status::InvalidArgument("--limit must be 1..1000 (--all shows every job)");
      }
      if (cl.submit.logs && !cl.submit.wait) {
        return Status::InvalidArgument("--logs goes with --wait");
      }
      if (vm.count("plot")) {
        if (Result<PlotFormat> format = PlotFormatForPath(cl.metrics.plot); !format.ok())
          return format.status();
      }
      if (vm.count("metric")) {
        if (!vm.count("plot")) return Status::InvalidArgument("--metric goes with --plot");
        for (const auto& list : vm["metric"].as<std::vector<std::string>>()) {
          for (size_t start = 0;;) {
            const size_t comma = list.find(',', start);
            std::string name = list.substr(start, comma - start);
            if (name.empty()) {
              return Status::InvalidArgument("--metric takes comma-separated metric names, got '" +
                                             list + "'");
            }
            cl.metrics.metrics.push_back(std::move(name));
            if (comma == std::string::npos) break;
            start = comma + 1;
          }
        }
      }
      if (vm.count("rank") && cl.metrics.all_ranks) {
        return Status::InvalidArgument("--rank and --all-ranks exclude each other");
      }
      if (vm.count("limit") && cl.list.all) {
        return Status::InvalidArgument("--limit and --all exclude each other");
      }
    }
  } catch (const po::error& e) {
    return Status::InvalidArgument(e.what() + context);
  }
  if (help_verb) cl.global.help = true;

  if (verb == nullptr) {
    if (!positionals.empty()) {
      return Status::InvalidArgument("unexpected argument '" + positionals[0] + "'" + context);
    }
    if (!cl.global.help && !cl.global.version) {
      return Status::InvalidArgument("no command given" + context);
    }
    return cl;
  }
  if (cl.global.help) return cl;
  if (positionals.size() > verb->max_args) {
    return Status::InvalidArgument("unexpected argument '" + positionals[verb->max_args] +
                                   "'; usage: " + UsageLine(*verb));
  }
  if (positionals.size() < verb->min_args) {
    return Status::InvalidArgument(std::string("missing argument; usage: ") + UsageLine(*verb));
  }
  for (const auto& p : positionals) {
    if (p.empty()) return Status::InvalidArgument("empty argument; usage: " + UsageLine(*verb));
  }
  verb->assign(positionals, &cl);
  if (cl.verb == "tune") {
    const std::string& action = cl.tune.action;
    if (action.rfind("error: ", 0) == 0)
      return Status::InvalidArgument(action.substr(7) + "; usage: " + UsageLine(*verb));
    if ((action == "stop" || action == "resume" || action == "delete") && cl.tune.argument.empty())
      return Status::InvalidArgument("tune " + action +
                                     " needs the experiment; usage: " + UsageLine(*verb));
    if (action == "list" && !cl.tune.argument.empty())
      return Status::InvalidArgument("tune list takes no argument");
    if (cl.tune.wait && action != "run" && action != "resume")
      return Status::InvalidArgument("--wait goes with tune TUNE_JSON or tune resume");
    if (cl.tune.checkpoints && action != "delete")
      return Status::InvalidArgument("--checkpoints goes with tune delete");
  }
  return cl;
}

std::string HelpText(const std::string& verb_name) {
  GlobalOptions g;
  std::ostringstream out;
  const VerbDef* verb = FindVerb(verb_name);
  if (verb != nullptr) {
    CommandLine cl;
    out << "Usage: " << UsageLine(*verb) << " [GLOBAL OPTIONS]\n\n";
    out << "Purpose: " << verb->summary << ".\n";
    if (*verb->details) out << "\n" << verb->details;
    po::options_description verb_options("Options", 100, 50);
    verb->add_options(&verb_options, &cl);
    if (!verb_options.options().empty()) out << "\n" << verb_options;
    out << "\n" << GlobalDescription(&g);
    return out.str();
  }
  out << "Usage: traintl [GLOBAL OPTIONS] COMMAND [ARGS] [OPTIONS]\n\n"
         "Submit, watch and stop training jobs on a traintl cluster.\n\nCommands:\n";
  for (const auto& v : Verbs()) {
    std::string left = std::string(v.name) + (*v.args ? std::string(" ") + v.args : "");
    if (left.size() > 26) {
      out << "  " << left << "\n" << std::string(30, ' ') << v.summary << "\n";
    } else {
      out << "  " << left << std::string(28 - left.size(), ' ') << v.summary << "\n";
    }
  }
  out << "\nJOB is a job id, a unique prefix of one, or a job's name (its newest job).\n\n"
      << GlobalDescription(&g)
      << "\nConfig files: /etc/traintl/traintl.conf, then ~/.config/traintl/config\n"
         "($XDG_CONFIG_HOME/traintl/config), which wins; \"key = value\" lines setting\n"
         "address, token-file, data-dir or ca-file. Options and environment variables win over "
         "both.\n"
      << "\nExit codes:\n"
         "  0  success (submit --wait: the job SUCCEEDED)\n"
         "  1  submit --wait: the job FAILED\n"
         "  2  usage error, unreadable or invalid job spec\n"
         "  3  the daemon is unreachable or not ready\n"
         "  4  the daemon rejected the token, or the token file is unreadable\n"
         "  5  unknown job, or a job prefix matching several jobs\n"
         "  6  submit --wait: the job was STOPPED\n"
         "  7  any other error from the daemon\n"
         "\nRun 'traintl COMMAND --help' for a command's options.\n";
  return out.str();
}

}  // namespace cli
}  // namespace traintl
