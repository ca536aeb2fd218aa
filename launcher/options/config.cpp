// config.cpp: interpretation and checks of the raw option strings (see config.h):
// build_config as named read_* steps, and the rendezvous parameters. Used by cli.cpp, main.
#include "launcher/options/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <tuple>

#include "base/text.h"
#include "launcher/options/option_values.h"
#include "launcher/preflight/blocklist.h"
#include "launcher/process/signals.h"
#include "rendezvous/registry.h"

namespace ddprun::launcher {
namespace {

// What names the program in the job's fingerprint: the file name of a path, so that
// `train.py`, `$PWD/train.py`, `~/p/train.py` and `p/train.py` are one job (a trailing
// '/', a directory run by its __main__.py, names the directory).
std::string program_name(const std::string& path) {
  const std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  const std::string name = p.filename().string();
  return name.empty() ? p.parent_path().filename().string() : name;
}

int resolve_nproc(const std::string& spec, const HostFacts& host) {
  if (spec == "cpu") return std::max(1, host.cpu_count);
  // As torchrun 2.11: gpu = torch.cuda's devices (CUDA, or HIP on ROCm); xpu = Intel's;
  // auto = the accelerator's, else the CPUs.
  const int gpus = host.gpu_count > 0 ? host.gpu_count : host.amd_gpu_count;
  if (spec == "gpu") {
    if (gpus <= 0) {
      throw UsageError(
          "--nproc-per-node=gpu: no NVIDIA or AMD GPU is visible (checked "
          "/proc/driver/nvidia/gpus, /dev/nvidia*, /sys/class/kfd, CUDA_VISIBLE_DEVICES, "
          "HIP_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES)");
    }
    return gpus;
  }
  if (spec == "xpu") {
    if (host.intel_gpu_count <= 0) {
      throw UsageError(
          "--nproc-per-node=xpu: no Intel GPU is visible (checked /sys/class/drm/card*, "
          "ZE_AFFINITY_MASK)");
    }
    return host.intel_gpu_count;
  }
  if (spec == "auto") {
    if (gpus > 0) return gpus;
    return host.intel_gpu_count > 0 ? host.intel_gpu_count : std::max(1, host.cpu_count);
  }
  const auto v = to_int(spec);
  if (!v) {
    throw UsageError(fmt::format(
        "--nproc-per-node: invalid value '{}' (expected a positive int, cpu, gpu, xpu or auto)",
        spec));
  }
  if (*v < 1 || *v > 65536) {
    throw UsageError(fmt::format("--nproc-per-node: {} must be a positive int", *v));
  }
  return static_cast<int>(*v);
}

// --hostfile / --hosts and the options of the ssh launch (ssh_launch.h).
void read_ssh_options(const RawOptions& raw, LaunchConfig& c) {
  const auto& v = raw.values;
  SshLaunchOptions& o = c.ssh;
  for (const auto& [dest, value] : v) o.given.insert(dest);
  if (const auto* s = find(v, "hostfile")) o.hostfile = trimmed(*s);
  if (const auto* s = find(v, "hosts")) o.hosts = trimmed(*s);
  if (const auto* s = find(v, "include")) o.include = trimmed(*s);
  if (const auto* s = find(v, "exclude")) o.exclude = trimmed(*s);
  if (const auto* s = find(v, "ssh_command")) o.ssh_command = *s;
  if (const auto* s = find(v, "ssh_port")) o.ssh_port = int_in_range("--ssh-port", *s, 1, 65535);
  if (const auto* s = find(v, "remote_ddprun")) o.remote_ddprun = trimmed(*s);
  if (const auto* s = find(v, "env")) {
    for (const auto& e : split(*s, ',')) {
      if (!trimmed(e).empty()) o.env.push_back(trimmed(e));
    }
  }
  o.exit_on_stdin_eof = raw.flags.count("exit_on_stdin_eof") > 0;
  // An empty value is an unset variable ($HOSTFILE) more often than a wish for a local job.
  if (v.count("hostfile") > 0 && o.hostfile.empty()) {
    throw UsageError("--hostfile: empty file name (no hosts to run on)");
  }
  if (v.count("hosts") > 0 && o.hosts.empty()) {
    throw UsageError("--hosts: empty host list (expected host[:N],...)");
  }
  if (!o.hostfile.empty() && !o.hosts.empty()) {
    throw UsageError("--hostfile and --hosts cannot be used together");
  }
  const auto flag_name = [](const char* dest) {
    std::string name = std::string("--") + dest;
    std::replace(name.begin(), name.end(), '_', '-');
    return name;
  };
  if (!o.active()) {
    for (const char* dest :
         {"include", "exclude", "ssh_command", "ssh_port", "remote_ddprun", "env"}) {
      if (v.count(dest) > 0) throw UsageError(flag_name(dest) + " needs --hostfile or --hosts");
    }
    return;
  }
  if (raw.flags.count("standalone") > 0) {
    throw UsageError("--standalone cannot be used with --hostfile/--hosts (one node vs many)");
  }
  for (const char* dest : {"node_rank", "master_addr", "master_port"}) {
    if (v.count(dest) > 0) {
      throw UsageError(flag_name(dest) +
                       " cannot be used with --hostfile/--hosts: the launcher sets the "
                       "rendezvous of every host (c10d)");
    }
  }
  if (const auto* s = find(v, "rdzv_backend"); s && trimmed(*s) != "c10d") {
    throw UsageError("--rdzv-backend " + trimmed(*s) +
                     ": --hostfile/--hosts launch with the c10d backend only");
  }
}

}  // namespace

rdzv::RendezvousParams make_rendezvous_params(const LaunchConfig& config,
                                              const std::map<std::string, std::string>& env) {
  rdzv::RendezvousParams p;
  p.backend = config.rdzv_backend;
  p.backend_alias = config.rdzv_backend_alias;
  p.endpoint = config.rdzv_endpoint;
  p.run_id = config.rdzv_id;
  p.min_nodes = config.min_nodes;
  p.max_nodes = config.max_nodes;
  p.node_rank = config.node_rank;
  p.master_addr = config.master_addr;
  p.master_port = config.master_port;
  p.local_addr = config.local_addr;
  p.local_world_size = config.nproc_per_node;
  p.conf = config.rdzv_conf;
  // The job's fingerprint: its entry point (the -m module, or the file name of the script
  // or --no-python program), not its arguments, the python executable, --nproc-per-node or
  // the directory part of the path, which may all differ per node (`--output_dir=$(hostname)`,
  // `train.py` here and `$PWD/train.py` there; docs/multinode.md, "Same job").
  if (config.entry == EntryKind::kPythonModule) p.job_command.push_back("-m");
  if (config.entry == EntryKind::kExecutable) p.job_command.push_back("--no-python");
  p.job_command.push_back(config.entry == EntryKind::kPythonModule
                              ? config.training_script
                              : program_name(config.training_script));
  // USE_LIBUV=0 is PyTorch's switch to its non-libuv TCPStore, which (2.6) workers ignore
  // when told to use the agent's store; a build without libuv (Debian's 2.6) then cannot
  // initialise. So it also means: worker rank 0 hosts the store (docs/usage.md).
  const auto* libuv = find(env, "USE_LIBUV");
  if (libuv != nullptr && *libuv == "0" && !p.conf.use_agent_store) {
    p.conf.use_agent_store = false;
  }
  return p;
}

namespace {

// build_config's steps, in the order of its checks (the first bad value is the error).
// Each reads its options from `raw` (and `host`) into `c`.

// --nnodes and --nproc-per-node (an ssh launch runs no worker here: each host's agent
// resolves cpu/gpu/auto itself).
void read_nodes(const RawOptions& raw, const HostFacts& host, LaunchConfig& c) {
  const auto& v = raw.values;
  if (const auto* s = find(v, "nnodes")) std::tie(c.min_nodes, c.max_nodes) = parse_nnodes(*s);
  if (const auto* s = find(v, "nproc_per_node")) c.nproc_spec = trimmed(*s);
  const bool ssh_launch = v.count("hostfile") > 0 || v.count("hosts") > 0;
  c.nproc_per_node = ssh_launch ? 1 : resolve_nproc(c.nproc_spec, host);
}

// The rendezvous options and the elastic agent's (restarts, monitor interval, role).
void read_rendezvous(const RawOptions& raw, LaunchConfig& c) {
  const auto& v = raw.values;
  try {
    if (const auto* s = find(v, "rdzv_backend")) {
      c.rdzv_backend = rdzv::parse_backend(trimmed(*s));
      c.rdzv_backend_alias = rdzv::backend_alias(trimmed(*s));
    }
    if (const auto* s = find(v, "rdzv_conf")) c.rdzv_conf = rdzv::parse_rdzv_conf(*s);
  } catch (const rdzv::RendezvousError& e) {
    throw UsageError(e.what());
  }
  // The ssh launcher's word for its first host (remote_launch.h); the user's is_host wins.
  if (raw.flags.count("rdzv_is_host") > 0 && !c.rdzv_conf.is_host) c.rdzv_conf.is_host = true;
  if (const auto* s = find(v, "rdzv_endpoint")) c.rdzv_endpoint = trimmed(*s);
  if (const auto* s = find(v, "rdzv_id")) c.rdzv_id = *s;
  if (const auto* s = find(v, "max_restarts")) {
    c.max_restarts = int_in_range("--max-restarts", *s, 0, 1000000);
  }
  if (const auto* s = find(v, "monitor_interval")) {
    c.monitor_interval_s = seconds_value("--monitor-interval", *s);
  }
  if (const auto* s = find(v, "start_method")) {
    c.start_method = choice("--start-method", *s, {"spawn", "fork", "forkserver"});
  }
  if (const auto* s = find(v, "role")) c.role = *s;
}

// What the worker runs: a script, a module (-m), an executable (--no-python); the legacy
// launcher's arguments; PYTHON_EXEC.
void read_entry(const RawOptions& raw, const HostFacts& host, LaunchConfig& c) {
  const auto flag = [&](const char* name) { return raw.flags.count(name) > 0; };
  const bool module = flag("module");
  const bool no_python = flag("no_python");
  c.run_path = flag("run_path");
  if (module && no_python) {
    throw UsageError("--no-python and -m/--module cannot be used together");
  }
  c.entry = no_python ? EntryKind::kExecutable
                      : (module ? EntryKind::kPythonModule : EntryKind::kPythonScript);
  c.legacy_launch = flag("legacy_launch");
  c.use_env = flag("use_env");
  if (c.legacy_launch && no_python && !c.use_env) {
    throw UsageError("--no-python requires --use-env with --legacy-launch");
  }
  if (const auto* p = find(host.env, "PYTHON_EXEC"); p && !p->empty()) {
    c.python_exec = *p;
  } else if (!host.launcher_python.empty()) {
    c.python_exec = host.launcher_python;
  }
}

// --log-dir, --redirects, --tee, --log-line-prefix-template, --local-ranks-filter.
void read_output(const RawOptions& raw, const HostFacts& host, LaunchConfig& c) {
  const auto& v = raw.values;
  if (const auto* s = find(v, "log_dir")) c.log_dir = *s;
  // As torchrun: the option (or PET_), when not empty, else torchrun's own variable.
  if (const auto* s = find(v, "log_line_prefix_template"); s && !s->empty()) {
    c.log_line_prefix_template = *s;
  } else if (const auto* e = find(host.env, "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE")) {
    c.log_line_prefix_template = *e;
  }
  if (const auto* s = find(v, "redirects")) c.redirects = parse_std_streams("--redirects", *s);
  if (const auto* s = find(v, "tee")) c.tee = parse_std_streams("--tee", *s);
  if (const auto* s = find(v, "local_ranks_filter"); s && !trimmed(*s).empty()) {
    std::set<int> ranks;
    for (const auto& r : split(*s, ',')) {
      ranks.insert(int_in_range("--local-ranks-filter", r, 0, 1000000));
    }
    c.local_ranks_filter = std::move(ranks);
  }
}

// The static rendezvous' options: --node-rank, --master-addr/-port, --local-addr.
void read_master(const RawOptions& raw, LaunchConfig& c) {
  const auto& v = raw.values;
  if (const auto* s = find(v, "node_rank")) {
    c.node_rank = int_in_range("--node-rank", *s, 0, 1000000);
  }
  if (const auto* s = find(v, "master_addr")) {
    // torchrun's --help suggests "[0:0:0:0:0:0:0:1]" for IPv6; its endpoint parser drops
    // the brackets, so the workers get MASTER_ADDR=::1, not "[::1]".
    std::string addr = trimmed(*s);
    if (addr.size() > 2 && addr.front() == '[' && addr.back() == ']') {
      addr = addr.substr(1, addr.size() - 2);
    }
    c.master_addr = addr;
  }
  if (const auto* s = find(v, "master_port")) {
    c.master_port = int_in_range("--master-port", *s, 0, 65535);
  }
  if (const auto* s = find(v, "local_addr")) c.local_addr = trimmed(*s);
}

// Signals and shutdown: command line / PET_ wins over torchrun's own env name, then the
// default. --virtual-local-rank's device check.
void read_signals(const RawOptions& raw, const HostFacts& host, LaunchConfig& c) {
  const auto& v = raw.values;
  const std::string* sig = find(v, "signals_to_handle");
  if (!sig) sig = find(host.env, "TORCHELASTIC_SIGNALS_TO_HANDLE");
  if (sig) c.signals_to_handle_text = *sig;
  // As torchrun, a name it cannot handle is a warning and the others are handled;
  // SIGKILL and SIGSTOP (which torchrun fails on) are an error.
  std::vector<std::string> unknown;
  try {
    c.signals_to_handle = parse_signal_list(c.signals_to_handle_text, &unknown);
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("--signals-to-handle: {}", e.what()));
  }
  for (const auto& u : unknown) {
    c.warnings.push_back(fmt::format("--signals-to-handle: {}; not handled (the others are)", u));
  }
  const std::string* grace = find(v, "shutdown_timeout");
  if (!grace) grace = find(host.env, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
  if (grace) c.shutdown_timeout_s = seconds_value("--shutdown-timeout", *grace);
  c.virtual_local_rank = raw.flags.count("virtual_local_rank") > 0;
  if (const auto* cvd = find(host.env, "CUDA_VISIBLE_DEVICES"); cvd && c.virtual_local_rank) {
    // Each worker gets one entry of the list; a second worker on one GPU would be silent
    // memory contention (or a deadlock in NCCL), so more workers than entries is an error.
    std::size_t devices = 0;
    for (const auto& d : split(*cvd, ',')) devices += trim(d).empty() ? 0 : 1;
    if (static_cast<std::size_t>(c.nproc_per_node) > devices) {
      throw UsageError(fmt::format(
          "--virtual-local-rank: {} workers per node but CUDA_VISIBLE_DEVICES='{}' lists {} "
          "device(s); each worker needs a device of its own",
          c.nproc_per_node, *cvd, devices));
    }
  }
}

// ddprun's watchdogs: --stall-timeout and torch's file timer (TORCHELASTIC_*); how a
// failure exits (--exit-codes).
void read_watchdogs(const RawOptions& raw, const HostFacts& host, LaunchConfig& c) {
  if (const auto* s = find(raw.values, "stall_timeout")) {
    c.stall_timeout_s = std::min(seconds_value("--stall-timeout", *s), 1e7);
  }
  if (const auto* t = find(raw.values, "straggler_threshold")) {
    c.straggler_threshold_s = std::min(seconds_value("--straggler-threshold", *t), 1e6);
  }
  if (const auto* w = find(raw.values, "straggler_window")) {
    c.straggler_window_s = std::min(seconds_value("--straggler-window", *w), 1e6);
    if (c.straggler_window_s < 1) throw UsageError("--straggler-window: at least 1 second");
  }
  c.exclude_stragglers = raw.flags.count("exclude_stragglers") > 0;
  if (c.exclude_stragglers && (c.stall_timeout_s <= 0 || c.straggler_threshold_s <= 0)) {
    throw UsageError(
        "--exclude-stragglers: needs the straggler ranking, which runs with --stall-timeout "
        "and a --straggler-threshold above 0");
  }
  if (const auto* e = find(raw.values, "exit_codes")) {
    if (*e != "torchrun" && *e != "classes") {
      throw UsageError("--exit-codes: '" + *e +
                       "' is neither 'torchrun' (every failure exits 1) nor 'classes'");
    }
    c.exit_code_classes = *e == "classes";
  }
  c.preflight = raw.flags.count("preflight") > 0;
  if (const auto* f = find(raw.values, "preflight_slow_factor")) {
    const auto v = to_double(*f);
    if (!v || *v <= 1 || *v > 1e6) {
      throw UsageError("--preflight-slow-factor: '" + *f +
                       "' is not a number above 1 (how many times the median is slow)");
    }
    c.preflight_slow_factor = *v;
  }
  if (const auto* t = find(raw.values, "preflight_timeout")) {
    c.preflight_timeout_s = std::min(seconds_value("--preflight-timeout", *t), 1e6);
    if (c.preflight_timeout_s < 1) throw UsageError("--preflight-timeout: at least 1 second");
  }
  if (const auto* b = find(raw.values, "blocklist")) {
    if (b->empty()) throw UsageError("--blocklist: an empty path");
    try {
      preflight::read_blocklist(*b);  // unreadable: say so before joining anything
    } catch (const preflight::BlocklistError& e) {
      throw UsageError(e.what());
    }
    c.blocklist_file = *b;
  }
  if (const auto* r = find(raw.values, "record_file")) {
    if (r->empty()) throw UsageError("--record-file: an empty path");
    c.record_file = *r;
  }
  if (const auto* on = find(host.env, "TORCHELASTIC_ENABLE_FILE_TIMER"); on && *on == "1") {
    const auto* path = find(host.env, "TORCHELASTIC_TIMER_FILE");
    c.file_timer_path = path ? *path : temp_dir(host.env) + "/watchdog_timer_" + random_uuid();
    if (c.file_timer_path.empty()) {
      throw UsageError("TORCHELASTIC_TIMER_FILE is empty (TORCHELASTIC_ENABLE_FILE_TIMER=1)");
    }
  }
}

// torchrun options ddprun does not implement: their no-op values are accepted, any
// other is refused with one line naming what to use instead (never silently ignored).
// --numa-binding is checked here too (torchrun's choices), and the duplicate filters read.
void read_compat(const RawOptions& raw, LaunchConfig& c) {
  const auto& v = raw.values;
  const auto refuse = [&](const char* key, const char* flag_name, const char* no_op,
                          const char* instead) {
    const auto* s = find(v, key);
    if (s && !trimmed(*s).empty() && trimmed(*s) != no_op) {
      throw UsageError(fmt::format("{}={}: not supported by ddprun; {}", flag_name, *s, instead));
    }
  };
  // torchrun's registered handlers: console, null and dynamic_rendezvous (a null one).
  if (const auto* s = find(v, "event_log_handler")) {
    const std::string h = trimmed(*s);
    if (h == "console") c.event_log_handler = h;
    refuse("event_log_handler", "--event-log-handler",
           h == "console" || h == "dynamic_rendezvous" ? h.c_str() : "null",
           "it cannot load torchelastic event handler plugins (its handlers: console, null)");
  }
  refuse("logs_specs", "--logs-specs", "",
         "it cannot load Python LogsSpecs plugins: its log layout is torchrun's default "
         "(--log-dir, -r/--redirects, -t/--tee, --local-ranks-filter)");
  if (const auto* s = find(v, "numa_binding")) {
    // torchrun's choices (torch.numa.binding.AffinityMode); "" is not one of them.
    c.numa_binding = choice("--numa-binding", *s, {"node", "socket", "exclusive", "core-complex"});
  }
  // torchrun's comma_separated_list: "a,b" is two filters, ",," a comma inside one.
  const auto filters = [&](const char* key) {
    std::vector<std::string> out;
    const auto* s = find(v, key);
    if (!s || s->empty()) return out;
    std::string item;
    for (std::size_t i = 0; i <= s->size(); ++i) {
      if (i + 1 < s->size() && (*s)[i] == ',' && (*s)[i + 1] == ',') {
        item += ',';
        ++i;
      } else if (i == s->size() || (*s)[i] == ',') {
        if (!item.empty()) out.push_back(item);  // an empty filter would match every line
        item.clear();
      } else {
        item += (*s)[i];
      }
    }
    return out;
  };
  c.duplicate_stdout_filters = filters("duplicate_stdout_filters");
  c.duplicate_stderr_filters = filters("duplicate_stderr_filters");
}

// Rendezvous defaults, as the newest torchrun: --standalone, or a single node with
// static defaults, becomes c10d on a free local port (no fixed 29500 to collide on).
void apply_rendezvous_defaults(const RawOptions& raw, LaunchConfig& c) {
  c.standalone = raw.flags.count("standalone") > 0;
  const bool explicit_id = find(raw.values, "rdzv_id") != nullptr;
  if (c.standalone && c.max_nodes > 1) {
    // torchrun would wait for nodes that cannot find this one's random local port.
    throw UsageError(
        fmt::format("--standalone is a single-node job (a rendezvous on a free local port), but "
                    "--nnodes asks for {} nodes: leave out --standalone and give every node "
                    "--rdzv-backend c10d --rdzv-endpoint HOST:PORT",
                    c.max_nodes));
  }
  if (c.standalone) {
    c.rdzv_backend = rdzv::Backend::kC10d;
    c.rdzv_endpoint = "localhost:0";
    c.rdzv_id = random_uuid();
  } else if (c.rdzv_backend == rdzv::Backend::kStatic && c.rdzv_endpoint.empty() &&
             !c.master_port && c.max_nodes == 1) {
    c.rdzv_backend = rdzv::Backend::kC10d;
    c.rdzv_endpoint = "localhost:0";
    if (!explicit_id) c.rdzv_id = random_uuid();
  }
}

// Positionals: the script, then everything after it belongs to the script.
void read_positionals(const RawOptions& raw, const HostFacts& host, LaunchConfig& c) {
  auto pos = raw.positional;
  // argparse (Python 3.14, torchrun 2.14's) drops one "--": the one before the script,
  // else one right after it (`ddprun train.py -- --lr 0.1`); any other is the script's.
  const bool dash_before = !pos.empty() && pos.front() == "--";
  if (dash_before) pos.erase(pos.begin());
  if (pos.empty()) throw UsageError("the following arguments are required: training_script");
  if (!dash_before && pos.size() > 1 && pos[1] == "--") pos.erase(pos.begin() + 1);
  if (!pos.front().empty() && pos.front()[0] == '-') {
    throw UsageError(fmt::format("unrecognized arguments: {}", pos.front()));
  }
  c.training_script = pos.front();
  c.script_args.assign(pos.begin() + 1, pos.end());
  if (c.entry == EntryKind::kPythonScript && host.file_exists &&
      !host.file_exists(c.training_script)) {
    throw UsageError(fmt::format("training script '{}' does not exist", c.training_script));
  }
}

}  // namespace

LaunchConfig build_config(const RawOptions& raw, const HostFacts& host) {
  LaunchConfig c;
  read_nodes(raw, host, c);
  read_rendezvous(raw, c);
  read_entry(raw, host, c);
  read_output(raw, host, c);
  read_master(raw, c);
  read_signals(raw, host, c);
  read_watchdogs(raw, host, c);
  read_compat(raw, c);
  apply_rendezvous_defaults(raw, c);
  read_ssh_options(raw, c);
  read_positionals(raw, host, c);
  return c;
}

}  // namespace ddprun::launcher
