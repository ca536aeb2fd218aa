// config.cpp: interpretation and checks of the raw option strings (see config.h).
#include "launcher/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <initializer_list>
#include <random>

#include "launcher/process/signals.h"
#include "rendezvous/registry.h"

namespace ddprun::launcher {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string::size_type start = 0;
  while (true) {
    const auto pos = s.find(sep, start);
    out.push_back(s.substr(start, pos == std::string::npos ? std::string::npos : pos - start));
    if (pos == std::string::npos) return out;
    start = pos + 1;
  }
}

std::optional<long long> to_int(const std::string& text) {
  const std::string t = trim(text);
  long long v = 0;
  const char* first = t.data();
  const char* last = t.data() + t.size();
  if (!t.empty() && *first == '+') ++first;
  const auto [ptr, ec] = std::from_chars(first, last, v);
  if (t.empty() || ec != std::errc() || ptr != last) return std::nullopt;
  return v;
}

std::optional<double> to_double(const std::string& text) {
  const std::string t = trim(text);
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(t.c_str(), &end);
  if (errno != 0 || end != t.c_str() + t.size() || v != v) return std::nullopt;
  return v;
}

int int_in_range(const std::string& flag, const std::string& text, long long lo, long long hi) {
  const auto v = to_int(text);
  if (!v) throw UsageError(fmt::format("{}: invalid int value: '{}'", flag, text));
  if (*v < lo || *v > hi) {
    throw UsageError(fmt::format("{}: {} is out of range [{}, {}]", flag, *v, lo, hi));
  }
  return static_cast<int>(*v);
}

double seconds_value(const std::string& flag, const std::string& text) {
  const auto v = to_double(text);
  if (!v || *v < 0) {
    throw UsageError(
        fmt::format("{}: expected a non-negative number of seconds, got '{}'", flag, text));
  }
  return *v;
}

// argparse's choices=: the trimmed `text` if it is one of `choices`.
std::string choice(const std::string& flag, const std::string& text,
                   std::initializer_list<const char*> choices) {
  std::string t = trim(text);
  std::string all;
  for (const char* c : choices) {
    if (t == c) return t;
    all += (all.empty() ? "" : ", ") + std::string(c);
  }
  throw UsageError(fmt::format("{}: invalid choice '{}' (choose from {})", flag, text, all));
}

// A random version-4 UUID, as torchrun uses for --standalone run ids.
std::string random_uuid() {
  std::random_device rd;
  std::mt19937_64 gen((static_cast<std::uint64_t>(rd()) << 32) ^ rd());
  std::uniform_int_distribution<int> hex(0, 15);
  std::string out;
  for (int i = 0; i < 32; ++i) {
    if (i == 8 || i == 12 || i == 16 || i == 20) out += '-';
    int d = hex(gen);
    if (i == 12) d = 4;
    if (i == 16) d = 8 | (d & 3);
    out += "0123456789abcdef"[d];
  }
  return out;
}

const std::string* find(const std::map<std::string, std::string>& m, const std::string& k) {
  const auto it = m.find(k);
  return it == m.end() ? nullptr : &it->second;
}

int resolve_nproc(const std::string& spec, const HostFacts& host) {
  if (spec == "cpu") return std::max(1, host.cpu_count);
  if (spec == "gpu") {
    if (host.gpu_count <= 0) {
      throw UsageError(
          "--nproc-per-node=gpu: no NVIDIA GPU is visible (checked /proc/driver/nvidia/gpus, "
          "/dev/nvidia*, CUDA_VISIBLE_DEVICES)");
    }
    return host.gpu_count;
  }
  if (spec == "auto") return host.gpu_count > 0 ? host.gpu_count : std::max(1, host.cpu_count);
  const auto v = to_int(spec);
  if (!v) {
    throw UsageError(fmt::format(
        "--nproc-per-node: invalid value '{}' (expected a positive int, cpu, gpu or auto)", spec));
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
  if (const auto* s = find(v, "hostfile")) o.hostfile = trim(*s);
  if (const auto* s = find(v, "hosts")) o.hosts = trim(*s);
  if (const auto* s = find(v, "include")) o.include = trim(*s);
  if (const auto* s = find(v, "exclude")) o.exclude = trim(*s);
  if (const auto* s = find(v, "ssh_command")) o.ssh_command = *s;
  if (const auto* s = find(v, "ssh_port")) o.ssh_port = int_in_range("--ssh-port", *s, 1, 65535);
  if (const auto* s = find(v, "remote_ddprun")) o.remote_ddprun = trim(*s);
  if (const auto* s = find(v, "env")) {
    for (const auto& e : split(*s, ',')) {
      if (!trim(e).empty()) o.env.push_back(trim(e));
    }
  }
  o.exit_on_stdin_eof = raw.flags.count("exit_on_stdin_eof") > 0;
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
  if (const auto* s = find(v, "rdzv_backend"); s && trim(*s) != "c10d") {
    throw UsageError("--rdzv-backend " + trim(*s) +
                     ": --hostfile/--hosts launch with the c10d backend only");
  }
}

}  // namespace

int StdStreams::for_rank(int local_rank) const {
  if (per_rank.empty()) return all;
  const auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? 0 : it->second;
}

StdStreams parse_std_streams(const std::string& flag, const std::string& text) {
  StdStreams out;
  const std::string t = trim(text);
  const auto bad = [&] {
    return UsageError(
        fmt::format("{}: invalid value '{}' (expected 0-3 or local_rank:value pairs like 0:1,1:3)",
                    flag, text));
  };
  if (t.find(':') == std::string::npos) {
    const auto v = to_int(t);
    if (!v || *v < 0 || *v > 3) throw bad();
    out.all = static_cast<int>(*v);
    return out;
  }
  for (const auto& pair : split(t, ',')) {
    const auto colon = pair.find(':');
    if (colon == std::string::npos) throw bad();
    const auto rank = to_int(pair.substr(0, colon));
    const auto v = to_int(pair.substr(colon + 1));
    if (!rank || *rank < 0 || !v || *v < 0 || *v > 3) throw bad();
    out.per_rank[static_cast<int>(*rank)] = static_cast<int>(*v);
  }
  return out;
}

std::pair<int, int> parse_nnodes(const std::string& text) {
  const auto parts = split(trim(text), ':');
  const auto bad = [&](const std::string& why) {
    return UsageError(fmt::format("--nnodes: invalid value '{}' ({})", text, why));
  };
  if (parts.size() > 2) throw bad("expected N or MIN:MAX");
  const auto lo = to_int(parts[0]);
  const auto hi = parts.size() == 2 ? to_int(parts[1]) : lo;
  if (!lo || !hi) throw bad("expected N or MIN:MAX with integers");
  if (*lo <= 0) throw bad("the node count must be positive");
  if (*lo > *hi) throw bad("MIN must not exceed MAX");
  if (*hi > 1000000) throw bad("too many nodes");
  return {static_cast<int>(*lo), static_cast<int>(*hi)};
}

std::string substitute_local_rank(const std::string& arg, int local_rank) {
  // torchrun passes every argument through Python's string.Template.safe_substitute with
  // the one name local_rank; its rules, reproduced: "$$" is a literal "$"; "$name" and
  // "${name}" (name: [_A-Za-z][_A-Za-z0-9]*, longest match) are replaced when name is
  // exactly local_rank and kept otherwise; any other "$" is kept.
  const auto is_start = [](char c) {
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');  // ASCII only
  };
  const auto is_rest = [&](char c) { return is_start(c) || (c >= '0' && c <= '9'); };
  const std::string value = std::to_string(local_rank);
  std::string out;
  std::string::size_type i = 0;
  while (i < arg.size()) {
    const auto dollar = arg.find('$', i);
    if (dollar == std::string::npos || dollar + 1 == arg.size()) break;
    out.append(arg, i, dollar - i);
    std::string::size_type at = dollar + 1;
    if (arg[at] == '$') {
      out += '$';
      i = at + 1;
      continue;
    }
    const bool braced = arg[at] == '{';
    if (braced) ++at;
    auto end = at;
    if (end < arg.size() && is_start(arg[end])) {
      while (end < arg.size() && is_rest(arg[end])) ++end;
    }
    const bool closed = !braced || (end < arg.size() && arg[end] == '}');
    if (end > at && closed && arg.compare(at, end - at, "local_rank") == 0) {
      out += value;
      i = end + (braced ? 1 : 0);
    } else {
      out += '$';  // an unknown or malformed placeholder stays as written
      i = dollar + 1;
    }
  }
  out.append(arg, std::min(i, arg.size()), std::string::npos);
  return out;
}

LaunchConfig build_config(const RawOptions& raw, const HostFacts& host) {
  LaunchConfig c;
  const auto& v = raw.values;
  const auto flag = [&](const char* name) { return raw.flags.count(name) > 0; };

  if (const auto* s = find(v, "nnodes")) std::tie(c.min_nodes, c.max_nodes) = parse_nnodes(*s);
  if (const auto* s = find(v, "nproc_per_node")) c.nproc_spec = trim(*s);
  // An ssh launch runs no worker here: each host's agent resolves cpu/gpu/auto itself.
  const bool ssh_launch = v.count("hostfile") > 0 || v.count("hosts") > 0;
  c.nproc_per_node = ssh_launch ? 1 : resolve_nproc(c.nproc_spec, host);

  try {
    if (const auto* s = find(v, "rdzv_backend")) {
      c.rdzv_backend = rdzv::parse_backend(trim(*s));
      c.rdzv_backend_alias = rdzv::backend_alias(trim(*s));
    }
    if (const auto* s = find(v, "rdzv_conf")) c.rdzv_conf = rdzv::parse_rdzv_conf(*s);
  } catch (const rdzv::RendezvousError& e) {
    throw UsageError(e.what());
  }
  if (const auto* s = find(v, "rdzv_endpoint")) c.rdzv_endpoint = trim(*s);
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
  if (const auto* p = find(host.env, "PYTHON_EXEC"); p && !p->empty()) c.python_exec = *p;

  if (const auto* s = find(v, "log_dir")) c.log_dir = *s;
  if (const auto* s = find(v, "redirects")) c.redirects = parse_std_streams("--redirects", *s);
  if (const auto* s = find(v, "tee")) c.tee = parse_std_streams("--tee", *s);
  if (const auto* s = find(v, "local_ranks_filter"); s && !trim(*s).empty()) {
    std::set<int> ranks;
    for (const auto& r : split(*s, ',')) {
      ranks.insert(int_in_range("--local-ranks-filter", r, 0, 1000000));
    }
    c.local_ranks_filter = std::move(ranks);
  }

  if (const auto* s = find(v, "node_rank")) {
    c.node_rank = int_in_range("--node-rank", *s, 0, 1000000);
  }
  if (const auto* s = find(v, "master_addr")) c.master_addr = trim(*s);
  if (const auto* s = find(v, "master_port")) {
    c.master_port = int_in_range("--master-port", *s, 0, 65535);
  }
  if (const auto* s = find(v, "local_addr")) c.local_addr = trim(*s);

  // Signals: command line / PET_ wins over torchrun's own env name, then the default.
  const std::string* sig = find(v, "signals_to_handle");
  if (!sig) sig = find(host.env, "TORCHELASTIC_SIGNALS_TO_HANDLE");
  try {
    c.signals_to_handle = parse_signal_list(sig ? *sig : "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("--signals-to-handle: {}", e.what()));
  }
  const std::string* grace = find(v, "shutdown_timeout");
  if (!grace) grace = find(host.env, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
  if (grace) c.shutdown_timeout_s = seconds_value("--shutdown-timeout", *grace);
  c.virtual_local_rank = flag("virtual_local_rank");
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

  // ddprun's watchdogs.
  if (const auto* s = find(v, "stall_timeout")) {
    c.stall_timeout_s = std::min(seconds_value("--stall-timeout", *s), 1e7);
  }
  if (const auto* on = find(host.env, "TORCHELASTIC_ENABLE_FILE_TIMER"); on && *on == "1") {
    const auto* path = find(host.env, "TORCHELASTIC_TIMER_FILE");
    c.file_timer_path = path ? *path : "/tmp/watchdog_timer_" + random_uuid();
    if (c.file_timer_path.empty()) {
      throw UsageError("TORCHELASTIC_TIMER_FILE is empty (TORCHELASTIC_ENABLE_FILE_TIMER=1)");
    }
  }

  // Accepted for compatibility, not implemented: noted for one warning at start.
  const auto compat = [&](const char* key, const char* flag_name, std::string& field,
                          const char* no_op_value) {
    const auto* s = find(v, key);
    if (!s) return;
    field = *s;
    if (!trim(*s).empty() && trim(*s) != no_op_value) {
      c.ignored_options.push_back(fmt::format("{}={}", flag_name, *s));
    }
  };
  compat("event_log_handler", "--event-log-handler", c.event_log_handler, "null");
  compat("logs_specs", "--logs-specs", c.logs_specs, "");
  if (const auto* s = find(v, "numa_binding")) {
    // torchrun's choices (torch.numa.binding.AffinityMode); "" is not one of them.
    c.numa_binding = choice("--numa-binding", *s, {"node", "socket", "exclusive", "core-complex"});
  }
  compat("duplicate_stdout_filters", "--duplicate-stdout-filters", c.duplicate_stdout_filters, "");
  compat("duplicate_stderr_filters", "--duplicate-stderr-filters", c.duplicate_stderr_filters, "");

  // Rendezvous defaults, as the newest torchrun: --standalone, or a single node with
  // static defaults, becomes c10d on a free local port (no fixed 29500 to collide on).
  c.standalone = flag("standalone");
  const bool explicit_id = find(v, "rdzv_id") != nullptr;
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

  read_ssh_options(raw, c);

  // Positionals: the script, then everything after it belongs to the script.
  auto pos = raw.positional;
  if (!pos.empty() && pos.front() == "--") pos.erase(pos.begin());
  if (pos.empty()) throw UsageError("the following arguments are required: training_script");
  if (!pos.front().empty() && pos.front()[0] == '-') {
    throw UsageError(fmt::format("unrecognized arguments: {}", pos.front()));
  }
  c.training_script = pos.front();
  c.script_args.assign(pos.begin() + 1, pos.end());
  if (c.entry == EntryKind::kPythonScript && host.file_exists &&
      !host.file_exists(c.training_script)) {
    throw UsageError(fmt::format("training script '{}' does not exist", c.training_script));
  }
  return c;
}

}  // namespace ddprun::launcher
