// slurm_env.cpp: options implied by a Slurm job step (see slurm_env.h). Used by cli.cpp
// before build_config.
#include "launcher/options/slurm_env.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "base/text.h"
#include "launcher/options/slurm_hostlist.h"
#include "store/core/host_port.h"

namespace ddprun::launcher {
namespace {

using Env = std::map<std::string, std::string>;

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

SlurmNotice apply_slurm_environment(RawOptions& raw, const Env& env) {
  const auto job = first_set(env, {"SLURM_JOB_ID", "SLURM_JOBID"});
  if (job.first.empty() || raw.flags.count("no_slurm") > 0) return {};
  const auto step = first_set(env, {"SLURM_STEP_ID", "SLURM_STEPID"});
  if (step.first.empty() ||
      (parse_int<unsigned long long>(step.second) && number(step) >= kFirstSpecialStep)) {
    return {fmt::format("{}={} is set but this is not an srun job step (no SLURM_STEP_ID: an "
                        "salloc shell or a batch script): Slurm's settings are not used; run "
                        "`srun --ntasks-per-node=1 ddprun ...` to use them (docs/slurm.md)",
                        job.first, job.second),
            false,
            {}};
  }
  if (raw.flags.count("standalone") > 0) {
    return {"--standalone: Slurm's settings are not used (--standalone is a single-node job)",
            false,
            {}};
  }
  const unsigned long long job_id = number(job);
  const unsigned long long step_id = number(step);

  std::vector<std::string> warnings;
  const auto has = [&](const char* dest) { return raw.values.count(dest) > 0; };
  const auto given = [&](const char* dest) {
    const auto it = raw.values.find(dest);
    return it == raw.values.end() ? std::string() : it->second;
  };
  // Each SLURM_* value below is read only for an option the command line and PET_* left
  // open; when a flag gives it, a bad value is only warned about (docs/slurm.md).
  const auto nnodes_var = first_set(env, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES"});
  std::optional<unsigned long long> nnodes;
  if (nnodes_var.first.empty()) {
    if (!has("nnodes")) {
      throw UsageError(
          fmt::format("Slurm job step {}.{} without SLURM_STEP_NUM_NODES or "
                      "SLURM_NNODES: give --nnodes, or --no-slurm",
                      job_id, step_id));
    }
  } else if (const auto v = parse_int<unsigned long long>(nnodes_var.second); v) {
    nnodes = *v;
  } else if (has("nnodes")) {
    warnings.push_back(unused_because(
        fmt::format("{}='{}' is not a number", nnodes_var.first, nnodes_var.second), "--nnodes"));
  } else {
    number(nnodes_var);  // throws, naming the variable
  }
  const std::string backend = given("rdzv_backend");
  const bool master_given = has("master_addr") || has("master_port");
  const bool static_style = backend == "static" || (backend.empty() && master_given);
  // More tasks than nodes means one agent per task, each starting a node's workers: a
  // mistake, unless the command line gives every option Slurm would fill (the user set
  // the job up: Slurm stands aside).
  std::vector<const char*> fillable = {"nnodes", "node_rank", "rdzv_id", "nproc_per_node"};
  if (static_style && !has("rdzv_endpoint")) {
    fillable.insert(fillable.end(), {"master_addr", "master_port"});
  } else if (!static_style && (backend.empty() || backend == "c10d")) {
    fillable.insert(fillable.end(), {"rdzv_backend", "rdzv_endpoint"});
  }
  const bool all_given = std::all_of(fillable.begin(), fillable.end(), has);
  const auto tasks_var = first_set(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"});
  if (!all_given && !tasks_var.first.empty() && nnodes && *nnodes > 0 &&
      number(tasks_var) > *nnodes) {
    const auto per_node = first_set(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
    throw UsageError(fmt::format(
        "srun started {} tasks on {} nodes ({}={}{}): ddprun starts a node's workers itself "
        "and must run once per node: `srun --ntasks-per-node=1 ddprun ...` (or --no-slurm)",
        number(tasks_var), *nnodes, tasks_var.first, tasks_var.second,
        per_node.first.empty() ? "" : fmt::format(", {}={}", per_node.first, per_node.second)));
  }
  const auto node_id_var = first_set(env, {"SLURM_NODEID"});
  const auto node_id = parse_int<unsigned long long>(node_id_var.second);
  if (!node_id || (nnodes && *node_id >= *nnodes)) {
    const std::string fault =
        node_id_var.first.empty()
            ? "SLURM_NODEID is not set"
            : fmt::format("SLURM_NODEID='{}' is not a node of the step's {}", node_id_var.second,
                          nnodes ? std::to_string(*nnodes) : "nodes");
    if (!has("node_rank")) {
      throw UsageError(fmt::format("Slurm job step {}.{}: {}: give --node-rank, or --no-slurm",
                                   job_id, step_id, fault));
    }
    if (!node_id_var.first.empty()) warnings.push_back(unused_because(fault, "--node-rank"));
  }
  // The flag that the first host of the node list would fill, or nullptr when none is open.
  const char* host_flag = nullptr;
  if (static_style) {
    if (!has("rdzv_endpoint") && !has("master_addr")) host_flag = "--master-addr";
  } else if ((backend.empty() || backend == "c10d") && !has("rdzv_endpoint")) {
    host_flag = "--rdzv-endpoint";
  }
  const auto list_var = first_set(env, {"SLURM_STEP_NODELIST", "SLURM_NODELIST"});
  const std::string list_name = list_var.first.empty() ? "SLURM_STEP_NODELIST" : list_var.first;
  std::vector<std::string> hosts;
  std::string list_fault;
  try {
    hosts = expand_hostlist(list_var.second);
    if (nnodes && hosts.size() != *nnodes) {
      list_fault = fmt::format("{}={} names {} hosts but {}={}", list_var.first, list_var.second,
                               hosts.size(), nnodes_var.first, *nnodes);
    }
  } catch (const HostlistError& e) {
    list_fault = fmt::format("{}: {}", list_name, e.what());
  }
  if (!list_fault.empty()) {
    if (host_flag) {
      throw UsageError(fmt::format("{} (give {}, or --no-slurm)", list_fault, host_flag));
    }
    if (!list_var.first.empty()) {
      // What made the node list unnecessary.
      std::string by = "--rdzv-backend " + backend;
      if (has("rdzv_endpoint")) {
        by = "--rdzv-endpoint";
      } else if (static_style) {
        by = "--master-addr";
      }
      warnings.push_back(unused_because(list_fault, by));
    }
  }
  int port = slurm_port(job_id, step_id);
  if (const auto fixed = first_set(env, {"DDPRUN_SLURM_PORT"}); !fixed.first.empty()) {
    const auto v = parse_int<unsigned long long>(fixed.second);
    if (!v || *v == 0 || *v > 65535) {
      throw UsageError(
          fmt::format("DDPRUN_SLURM_PORT='{}': expected a port in [1, 65535]", fixed.second));
    }
    port = static_cast<int>(*v);
  }
  unsigned long long gpus = 0;
  if (!has("nproc_per_node")) {
    gpus = step_gpus(env);
    if (gpus > kMaxWorkersPerNode) {
      const auto var = first_set(env, {"SLURM_GPUS_ON_NODE", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS"});
      throw UsageError(fmt::format(
          "Slurm job step {}.{}: {}={} gives {} GPUs on this node, more than ddprun's limit of "
          "{} workers per node: give --nproc-per-node, or --no-slurm",
          job_id, step_id, var.first,
          var.second.size() > 40 ? var.second.substr(0, 40) + "..." : var.second, gpus,
          kMaxWorkersPerNode));
    }
  }

  // What the command line / PET_* gave stays; Slurm fills in the rest.
  std::string taken;
  std::string kept;
  const auto fill = [&](const char* dest, const char* flag, const std::string& value) {
    if (raw.values.count(dest) > 0) {
      kept += fmt::format("{}{}", kept.empty() ? "" : " ", flag);
      return false;
    }
    raw.values[dest] = value;
    taken += fmt::format("{}{}={}", taken.empty() ? "" : " ", flag, value);
    return true;
  };
  // Where a value was left unread (a flag gives it), fill only lists the flag as kept.
  fill("nnodes", "--nnodes", nnodes ? std::to_string(*nnodes) : "");
  fill("node_rank", "--node-rank", node_id ? std::to_string(*node_id) : "");
  const std::string first_host = hosts.empty() ? "" : hosts.front();
  if (static_style) {
    if (raw.values.count("rdzv_endpoint") == 0) {
      fill("master_addr", "--master-addr", first_host);
      fill("master_port", "--master-port", std::to_string(port));
    }
  } else if (backend.empty() || backend == "c10d") {
    fill("rdzv_backend", "--rdzv-backend", "c10d");
    fill("rdzv_endpoint", "--rdzv-endpoint", store::format_host_port(first_host, port));
  }
  fill("rdzv_id", "--rdzv-id", fmt::format("slurm-{}.{}", job_id, step_id));
  if (fill("nproc_per_node", "--nproc-per-node", std::to_string(gpus > 0 ? gpus : 1)) &&
      gpus == 0) {
    taken += " (no GPUs from Slurm)";
  }
  return {
      fmt::format("Slurm job step {}.{}: {}{} (--no-slurm turns this off; docs/slurm.md)", job_id,
                  step_id, taken.empty() ? "nothing taken from SLURM_*" : "from SLURM_*: " + taken,
                  kept.empty() ? "" : "; given, kept: " + kept),
      true, std::move(warnings)};
}

}  // namespace ddprun::launcher
