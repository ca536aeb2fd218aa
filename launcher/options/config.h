// config.h: LaunchConfig, everything one `ddprun` invocation was asked to do, as plain
// values (no CLI11 types), and build_config(), which turns the raw option strings the
// command line / PET_* environment produced into a checked LaunchConfig.
// Used by cli.cpp (producer), the Agent, worker_env and main (consumers).
// Thread-safety: plain values; build_config is a pure function of its arguments.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "launcher/options/usage_error.h"
#include "rendezvous/rendezvous.h"

namespace ddprun::launcher {

// torchrun's -r/--redirects and -t/--tee value: a bit set per local rank
// (1 = stdout, 2 = stderr, 3 = both), either one value for every rank ("3") or per rank
// ("0:1,1:3"; ranks not listed get 0).
struct StdStreams {
  static constexpr int kOut = 1;
  static constexpr int kErr = 2;
  int all = 0;
  std::map<int, int> per_rank;  // used when non-empty
  int for_rank(int local_rank) const;
};

// Parses "0".."3" or "lr:v,lr:v". Throws UsageError naming `flag`.
StdStreams parse_std_streams(const std::string& flag, const std::string& text);

// How the per-worker process is started.
enum class EntryKind {
  kPythonScript,  // <python> -u script args
  kPythonModule,  // <python> -u -m module args          (-m/--module)
  kExecutable,    // script args                          (--no-python)
};

// The multi-host launch over ssh (--hostfile / --hosts; ssh_launch.h): the values as
// given, checked where they are used (hostfile.h, remote_launch.h, ssh_launch.h).
struct SshLaunchOptions {
  std::string hostfile;             // --hostfile FILE
  std::string hosts;                // --hosts a,b:2,c
  std::string include;              // --include host[:gpu,...][@host...]
  std::string exclude;              // --exclude (same form)
  std::string ssh_command = "ssh";  // --ssh-command, split like a shell
  std::optional<int> ssh_port;      // --ssh-port
  std::string remote_ddprun;        // --remote-ddprun; empty: this ddprun's path
  std::vector<std::string> env;     // --env NAME[=VALUE],...
  bool exit_on_stdin_eof = false;   // hidden: set by the launcher on its agents
  // The launcher options as given on the command line (cli.cpp), without this group's
  // and --log-dir: what every remote agent is given.
  std::vector<std::string> agent_options;
  std::set<std::string> given;  // torchrun dest names given (command line or PET_*)
  bool active() const { return !hostfile.empty() || !hosts.empty(); }
};

struct LaunchConfig {
  // --nnodes N | MIN:MAX
  int min_nodes = 1;
  int max_nodes = 1;
  // --nproc-per-node, resolved to a count (cpu, gpu, xpu, auto: nproc.h, accelerators.h)
  std::string nproc_spec = "1";
  int nproc_per_node = 1;

  bool standalone = false;
  rdzv::Backend rdzv_backend = rdzv::Backend::kStatic;
  std::string rdzv_backend_alias;  // rdzv::backend_alias() of --rdzv-backend
  std::string rdzv_endpoint;
  std::string rdzv_id = "none";
  rdzv::RdzvConf rdzv_conf;

  int max_restarts = 0;
  double monitor_interval_s = 0.1;  // accepted; ddprun reacts to events, not polls
  std::string start_method = "spawn";
  // --event-log-handler: "console" prints torchrun's events to stderr (events.h), "null"
  // does not.
  std::string event_log_handler = "null";
  std::string role = "default";

  EntryKind entry = EntryKind::kPythonScript;
  bool run_path = false;  // runpy.run_path under an error-file recorder (worker_env.cpp)
  // PYTHON_EXEC, else HostFacts::launcher_python, else python3 from PATH (worker_python.h)
  std::string python_exec = "python3";
  // (major, minor) of the torch python_exec imports, found on disk by main
  // (torch_version.h); nullopt: unknown. Picks the NCCL async-error variable's name.
  std::optional<std::pair<int, int>> worker_torch_version;

  std::string log_dir;  // --log-dir; empty: a fresh torchelastic_XXXXXX under TMPDIR
  StdStreams redirects;
  StdStreams tee;
  std::optional<std::set<int>> local_ranks_filter;  // nullopt: every rank on the console
  // --log-line-prefix-template (or PET_), else TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE; "":
  // torchrun's default "[<role><local rank>]:" (worker_env.cpp expands it).
  std::string log_line_prefix_template;

  std::optional<int> node_rank;  // only when given explicitly
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
  std::optional<std::string> local_addr;

  std::vector<int> signals_to_handle;  // default SIGTERM,SIGINT,SIGHUP,SIGQUIT
  // The list as given (workers' TORCHELASTIC_SIGNALS_TO_HANDLE, as torchrun sets it).
  std::string signals_to_handle_text = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
  double shutdown_timeout_s = 30;
  bool virtual_local_rank = false;

  // ddprun's watchdogs (docs/usage.md): --stall-timeout / PET_STALL_TIMEOUT, 0: off.
  double stall_timeout_s = 0;
  // The straggler ranking (docs/usage.md, "Stragglers"; with --stall-timeout):
  // --straggler-threshold (0: off), --straggler-window (at least 1 s).
  double straggler_threshold_s = 0.05;
  double straggler_window_s = 10;
  // --exclude-stragglers: a node the ranking names 3 windows in a row leaves the job when
  // the elastic bounds allow (docs/usage.md, "Stragglers").
  bool exclude_stragglers = false;
  // The pre-flight check (docs/preflight.md): --preflight, --preflight-slow-factor (> 1),
  // --preflight-timeout; --blocklist FILE ("": none), read once at start.
  bool preflight = false;
  double preflight_slow_factor = 3;
  double preflight_timeout_s = 120;
  std::string blocklist_file;
  // --exit-codes classes (PET_EXIT_CODES): one exit status per class of failure
  // (exit_status.h); false: torchrun's (every failure exits 1).
  bool exit_code_classes = false;
  // --record-file (PET_RECORD_FILE): the run record's path (run_history.h); "": none (the
  // log directory keeps torchrun's layout).
  std::string record_file;
  // torch's file timer: TORCHELASTIC_ENABLE_FILE_TIMER=1 in the agent's environment; the
  // named pipe is TORCHELASTIC_TIMER_FILE, else <temp_dir>/watchdog_timer_<uuid4>
  // (torchrun's default: tempfile.gettempdir()). "": off. Workers get
  // TORCHELASTIC_TIMER_FILE=<path>.
  std::string file_timer_path;
  // --numa-binding: node, socket, exclusive or core-complex (numa.h); "": none.
  std::string numa_binding;

  // --duplicate-stdout-filters / --duplicate-stderr-filters: the tee'd lines holding any
  // of these go to attempt_N/filtered_std{out,err}.log too (",," is a literal comma).
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;

  // torch.distributed.launch compatibility: append --local_rank=N unless --use-env.
  bool legacy_launch = false;
  bool use_env = false;

  std::string training_script;
  std::vector<std::string> script_args;

  SshLaunchOptions ssh;

  // What build_config found worth a warning (one line each; main logs them).
  std::vector<std::string> warnings;

  // True when workers are given --local_rank=N on their command line.
  bool passes_local_rank_arg() const { return legacy_launch && !use_env; }
};

// What the command line (or the PET_* environment) said, before interpretation.
// `values` is keyed by torchrun's dest name ("nproc_per_node", "rdzv_conf", ...);
// `flags` holds the dest names of the boolean flags that are on.
struct RawOptions {
  std::map<std::string, std::string> values;
  std::set<std::string> flags;
  std::vector<std::string> positional;  // training_script followed by its arguments
};

// The facts about the host build_config needs, injectable for tests.
struct HostFacts {
  std::map<std::string, std::string> env;  // the agent's environment
  int cpu_count = 1;
  int gpu_count = 0;        // visible NVIDIA GPUs (nproc.h)
  int amd_gpu_count = 0;    // visible AMD GPUs, ROCm (accelerators.h)
  int intel_gpu_count = 0;  // visible Intel GPUs, xpu (accelerators.h)
  // The python of the venv/conda env ddprun was installed into, "" if none (worker_python.h).
  std::string launcher_python;
  // Whether a path exists (the training script check; nullptr: no check).
  bool (*file_exists)(const std::string& path) = nullptr;
};

// Interprets and checks `raw`: each value once, here (--rdzv-backend and --rdzv-conf by
// the rendezvous layer's parsers); how the rendezvous values combine (node rank vs
// node count, endpoint vs backend) is make_rendezvous_handler()'s check. Throws
// UsageError (one line naming the flag or file).
LaunchConfig build_config(const RawOptions& raw, const HostFacts& host);

// The rendezvous parameters `config` implies. `env`: the agent's environment (USE_LIBUV=0
// means use_agent_store=0 unless --rdzv-conf says otherwise).
rdzv::RendezvousParams make_rendezvous_params(const LaunchConfig& config,
                                              const std::map<std::string, std::string>& env);

// Parses --nnodes: "N" or "MIN:MAX" with 0 < MIN <= MAX. Throws UsageError.
std::pair<int, int> parse_nnodes(const std::string& text);

// Python's string.Template(text).safe_substitute(values): "$name" and "${name}" (name:
// [_A-Za-z][_A-Za-z0-9]*, longest match) become values[name] where it holds the name and
// stay as written otherwise; "$$" becomes "$"; every other "$" stays.
std::string safe_substitute(const std::string& text,
                            const std::map<std::string, std::string>& values);

// Expands `arg` as torchrun does: safe_substitute with the one name local_rank.
std::string substitute_local_rank(const std::string& arg, int local_rank);

}  // namespace ddprun::launcher
