// slurm_env.cpp: options implied by a Slurm job step (see slurm_env.h). Used by cli.cpp
// before build_config.
#include "launcher/slurm_env.h"

#include <fmt/format.h>

#include <optional>
#include <vector>

#include "base/text.h"
#include "launcher/slurm_hostlist.h"
#include "store/host_port.h"

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

// GPUs Slurm gave this node's step, or 0.
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
            false};
  }
  if (raw.flags.count("standalone") > 0) {
    return {"--standalone: Slurm's settings are not used (--standalone is a single-node job)",
            false};
  }
  const unsigned long long job_id = number(job);
  const unsigned long long step_id = number(step);

  const auto nnodes_var = first_set(env, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES"});
  if (nnodes_var.first.empty()) {
    throw UsageError(
        fmt::format("Slurm job step {}.{} without SLURM_STEP_NUM_NODES or "
                    "SLURM_NNODES: give --nnodes, or --no-slurm",
                    job_id, step_id));
  }
  const unsigned long long nnodes = number(nnodes_var);
  const auto tasks_var = first_set(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"});
  if (!tasks_var.first.empty() && nnodes > 0 && number(tasks_var) > nnodes) {
    const auto per_node = first_set(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
    throw UsageError(fmt::format(
        "srun started {} tasks on {} nodes ({}={}{}): ddprun starts a node's workers itself "
        "and must run once per node: `srun --ntasks-per-node=1 ddprun ...` (or --no-slurm)",
        number(tasks_var), nnodes, tasks_var.first, tasks_var.second,
        per_node.first.empty() ? "" : fmt::format(", {}={}", per_node.first, per_node.second)));
  }
  const auto node_id_var = first_set(env, {"SLURM_NODEID"});
  if (node_id_var.first.empty() || number(node_id_var) >= nnodes) {
    throw UsageError(
        fmt::format("Slurm job step {}.{}: SLURM_NODEID='{}' is not a node of the "
                    "step's {}: give --node-rank, or --no-slurm",
                    job_id, step_id, node_id_var.second, nnodes));
  }
  const auto list_var = first_set(env, {"SLURM_STEP_NODELIST", "SLURM_NODELIST"});
  std::vector<std::string> hosts;
  try {
    hosts = expand_hostlist(list_var.second);
  } catch (const HostlistError& e) {
    throw UsageError(fmt::format("{}: {} (give --rdzv-endpoint, or --no-slurm)",
                                 list_var.first.empty() ? "SLURM_STEP_NODELIST" : list_var.first,
                                 e.what()));
  }
  if (hosts.size() != nnodes) {
    throw UsageError(
        fmt::format("{}={} names {} hosts but {}={}: give --rdzv-endpoint, or "
                    "--no-slurm",
                    list_var.first, list_var.second, hosts.size(), nnodes_var.first, nnodes));
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
  const unsigned long long gpus = step_gpus(env);

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
  const auto given = [&](const char* dest) {
    const auto it = raw.values.find(dest);
    return it == raw.values.end() ? std::string() : it->second;
  };
  fill("nnodes", "--nnodes", std::to_string(nnodes));
  fill("node_rank", "--node-rank", std::to_string(number(node_id_var)));
  const std::string backend = given("rdzv_backend");
  const bool master_given = raw.values.count("master_addr") + raw.values.count("master_port") > 0;
  const bool static_style = backend == "static" || (backend.empty() && master_given);
  if (static_style) {
    if (raw.values.count("rdzv_endpoint") == 0) {
      fill("master_addr", "--master-addr", hosts.front());
      fill("master_port", "--master-port", std::to_string(port));
    }
  } else if (backend.empty() || backend == "c10d") {
    fill("rdzv_backend", "--rdzv-backend", "c10d");
    fill("rdzv_endpoint", "--rdzv-endpoint", store::format_host_port(hosts.front(), port));
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
      true};
}

}  // namespace ddprun::launcher
