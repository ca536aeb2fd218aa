// worker_env.h: what one worker process is started with: the exact torchrun environment
// (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, TORCHELASTIC_*, ...) on top of the agent's
// own environment, and the command line (python -u [-m] script args, ${local_rank}
// substituted, --local_rank=N for --legacy-launch). Used by the Agent; table-tested.
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "launcher/numa.h"
#include "launcher/options/config.h"
#include "launcher/process/supervisor_interface.h"
#include "launcher/run_dirs.h"
#include "rendezvous/rendezvous.h"

namespace ddprun::launcher {

using EnvMap = std::map<std::string, std::string>;

// Per-attempt facts that are not in the config.
struct AttemptFacts {
  rdzv::RendezvousInfo info;
  std::string run_id;     // TORCHELASTIC_RUN_ID (the handler's run id)
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT
};

// The complete environment of local worker `local_rank`: `agent_env` plus torchrun's
// variables (see docs/usage.md). `error_file` becomes TORCHELASTIC_ERROR_FILE.
EnvMap worker_env(const LaunchConfig& config, const AttemptFacts& attempt, const EnvMap& agent_env,
                  int local_rank, const std::string& error_file);

// True when torchrun would print its OMP_NUM_THREADS notice and default it to 1: the
// variable is unset in the agent and there is more than one worker per node.
bool defaults_omp_num_threads(const LaunchConfig& config, const EnvMap& agent_env);

// The worker's argv: <python> -u [-m] script args | script args (--no-python);
// --run-path: <python> -u -c <bootstrap> script args, where the bootstrap runs the
// script with runpy.run_path and records an uncaught exception in the error file.
std::vector<std::string> worker_argv(const LaunchConfig& config, int local_rank);

// "NAME=value" strings for execve.
std::vector<std::string> to_env_strings(const EnvMap& env);

// The WorkerSpecs of one attempt (attempt number: `attempt.restart_count`): argv and
// environment as above, the CPUs of `numa_plan` (by local rank; empty: none), and each
// stream's route after --redirects/--tee/--local-ranks-filter, with log files in `dirs`'
// rank folders ("/dev/null" when dirs.files_disabled()). Creates nothing.
std::vector<WorkerSpec> make_worker_specs(const LaunchConfig& config, const AttemptFacts& attempt,
                                          const EnvMap& agent_env, const RunDirs& dirs,
                                          const std::vector<RankPlacement>& numa_plan);

}  // namespace ddprun::launcher
