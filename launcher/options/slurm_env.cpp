// slurm_env.cpp: options implied by a Slurm job step (see slurm_env.h). Used by cli.cpp
// before build_config.
#include "launcher/options/slurm_env.h"

#include <fmt/format.h>

#include <optional>
#include <utility>
#include <variant>
#include <vector>

#include "base/text.h"
#include "launcher/options/slurm_hostlist.h"
#include "store/core/host_port.h"

namespace ddprun::launcher {
namespace {

using slurm::Env;

// The first of `names` set in `env`, as {name, value}; {"", ""} when none is.
std::pair<std::string, std::string> first_set(const Env& env,
                                              std::initializer_list<const char*> names) {
  for (const char* n : names) {
    const auto it = env.find(n);
    if (it != env.end() && !it->second.empty()) return {n, it->second};
  }
  return {};
}

unsigned long long number(const std::pair<std::string, std::string>& var) {
  const auto v = parse_int<unsigned long long>(var.second);
  if (!v) {
    throw UsageError(
        fmt::format("{}='{}' is not a number (is this a Slurm job step? --no-slurm "
                    "ignores the SLURM_* environment)",
                    var.first, var.second));
  }
  return *v;
}

// Step ids Slurm gives the batch script, the extern and the interactive step (and other
// special steps): 0xfffffff0 and above. Those are not `srun ddprun` steps.
constexpr unsigned long long kFirstSpecialStep = 0xfffffff0ULL;

// GPUs Slurm gave this node's step, or 0. Throws UsageError for a malformed count.
unsigned long long step_gpus(const Env& env) {
  if (const auto on_node = first_set(env, {"SLURM_GPUS_ON_NODE"}); !on_node.first.empty()) {
    return number(on_node);
  }
  const auto list = first_set(env, {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS"});
  unsigned long long n = 0;
  if (list.first.empty()) return n;
  for (const auto& gpu : split(list.second, ',')) n += gpu.empty() ? 0 : 1;
  return n;
}

// The most workers per node ddprun starts (--nproc-per-node's range, config.cpp).
constexpr unsigned long long kMaxWorkersPerNode = 65536;

// A Slurm value that a flag on the command line made unnecessary: what was wrong with it
// becomes a warning instead of the end of the launch.
std::string unused_because(const std::string& fault, const std::string& flag) {
  return fmt::format("{} (not used: {} is given)", fault, flag);
}

}  // namespace

int slurm_port(unsigned long long job_id, unsigned long long step_id) {
  return kSlurmPortBase +
         static_cast<int>((job_id % kSlurmPortSpan * 8 + step_id) % kSlurmPortSpan);
}

namespace slurm {

Asked::Asked(const RawOptions& options) : raw(&options) {
  if (const auto it = options.values.find("rdzv_backend"); it != options.values.end()) {
    backend = it->second;
  }
  const bool master_given = has("master_addr") || has("master_port");
  static_style = backend == "static" || (backend.empty() && master_given);
  c10d_style = !static_style && (backend.empty() || backend == "c10d");
}

std::variant<StepIds, SlurmNotice> slurm_step_or_notice(const RawOptions& raw, const Env& env) {
  const auto job = first_set(env, {"SLURM_JOB_ID", "SLURM_JOBID"});
  if (job.first.empty() || raw.flags.count("no_slurm") > 0) return SlurmNotice{};
  const auto step = first_set(env, {"SLURM_STEP_ID", "SLURM_STEPID"});
  if (step.first.empty() ||
      (parse_int<unsigned long long>(step.second) && number(step) >= kFirstSpecialStep)) {
    return SlurmNotice{
        fmt::format("{}={} is set but this is not an srun job step (no SLURM_STEP_ID: an "
                    "salloc shell or a batch script): Slurm's settings are not used; run "
                    "`srun --ntasks-per-node=1 ddprun ...` to use them (docs/slurm.md)",
                    job.first, job.second),
        false,
        {}};
  }
  if (raw.flags.count("standalone") > 0) {
    return SlurmNotice{
        "--standalone: Slurm's settings are not used (--standalone is a single-node job)",
        false,
        {}};
  }
  return StepIds{number(job), number(step)};
}

NodeCount read_nnodes(const Asked& asked, const Env& env, const StepIds& ids,
                      std::vector<std::string>& warnings) {
  const auto var = first_set(env, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES"});
  if (var.first.empty()) {
    if (!asked.has("nnodes")) {
      throw UsageError(
          fmt::format("Slurm job step {}.{} without SLURM_STEP_NUM_NODES or "
                      "SLURM_NNODES: give --nnodes, or --no-slurm",
                      ids.job, ids.step));
    }
    return {};
  }
  if (const auto v = parse_int<unsigned long long>(var.second); v) return {var.first, *v};
  if (!asked.has("nnodes")) number(var);  // throws, naming the variable
  warnings.push_back(
      unused_because(fmt::format("{}='{}' is not a number", var.first, var.second), "--nnodes"));
  return {var.first, std::nullopt};
}

std::string options_left_to_slurm(const Asked& asked) {
  std::vector<std::pair<const char*, const char*>> fillable = {{"nnodes", "--nnodes"},
                                                               {"node_rank", "--node-rank"}};
  if (asked.static_style && !asked.has("rdzv_endpoint")) {
    fillable.insert(fillable.end(),
                    {{"master_addr", "--master-addr"}, {"master_port", "--master-port"}});
  } else if (asked.c10d_style) {
    fillable.insert(fillable.end(),
                    {{"rdzv_backend", "--rdzv-backend"}, {"rdzv_endpoint", "--rdzv-endpoint"}});
  }
  // The static rendezvous needs no run id (torchrun's static launch gives none).
  if (!asked.static_style) fillable.emplace_back("rdzv_id", "--rdzv-id");
  fillable.emplace_back("nproc_per_node", "--nproc-per-node");
  std::string open;
  for (const auto& [dest, flag] : fillable) {
    if (!asked.has(dest)) open += fmt::format("{}{}", open.empty() ? "" : " ", flag);
  }
  return open;
}

void check_one_task_per_node(const Asked& asked, const Env& env, const NodeCount& nnodes) {
  // More tasks than nodes means one agent per task, each starting a node's workers: a
  // mistake, unless the command line gives every option Slurm would fill.
  const auto tasks = first_set(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"});
  const std::string left = options_left_to_slurm(asked);
  if (left.empty() || tasks.first.empty() || !nnodes.n || *nnodes.n == 0 ||
      number(tasks) <= *nnodes.n) {
    return;
  }
  const auto per_node = first_set(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  throw UsageError(fmt::format(
      "srun started {} tasks on {} nodes ({}={}{}): ddprun starts a node's workers itself "
      "and must run once per node: `srun --ntasks-per-node=1 ddprun ...` (or --no-slurm; for "
      "one ddprun per task, also give {})",
      number(tasks), *nnodes.n, tasks.first, tasks.second,
      per_node.first.empty() ? "" : fmt::format(", {}={}", per_node.first, per_node.second), left));
}

std::optional<unsigned long long> read_node_id(const Asked& asked, const Env& env,
                                               const StepIds& ids, const NodeCount& nnodes,
                                               std::vector<std::string>& warnings) {
  const auto var = first_set(env, {"SLURM_NODEID"});
  const auto node_id = parse_int<unsigned long long>(var.second);
  if (node_id && (!nnodes.n || *node_id < *nnodes.n)) return node_id;
  const std::string fault =
      var.first.empty() ? "SLURM_NODEID is not set"
                        : fmt::format("SLURM_NODEID='{}' is not a node of the step's {}",
                                      var.second, nnodes.n ? std::to_string(*nnodes.n) : "nodes");
  if (!asked.has("node_rank")) {
    throw UsageError(fmt::format("Slurm job step {}.{}: {}: give --node-rank, or --no-slurm",
                                 ids.job, ids.step, fault));
  }
  if (!var.first.empty()) warnings.push_back(unused_because(fault, "--node-rank"));
  return node_id;
}

namespace {

// The flag that the first host of the node list would fill, or nullptr when none is open.
const char* open_host_flag(const Asked& asked) {
  if (asked.static_style) {
    return !asked.has("rdzv_endpoint") && !asked.has("master_addr") ? "--master-addr" : nullptr;
  }
  return asked.c10d_style && !asked.has("rdzv_endpoint") ? "--rdzv-endpoint" : nullptr;
}

// What made the node list unnecessary (open_host_flag is nullptr).
std::string host_given_by(const Asked& asked) {
  if (asked.has("rdzv_endpoint")) return "--rdzv-endpoint";
  if (asked.static_style) return "--master-addr";
  return "--rdzv-backend " + asked.backend;
}

}  // namespace

std::vector<std::string> read_hostlist(const Asked& asked, const Env& env, const NodeCount& nnodes,
                                       std::vector<std::string>& warnings) {
  const auto var = first_set(env, {"SLURM_STEP_NODELIST", "SLURM_NODELIST"});
  std::string fault;
  try {
    auto hosts = expand_hostlist(var.second);
    if (!nnodes.n || hosts.size() == *nnodes.n) return hosts;
    fault = fmt::format("{}={} names {} hosts but {}={}", var.first, var.second, hosts.size(),
                        nnodes.var, *nnodes.n);
  } catch (const HostlistError& e) {
    fault = fmt::format("{}: {}", var.first.empty() ? "SLURM_STEP_NODELIST" : var.first, e.what());
  }
  if (const char* flag = open_host_flag(asked)) {
    throw UsageError(fmt::format("{} (give {}, or --no-slurm)", fault, flag));
  }
  if (!var.first.empty()) warnings.push_back(unused_because(fault, host_given_by(asked)));
  return {};
}

int slurm_port_from_env(const Env& env, const StepIds& ids) {
  const auto fixed = first_set(env, {"DDPRUN_SLURM_PORT"});
  if (fixed.first.empty()) return slurm_port(ids.job, ids.step);
  const auto v = parse_int<unsigned long long>(fixed.second);
  if (!v || *v == 0 || *v > 65535) {
    throw UsageError(
        fmt::format("DDPRUN_SLURM_PORT='{}': expected a port in [1, 65535]", fixed.second));
  }
  return static_cast<int>(*v);
}

unsigned long long read_gpus(const Asked& asked, const Env& env, const StepIds& ids) {
  if (asked.has("nproc_per_node")) return 0;
  const unsigned long long gpus = step_gpus(env);
  if (gpus <= kMaxWorkersPerNode) return gpus;
  const auto var = first_set(env, {"SLURM_GPUS_ON_NODE", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS"});
  throw UsageError(fmt::format(
      "Slurm job step {}.{}: {}={} gives {} GPUs on this node, more than ddprun's limit of "
      "{} workers per node: give --nproc-per-node, or --no-slurm",
      ids.job, ids.step, var.first,
      var.second.size() > 40 ? var.second.substr(0, 40) + "..." : var.second, gpus,
      kMaxWorkersPerNode));
}

namespace {

// The notice's two lists: what Slurm filled, what the command line / PET_* gave and kept.
struct Filling {
  RawOptions& raw;
  std::string taken;
  std::string kept;

  // Sets `dest` to `value` unless it was given; true when it was set.
  bool fill(const char* dest, const char* flag, const std::string& value) {
    if (raw.values.count(dest) > 0) {
      kept += fmt::format("{}{}", kept.empty() ? "" : " ", flag);
      return false;
    }
    raw.values[dest] = value;
    taken += fmt::format("{}{}={}", taken.empty() ? "" : " ", flag, value);
    return true;
  }
};

}  // namespace

SlurmNotice fill_from_slurm(RawOptions& raw, const Asked& asked, const StepValues& values) {
  const bool stand_aside = options_left_to_slurm(asked).empty();
  Filling f{raw, {}, {}};
  // Where a value was left unread (a flag gives it), fill only lists the flag as kept.
  f.fill("nnodes", "--nnodes", values.nnodes ? std::to_string(*values.nnodes) : "");
  f.fill("node_rank", "--node-rank", values.node_id ? std::to_string(*values.node_id) : "");
  const std::string first_host = values.hosts.empty() ? "" : values.hosts.front();
  if (asked.static_style) {
    if (raw.values.count("rdzv_endpoint") == 0) {
      f.fill("master_addr", "--master-addr", first_host);
      f.fill("master_port", "--master-port", std::to_string(values.port));
    }
  } else if (asked.c10d_style) {
    f.fill("rdzv_backend", "--rdzv-backend", "c10d");
    f.fill("rdzv_endpoint", "--rdzv-endpoint", store::format_host_port(first_host, values.port));
  }
  if (!stand_aside || asked.has("rdzv_id")) {  // standing aside, static: no run id taken
    f.fill("rdzv_id", "--rdzv-id", fmt::format("slurm-{}.{}", values.ids.job, values.ids.step));
  }
  if (f.fill("nproc_per_node", "--nproc-per-node",
             std::to_string(values.gpus > 0 ? values.gpus : 1)) &&
      values.gpus == 0) {
    f.taken += " (no GPUs from Slurm)";
  }
  return {fmt::format("Slurm job step {}.{}: {}{} (--no-slurm turns this off; docs/slurm.md)",
                      values.ids.job, values.ids.step,
                      f.taken.empty() ? "nothing taken from SLURM_*" : "from SLURM_*: " + f.taken,
                      f.kept.empty() ? "" : "; given, kept: " + f.kept),
          !f.taken.empty(),
          {}};
}

}  // namespace slurm

SlurmNotice apply_slurm_environment(RawOptions& raw, const slurm::Env& env) {
  using namespace slurm;
  auto step = slurm_step_or_notice(raw, env);
  if (auto* notice = std::get_if<SlurmNotice>(&step)) return std::move(*notice);
  const StepIds ids = std::get<StepIds>(step);
  const Asked asked(raw);
  std::vector<std::string> warnings;
  // Each SLURM_* value is read only for an option the command line and PET_* left open;
  // when a flag gives it, a bad value is only warned about (docs/slurm.md).
  const NodeCount nnodes = read_nnodes(asked, env, ids, warnings);
  check_one_task_per_node(asked, env, nnodes);
  StepValues values;
  values.ids = ids;
  values.nnodes = nnodes.n;
  values.node_id = read_node_id(asked, env, ids, nnodes, warnings);
  values.hosts = read_hostlist(asked, env, nnodes, warnings);
  values.port = slurm_port_from_env(env, ids);
  values.gpus = read_gpus(asked, env, ids);
  SlurmNotice notice = fill_from_slurm(raw, asked, values);
  notice.warnings = std::move(warnings);
  return notice;
}

}  // namespace ddprun::launcher
