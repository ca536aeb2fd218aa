// cli.cpp: the CLI11 binding of torchrun's options (see cli.h). CLI11 only collects raw
// strings here; build_config (config.cpp) interprets and checks them, so every message
// about a value comes from one place.
#include "launcher/options/cli.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string_view>

#include "ddprun_version.h"
#include "launcher/options/accelerators.h"
#include "launcher/options/nproc.h"
#include "launcher/options/slurm_env.h"
#include "packaging/cli_dump.h"

extern char** environ;

namespace ddprun::launcher {
namespace {

constexpr const char* kSize = "Worker/node size related arguments";
constexpr const char* kRdzv = "Rendezvous related arguments";
constexpr const char* kLaunch = "User-code launch related arguments";
constexpr const char* kLogs = "Logging related arguments";
constexpr const char* kStatic = "Static rendezvous (master) arguments";
constexpr const char* kCompat = "torchrun options ddprun does not implement (refused)";
// ddprun's own multi-host launch (ssh_launch.h); no PET_* fallback, not passed on to the
// remote agents. kHidden: the launcher's internal options (not in --help).
constexpr const char* kSsh = "Multi-host launch over ssh (ddprun only)";
constexpr const char* kHidden = "";

struct OptionDef {
  const char* names;  // CLI11 name list; both spellings of long names
  const char* dest;   // torchrun's dest name; PET_<DEST upper> is its env fallback
  bool is_flag;
  const char* group;
  const char* help;
};

// Order and grouping follow torchrun's --help.
constexpr OptionDef kOptions[] = {
    {"--nnodes", "nnodes", false, kSize,
     "Number of nodes, or MIN:MAX for an elastic range (default 1:1)"},
    {"--nproc-per-node,--nproc_per_node", "nproc_per_node", false, kSize,
     "Workers per node: an int, cpu, gpu (NVIDIA/AMD), xpu (Intel) or auto (default 1)"},
    {"--rdzv-backend,--rdzv_backend", "rdzv_backend", false, kRdzv,
     "Rendezvous backend: static, c10d or etcd-v3 (torchrun's etcd and etcd-v2 are etcd-v3) "
     "(default static)"},
    {"--rdzv-endpoint,--rdzv_endpoint", "rdzv_endpoint", false, kRdzv,
     "Rendezvous endpoint host[:port]"},
    {"--rdzv-id,--rdzv_id", "rdzv_id", false, kRdzv, "User-defined job id (default none)"},
    {"--rdzv-conf,--rdzv_conf", "rdzv_conf", false, kRdzv,
     "Extra rendezvous settings as key1=value1,key2=value2"},
    {"--standalone", "standalone", true, kRdzv,
     "Single-node job: c10d rendezvous on a free local port with a random run id"},
    {"--max-restarts,--max_restarts", "max_restarts", false, kLaunch,
     "Worker-group restarts before failing (default 0)"},
    {"--monitor-interval,--monitor_interval", "monitor_interval", false, kLaunch,
     "Accepted; ddprun reacts to worker exits at once (event-driven)"},
    {"--start-method,--start_method", "start_method", false, kLaunch,
     "spawn, fork or forkserver (accepted; workers are always fresh processes)"},
    {"--event-log-handler,--event_log_handler", "event_log_handler", false, kCompat,
     "Elastic event log handler: only null (others are refused)"},
    {"--role", "role", false, kLaunch, "User-defined role of the workers (default default)"},
    {"-m,--module", "module", true, kLaunch, "Run the script as a Python module (python -m)"},
    {"--no-python,--no_python", "no_python", true, kLaunch,
     "Execute training_script directly instead of through python"},
    {"--run-path,--run_path", "run_path", true, kLaunch,
     "Run the script file as __main__ (same as the default)"},
    {"--log-dir,--log_dir", "log_dir", false, kLogs,
     "Base directory for worker logs (default: a new torchelastic_* dir in TMPDIR; "
     "/dev/null: no files)"},
    {"-r,--redirects", "redirects", false, kLogs,
     "Redirect streams to log files: 0 none, 1 stdout, 2 stderr, 3 both, or lr:v,lr:v"},
    {"-t,--tee", "tee", false, kLogs,
     "Tee streams to log files and the console (same values as --redirects)"},
    {"--log-line-prefix-template,--log_line_prefix_template", "log_line_prefix_template", false,
     kLogs,
     "Console prefix of tee'd lines: $role_name, $local_rank, $rank, $hostname (as "
     "${name}) are substituted (default '[${role_name}${local_rank}]:')"},
    {"--local-ranks-filter,--local_ranks_filter", "local_ranks_filter", false, kLogs,
     "Comma-separated local ranks whose output is shown on the console"},
    {"--node-rank,--node_rank", "node_rank", false, kStatic,
     "Rank of this node for static rendezvous (default 0)"},
    {"--master-addr,--master_addr", "master_addr", false, kStatic,
     "Address of the rank-0 node for static rendezvous (default 127.0.0.1)"},
    {"--master-port,--master_port", "master_port", false, kStatic,
     "Port of the rank-0 node for static rendezvous (default 29500 with static)"},
    {"--local-addr,--local_addr", "local_addr", false, kRdzv,
     "Address this node advertises to its peers"},
    {"--logs-specs,--logs_specs", "logs_specs", false, kCompat,
     "Logs specs plugin: none (Python plugins are refused)"},
    {"--numa-binding,--numa_binding", "numa_binding", false, kLaunch,
     "Bind each worker to CPUs near its GPU: node, socket, exclusive or core-complex"},
    {"--signals-to-handle,--signals_to_handle", "signals_to_handle", false, kLaunch,
     "Signals the agent traps and forwards (default SIGTERM,SIGINT,SIGHUP,SIGQUIT)"},
    {"--shutdown-timeout,--shutdown_timeout", "shutdown_timeout", false, kLaunch,
     "Seconds between SIGTERM and SIGKILL when stopping workers (default 30)"},
    {"--virtual-local-rank,--virtual_local_rank", "virtual_local_rank", true, kLaunch,
     "LOCAL_RANK=0 and one CUDA device per worker via CUDA_VISIBLE_DEVICES"},
    {"--duplicate-stdout-filters,--duplicate_stdout_filters", "duplicate_stdout_filters", false,
     kLogs,
     "Also copy the tee'd stdout lines containing any of these (,, = a comma) to "
     "attempt_N/filtered_stdout.log"},
    {"--duplicate-stderr-filters,--duplicate_stderr_filters", "duplicate_stderr_filters", false,
     kLogs, "The same for stderr (filtered_stderr.log)"},
    {"--legacy-launch,--legacy_launch", "legacy_launch", true, kLaunch,
     "Behave like python -m torch.distributed.launch: pass --local_rank=N to the script"},
    {"--use-env,--use_env", "use_env", true, kLaunch,
     "With --legacy-launch: do not pass --local_rank (read LOCAL_RANK instead)"},
    // ddprun's own (not torchrun's): Slurm job steps (slurm_env.h, docs/slurm.md).
    {"--no-slurm,--no_slurm", "no_slurm", true, kRdzv,
     "Ignore the SLURM_* environment (by default an srun step sets --nnodes, --node-rank, "
     "the rendezvous and --nproc-per-node)"},
    // ddprun's watchdogs (issue 12).
    {"--stall-timeout,--stall_timeout", "stall_timeout", false, kLaunch,
     "Seconds without progress (CPU time or output) of every worker after which ddprun dumps "
     "their Python stacks and handles it as a failure (default 0: off)"},
    {"--hostfile", "hostfile", false, kSsh,
     "Start one agent per host of FILE over ssh (lines: host [slots=N], # comments)"},
    {"--hosts", "hosts", false, kSsh,
     "Start one agent per host over ssh: a,b:2,c (:N = workers on that host)"},
    {"--include", "include", false, kSsh,
     "Only these hosts/GPUs of the host list: host[:gpu,gpu][@host...]"},
    {"--exclude", "exclude", false, kSsh, "Leave out these hosts/GPUs (same form as --include)"},
    {"--ssh-command,--ssh_command", "ssh_command", false, kSsh,
     "The ssh client and its options, e.g. 'ssh -i KEY -J jump' (default ssh)"},
    {"--ssh-port,--ssh_port", "ssh_port", false, kSsh, "Port of the hosts' sshd"},
    {"--remote-ddprun,--remote_ddprun", "remote_ddprun", false, kSsh,
     "Path of ddprun on the hosts (default: this ddprun's absolute path)"},
    {"--env", "env", false, kSsh,
     "More environment for the hosts: NAME or NAME=VALUE, comma-separated"},
    {"--exit-on-stdin-eof", "exit_on_stdin_eof", true, kHidden,
     "Internal: stop as on SIGTERM when stdin reaches end of file"},
    {"--rdzv-is-host", "rdzv_is_host", true, kHidden,
     "Internal: this agent hosts the c10d rendezvous store (the ssh launch's first host)"},
};

// The value placeholder shown by --help.
const char* metavar(const std::string& dest) {
  static const std::map<std::string, const char*> kMetavars = {
      {"nnodes", "N|MIN:MAX"},
      {"nproc_per_node", "N|cpu|gpu|xpu|auto"},
      {"rdzv_backend", "static|c10d|etcd-v3"},
      {"start_method", "spawn|fork|forkserver"},
      {"event_log_handler", "null|console"},
      {"numa_binding", "node|socket|exclusive|core-complex"},
      {"rdzv_endpoint", "HOST[:PORT]"},
      {"rdzv_conf", "K=V,..."},
      {"max_restarts", "N"},
      {"monitor_interval", "SECONDS"},
      {"log_dir", "DIR"},
      {"redirects", "0-3|LR:V,..."},
      {"tee", "0-3|LR:V,..."},
      {"log_line_prefix_template", "TEMPLATE"},
      {"local_ranks_filter", "LR,..."},
      {"node_rank", "N"},
      {"master_port", "PORT"},
      {"signals_to_handle", "SIG,..."},
      {"shutdown_timeout", "SECONDS"},
      {"stall_timeout", "SECONDS"},
      {"hostfile", "FILE"},
      {"hosts", "HOST[:N],..."},
      {"include", "HOST[:GPU,..]@.."},
      {"exclude", "HOST[:GPU,..]@.."},
      {"ssh_command", "COMMAND"},
      {"ssh_port", "PORT"},
      {"remote_ddprun", "PATH"},
      {"env", "NAME[=VALUE],..."}};
  const auto it = kMetavars.find(dest);
  return it == kMetavars.end() ? "TEXT" : it->second;
}

const OptionDef* find_option(const std::string& name) {
  for (const auto& def : kOptions) {
    std::string names = def.names;
    for (std::size_t start = 0; start < names.size();) {
      const auto comma = names.find(',', start);
      if (names.substr(start, comma - start) == name) return &def;
      start = comma == std::string::npos ? names.size() : comma + 1;
    }
  }
  return nullptr;
}

// The launcher's own arguments (`expanded`, up to the training script) that the remote
// agents of an ssh launch are given: all but the ssh group's and --log-dir (the launcher
// keeps the hosts' logs locally), each option with its value.
std::vector<std::string> agent_options(const std::vector<std::string>& expanded) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < expanded.size(); ++i) {
    const std::string& arg = expanded[i];
    if (arg == "--" || arg.empty() || arg[0] != '-') break;  // the training script
    const auto eq = arg.find('=');
    const OptionDef* def = find_option(arg.substr(0, eq));
    std::size_t take = 1;
    if (def && !def->is_flag && eq == std::string::npos && i + 1 < expanded.size()) take = 2;
    const bool keep = !def || (def->group != kSsh && def->group != kHidden &&
                               std::string_view(def->dest) != "log_dir");
    for (std::size_t k = 0; k < take; ++k) {
      if (keep) out.push_back(expanded[i + k]);
    }
    i += take - 1;
  }
  return out;
}

std::string pet_name(const char* dest) {
  std::string out = "PET_";
  for (const char* p = dest; *p; ++p) {
    out += static_cast<char>(std::toupper(static_cast<unsigned char>(*p)));
  }
  return out;
}

// CLI11's usage line does not know about the REMAINDER-style positionals.
class Formatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string name) const override {
    return "usage: " + name + " [OPTIONS] training_script [training_script_args...]\n";
  }
};

// Python also runs directories and zip files that hold a __main__.py, so any existing
// path is accepted; a missing one is what users mistype.
bool path_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// argparse (torchrun's parser) accepts any unambiguous prefix of a long option
// ("--nproc 4", "--max_rest=2"). Expands those among the launcher's own arguments (up to
// the training script) to the full name; ambiguous or unknown prefixes are left for CLI11
// to reject. Throws UsageError for an ambiguous prefix.
std::vector<std::string> expand_abbreviations(const std::vector<std::string>& args) {
  std::vector<std::string> out = args;
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::string& arg = out[i];
    if (arg == "--" || arg.empty() || arg[0] != '-') break;  // the training script
    const auto eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const bool empty_value = eq != std::string::npos && eq + 1 == arg.size();
    const OptionDef* exact = nullptr;
    std::vector<std::pair<const OptionDef*, std::string>> matches;
    for (const auto& def : kOptions) {
      std::string names = def.names;
      for (std::size_t start = 0; start < names.size();) {
        const auto comma = names.find(',', start);
        const std::string n = names.substr(start, comma - start);
        if (n == name) exact = &def;
        if (n.size() > 2 && n.rfind("--", 0) == 0 && name.size() > 2 && n.rfind(name, 0) == 0 &&
            (matches.empty() || matches.back().first != &def)) {
          matches.emplace_back(&def, n);
        }
        start = comma == std::string::npos ? names.size() : comma + 1;
      }
    }
    if (!exact && name.rfind("--", 0) == 0 && name.size() > 2 && matches.size() > 1) {
      std::string all;
      for (const auto& m : matches) all += (all.empty() ? "" : ", ") + m.second;
      throw UsageError(fmt::format("ambiguous option: {} could match {}", name, all));
    }
    if (!exact && matches.size() == 1) {
      exact = matches.front().first;
      arg = matches.front().second + (eq == std::string::npos ? "" : arg.substr(eq));
    }
    // "--opt=" is an empty value (as in argparse). CLI11 would drop the empty part and
    // take the next argument (the training script) as the value; give it "" instead.
    if (exact && !exact->is_flag && empty_value && name.rfind("--", 0) == 0) {
      arg.pop_back();
      out.insert(out.begin() + static_cast<std::ptrdiff_t>(i) + 1, std::string());
      ++i;
      continue;
    }
    // A value option given without '=' takes the next argument as its value.
    if (exact && !exact->is_flag && eq == std::string::npos && name.rfind("--", 0) == 0) ++i;
    if (exact && !exact->is_flag && name.size() == 2 && arg.size() == 2) ++i;  // -r 3, -t 3
  }
  return out;
}

// A value read from PET_<NAME> that build_config refuses: its message names the flag
// ("--nnodes: ..."); say which variable the value came from ("PET_NNODES (--nnodes): ...").
std::string name_env_source(const std::string& text,
                            const std::map<std::string, std::string>& env_dests) {
  for (const auto& [dest, env_name] : env_dests) {
    std::string flag = "--" + dest;
    std::replace(flag.begin(), flag.end(), '_', '-');
    if (text.rfind(flag, 0) == 0 &&
        (text.size() == flag.size() ||
         std::string_view(":= ").find(text[flag.size()]) != std::string_view::npos)) {
      return env_name + " (" + flag + ")" + text.substr(flag.size());
    }
  }
  return text;
}

// --print-completion SHELL (torchrun 2.14): the completion script installed with ddprun
// (generated at build time by packaging/clidoc.py), found beside this executable: the
// install prefix's share/, or the build tree's packaging/. Throws UsageError.
std::string completion_script(const std::string& shell) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  const std::vector<fs::path> candidates =
      shell == "bash" ? std::vector<fs::path>{dir / "../share/bash-completion/completions/ddprun",
                                              dir / "../packaging/bash/ddprun"}
                      : std::vector<fs::path>{dir / "../share/zsh/vendor-completions/_ddprun",
                                              dir / "../share/zsh/site-functions/_ddprun",
                                              dir / "../packaging/zsh/_ddprun"};
  for (const auto& path : shell == "tcsh" ? std::vector<fs::path>{} : candidates) {
    if (!fs::is_regular_file(path, ec)) continue;
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  throw UsageError(fmt::format("--print-completion {}: {}", shell,
                               shell == "tcsh"
                                   ? "ddprun has bash and zsh completion only"
                                   : "no completion script installed beside " + dir.string() +
                                         " (it is part of the deb and the CMake install)"));
}

}  // namespace

std::string usage_hint() {
  return "usage: ddprun [OPTIONS] training_script [training_script_args...] "
         "(see ddprun --help)";
}

HostFacts current_host_facts() {
  HostFacts host;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv(*e);
    const auto eq = kv.find('=');
    if (eq != std::string::npos) host.env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  host.cpu_count = cpu_count();
  const auto cvd = host.env.find("CUDA_VISIBLE_DEVICES");
  host.gpu_count = visible_gpu_count(
      count_physical_gpus("/"),
      cvd == host.env.end() ? std::nullopt : std::optional<std::string>(cvd->second));
  host.amd_gpu_count = visible_amd_count(count_amd_gpus(), host.env);
  host.intel_gpu_count = visible_intel_count(count_intel_gpus(), host.env);
  host.file_exists = &path_exists;
  return host;
}

CliOutcome parse_command_line(const std::vector<std::string>& args, const HostFacts& host) {
  CliOutcome out;
  CLI::App app(
      "ddprun: a native drop-in replacement for torchrun. Starts --nproc-per-node copies of\n"
      "training_script with torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE,\n"
      "MASTER_ADDR, MASTER_PORT, ...) and supervises them. Every option can also be given\n"
      "as env PET_<OPTION> (e.g. PET_NPROC_PER_NODE=4); the command line wins.\n",
      "ddprun");
  app.formatter(std::make_shared<Formatter>());
  app.get_formatter()->column_width(46);
  app.prefix_command();  // everything from the training script on belongs to the script
  app.footer(
      "positional arguments:\n"
      "  training_script       the script (or module with -m, program with --no-python)\n"
      "  training_script_args  passed through; ${local_rank} or $local_rank becomes the\n"
      "                        local rank and $$ becomes $ (as torchrun)\n"
      "\nenvironment: PYTHON_EXEC (python for workers; default: the python of the venv or\n"
      "conda env ddprun is installed in, else python3 from PATH), LOGLEVEL\n"
      "(DEBUG, INFO, WARNING, ERROR), TORCHELASTIC_SIGNALS_TO_HANDLE,\n"
      "TORCH_ELASTIC_SHUTDOWN_TIMEOUT, TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE.\n"
      "exit status: 0 when every worker succeeded, 1 on any failure, 2 on bad usage.");
  bool version = false;
  app.add_flag("--version", version, "Print the version and exit");
  std::string completion_shell;
  app.add_option("--print-completion,--print_completion", completion_shell,
                 "Print the bash or zsh completion script and exit (e.g. "
                 "--print-completion bash > ~/.local/share/bash-completion/completions/ddprun)")
      ->check(CLI::IsMember({"bash", "zsh", "tcsh"}));
  bool dump_cli = false;  // for the man page and completion (packaging/clidoc.py)
  app.add_flag(ddprun::packaging::kDumpCliOption, dump_cli)->group(kHidden);

  std::map<std::string, std::string> storage;
  std::vector<std::pair<const OptionDef*, CLI::Option*>> bound;
  for (const auto& def : kOptions) {
    CLI::Option* opt = nullptr;
    if (def.is_flag) {
      opt = app.add_flag(def.names, def.help);
    } else {
      opt = app.add_option(def.names, storage[def.dest], def.help)
                ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
                ->type_name(metavar(def.dest));
    }
    opt->group(def.group);  // kHidden ("") hides it from --help
    bound.emplace_back(&def, opt);
  }

  std::vector<std::string> expanded;
  try {
    expanded = expand_abbreviations(args);
  } catch (const UsageError& e) {
    out.kind = CliOutcome::Kind::kError;
    out.text = e.what();
    return out;
  }
  // CLI11 parses a reversed copy.
  std::vector<std::string> reversed(expanded.rbegin(), expanded.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    out.kind = CliOutcome::Kind::kPrint;
    out.text = app.help();
    return out;
  } catch (const CLI::ParseError& e) {
    out.kind = CliOutcome::Kind::kError;
    out.text = e.what();
    std::replace(out.text.begin(), out.text.end(), '\n', ' ');
    return out;
  }
  if (version) {
    out.kind = CliOutcome::Kind::kPrint;
    out.text = std::string("ddprun ") + DDPRUN_VERSION_TEXT + " (torchrun-compatible launcher)\n";
    return out;
  }
  if (!completion_shell.empty()) {
    try {
      out.text = completion_script(completion_shell);
      out.kind = CliOutcome::Kind::kPrint;
    } catch (const UsageError& e) {
      out.kind = CliOutcome::Kind::kError;
      out.text = e.what();
    }
    return out;
  }
  if (dump_cli) {
    out.kind = CliOutcome::Kind::kPrint;
    out.text =
        ddprun::packaging::app_json(app, Formatter().make_usage(&app, "ddprun"), DDPRUN_VERSION);
    return out;
  }

  RawOptions raw;
  raw.positional = app.remaining();
  std::map<std::string, std::string> env_dests;  // dest -> PET_ name, values taken from env
  try {
    for (const auto& [def, opt] : bound) {
      const std::string env_name = pet_name(def->dest);
      // No PET_* fallback: ddprun's own options, and torchrun's without action=env.
      const bool own = def->group == kSsh || def->group == kHidden ||
                       std::string_view(def->dest) == "logs_specs" ||
                       std::string_view(def->dest) == "numa_binding";
      const auto env = own ? host.env.end() : host.env.find(env_name);
      if (def->is_flag) {
        if (opt->count() > 0) {
          raw.flags.insert(def->dest);
        } else if (env != host.env.end()) {
          // torchrun reads PET_ flags as an int; non-zero means on.
          long long v = 0;
          try {
            std::size_t used = 0;
            v = std::stoll(env->second, &used);
            if (used != env->second.size()) throw std::invalid_argument("trailing");
          } catch (const std::exception&) {
            throw UsageError(
                fmt::format("{}={}: expected an integer (0 or 1)", env_name, env->second));
          }
          if (v != 0) raw.flags.insert(def->dest);
        }
      } else if (opt->count() > 0) {
        raw.values[def->dest] = storage[def->dest];
      } else if (env != host.env.end()) {
        raw.values[def->dest] = env->second;
        env_dests[def->dest] = env_name;
      }
    }
    out.slurm = apply_slurm_environment(raw, host.env);  // fills what was not given
    out.config = build_config(raw, host);
    if (out.config.ssh.active()) out.config.ssh.agent_options = agent_options(expanded);
  } catch (const UsageError& e) {
    out.kind = CliOutcome::Kind::kError;
    out.text = name_env_source(e.what(), env_dests);
    return out;
  }
  out.kind = CliOutcome::Kind::kRun;
  return out;
}

}  // namespace ddprun::launcher
