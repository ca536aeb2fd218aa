// status_command.cpp: `ddprun status` (status_command.h).
#include "launcher/status_command.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>

#include "base/text.h"
#include "launcher/jobwide/job_status.h"
#include "launcher/jobwide/status_publisher.h"
#include "launcher/options/status_options.h"
#include "rendezvous/rdzv_conf.h"
#include "rendezvous/registry.h"

namespace ddprun::launcher {
namespace {

// What follows the usage line (status_usage()).
constexpr const char* kStatusAbout =
    "Prints every node and rank of the running job (read-only; the job is not disturbed).\n"
    "The --rdzv-* values default to PET_RDZV_BACKEND, PET_RDZV_ENDPOINT, PET_RDZV_ID,\n"
    "PET_RDZV_CONF, as the job's own. Exit: 0 shown, 2 usage, 3 unreachable, 4 no such run,\n"
    "5 no round formed yet, 6 a value that is not ddprun's, 7 the run has ended.\n";

struct StatusArgs {
  std::string backend = "c10d";
  std::string endpoint;
  std::string run_id = "none";
  std::string conf;
  bool json = false;
  bool watch = false;
  double timeout_s = 3;
};

// "usage: ddprun status [--rdzv-backend c10d|static|etcd-v3] ..." from kStatusOptions,
// wrapped under the verb, then kStatusAbout.
std::string status_usage() {
  const std::string head = fmt::format("usage: ddprun {}", kStatusVerb);
  std::string text = head, line;
  for (const VerbOption& o : kStatusOptions) {
    if (o.name == "--help") continue;
    const std::string word = o.metavar.empty() ? fmt::format(" [{}]", o.name)
                                               : fmt::format(" [{} {}]", o.name, o.metavar);
    if (head.size() + line.size() + word.size() > 88) {
      text += line + "\n" + std::string(head.size(), ' ');
      line.clear();
    }
    line += word;
  }
  return text + line + "\n" + kStatusAbout;
}

int usage(const std::string& why) {
  std::fprintf(stderr, "ddprun status: error: %s\n%s", why.c_str(), status_usage().c_str());
  return kStatusUsage;
}

// Reads `args` over the PET_RDZV_* defaults; "" on success, else why not. Both spellings
// (--rdzv-id, --rdzv_id) and --flag=value, as the launcher's own options.
std::string parse_status_args(const std::vector<std::string>& args,
                              const std::map<std::string, std::string>& env, StatusArgs& out,
                              bool& help) {
  auto from_env = [&](const char* name, std::string& into) {
    if (auto it = env.find(name); it != env.end() && !it->second.empty()) into = it->second;
  };
  from_env("PET_RDZV_BACKEND", out.backend);
  from_env("PET_RDZV_ENDPOINT", out.endpoint);
  from_env("PET_RDZV_ID", out.run_id);
  from_env("PET_RDZV_CONF", out.conf);
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::optional<std::string> value;
    if (const auto eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag.resize(eq);
    }
    for (std::size_t c = 2; c < flag.size(); ++c) {
      if (flag[c] == '_') flag[c] = '-';
    }
    if (flag == "-h") flag = "--help";
    const VerbOption* option = find_status_option(flag);
    if (option == nullptr) return "unknown option '" + args[i] + "'";
    if (option->metavar.empty()) {  // a flag
      if (value) return flag + " takes no value";
      if (flag == "--help") {
        help = true;
        return "";
      }
      (flag == "--json" ? out.json : out.watch) = true;
      continue;
    }
    std::string* into = flag == "--rdzv-backend"    ? &out.backend
                        : flag == "--rdzv-endpoint" ? &out.endpoint
                        : flag == "--rdzv-id"       ? &out.run_id
                        : flag == "--rdzv-conf"     ? &out.conf
                                                    : nullptr;  // --timeout
    if (!value) {
      if (i + 1 >= args.size()) return flag + " needs a value";
      value = args[++i];
    }
    if (into != nullptr) {
      *into = *value;
      continue;
    }
    const auto t = parse_int<int>(*value);
    if (!t || *t <= 0 || *t > 600) return "--timeout " + *value + ": seconds, 1..600";
    out.timeout_s = *t;
  }
  if (out.endpoint.empty()) return "--rdzv-endpoint is needed: the job's rendezvous endpoint";
  return "";
}

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// One read and its output; the exit code.
int show_once(rdzv::BoardReader& reader, const StatusArgs& a) {
  using Kind = rdzv::BoardSnapshot::Kind;
  rdzv::BoardSnapshot snap;
  try {
    snap = reader.read(StatusPublisher::kNamePrefix);
  } catch (const rdzv::RendezvousStateError& e) {
    std::fprintf(stderr, "ddprun status: %s\n", e.what());
    return kStatusCorrupt;
  } catch (const rdzv::RendezvousError& e) {
    std::fprintf(stderr, "ddprun status: cannot read the rendezvous: %s\n", e.what());
    return kStatusUnreachable;
  }
  const std::string where = reader.where();
  const std::string run = "run '" + a.run_id + "'";
  switch (snap.kind) {
    case Kind::kNoRun:
      std::fprintf(stderr, "ddprun status: %s: no %s (no such --rdzv-id, or not started yet)\n",
                   where.c_str(), run.c_str());
      return kStatusNoRun;
    case Kind::kForming:
      std::fprintf(stderr,
                   "ddprun status: %s: %s has no round formed yet (its nodes are joining)\n",
                   where.c_str(), run.c_str());
      return kStatusNoRound;
    case Kind::kClosed:
      std::fprintf(stderr, "ddprun status: %s: %s has ended%s\n", where.c_str(), run.c_str(),
                   snap.closed == "1" ? "" : (" (closed: " + snap.closed + ")").c_str());
      return kStatusEnded;
    case Kind::kRound:
      break;
  }
  JobStatus job;
  job.run_id = a.run_id;
  job.where = where;
  job.round = snap.round;
  const int bad = join_node_values(job, snap.values);
  const std::string text =
      a.json ? job_status_json(job) + "\n" : format_job_status(job, wall_now());
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
  if (bad == 0) return kStatusOk;
  for (std::size_t n = 0; n < job.nodes.size(); ++n) {
    if (!job.nodes[n].status && job.nodes[n].problem != "no status yet") {
      std::fprintf(stderr, "ddprun status: node %zu: %s\n", n, job.nodes[n].problem.c_str());
    }
  }
  return kStatusCorrupt;
}

}  // namespace

int run_status_command(const std::vector<std::string>& args,
                       const std::map<std::string, std::string>& env) {
  StatusArgs a;
  bool help = false;
  if (std::string why = parse_status_args(args, env, a, help); help) {
    std::string text = status_usage() + "options:\n";
    for (const VerbOption& o : kStatusOptions) {
      text += fmt::format("  {:<36} {}\n", fmt::format("{} {}", o.name, o.metavar), o.help);
    }
    std::fputs(text.c_str(), stdout);
    return kStatusOk;
  } else if (!why.empty()) {
    return usage(why);
  }
  rdzv::RendezvousParams p;
  std::unique_ptr<rdzv::BoardReader> reader;
  const auto timeout = std::chrono::milliseconds(static_cast<std::int64_t>(a.timeout_s * 1000));
  try {
    p.backend = rdzv::parse_backend(a.backend);
    p.endpoint = a.endpoint;
    p.run_id = a.run_id;
    p.conf = rdzv::parse_rdzv_conf(a.conf);
  } catch (const std::exception& e) {
    return usage(e.what());
  }
  try {
    reader = rdzv::make_board_reader(p, timeout);
  } catch (const rdzv::RendezvousConnectionError& e) {
    std::fprintf(stderr, "ddprun status: %s\n", e.what());
    return kStatusUnreachable;
  } catch (const rdzv::RendezvousError& e) {
    return usage(e.what());
  }
  for (bool first = true;; first = false) {
    if (a.watch && !first) {
      std::this_thread::sleep_for(StatusPublisher::kPeriod);
      std::fputs(::isatty(1) == 1 ? "\033[H\033[2J" : "\n", stdout);
    }
    const int code = show_once(*reader, a);
    // --watch goes on through a round that is forming or a value that is not ready.
    if (!a.watch || code == kStatusUnreachable || code == kStatusEnded || code == kStatusNoRun) {
      return code;
    }
  }
}

}  // namespace ddprun::launcher
