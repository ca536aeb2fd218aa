// option_table.cpp: the table of torchrun's options and ddprun's own (option_table.h).
#include "launcher/options/option_table.h"

#include <map>

namespace ddprun::launcher {
namespace {

constexpr const char* kSize = "Worker/node size related arguments";
constexpr const char* kRdzv = "Rendezvous related arguments";
constexpr const char* kLaunch = "User-code launch related arguments";
constexpr const char* kLogs = "Logging related arguments";
constexpr const char* kStatic = "Static rendezvous (master) arguments";
constexpr const char* kCompat = "torchrun options ddprun does not implement (refused)";

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
    {"--straggler-threshold,--straggler_threshold", "straggler_threshold", false, kLaunch,
     "With --stall-timeout and PyTorch's flight recorder: warn when a rank or host arrives "
     "last at collectives by a median of this many seconds (default 0.05; 0: off)"},
    {"--straggler-window,--straggler_window", "straggler_window", false, kLaunch,
     "Seconds of collectives each straggler ranking looks at (default 10)"},
    {"--exclude-stragglers,--exclude_stragglers", "exclude_stragglers", true, kLaunch,
     "Leave a node whose rank or host is the straggler for 3 rankings in a row out of the job "
     "(a new round without it) when --nnodes MIN:MAX allows (default: off)"},
    // Bad nodes (issue 34): the pre-flight check and the block-list (docs/preflight.md).
    {"--preflight", "preflight", true, kLaunch,
     "Before the workers start, check every node (import torch, each device, a collective "
     "with the other nodes); leave out or stop on a bad node (default: off)"},
    {"--preflight-slow-factor,--preflight_slow_factor", "preflight_slow_factor", false, kLaunch,
     "With --preflight: a node this many times slower than the median is bad (default 3)"},
    {"--preflight-timeout,--preflight_timeout", "preflight_timeout", false, kLaunch,
     "With --preflight: seconds the check may take on a node (default 120)"},
    {"--blocklist", "blocklist", false, kLaunch,
     "Keep the hosts --preflight finds bad in FILE; a host listed there does not join"},
    {"--record-file,--record_file", "record_file", false, kLogs,
     "Write the run record (JSON: rounds, attempts, failures, the job's root cause and "
     "stall verdict, exit class) to FILE when the run ends (default: none)"},
    {"--exit-codes,--exit_codes", "exit_codes", false, kLaunch,
     "torchrun (default: every failure exits 1) or classes: 1 a worker's own error, 3 "
     "infrastructure (node/store/rendezvous lost, OOM kill), 4 stall, 128+N signal N"},
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
}  // namespace

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
      {"straggler_threshold", "SECONDS"},
      {"straggler_window", "SECONDS"},
      {"preflight_slow_factor", "FACTOR"},
      {"preflight_timeout", "SECONDS"},
      {"blocklist", "FILE"},
      {"exit_codes", "torchrun|classes"},
      {"record_file", "FILE"},
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

std::span<const OptionDef> option_table() { return kOptions; }

}  // namespace ddprun::launcher
