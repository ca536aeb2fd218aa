// slurm_env.h: what a Slurm job step (srun) implies for ddprun's options, so that
// `srun --ntasks-per-node=1 ddprun train.py` needs no other flag (docs/slurm.md).
// Used by cli.cpp between reading the command line / PET_* and build_config.
// Thread-safety: pure function of its arguments.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "launcher/options/config.h"

namespace ddprun::launcher {

// The line to log at start about Slurm; empty text: nothing to say (no Slurm job, or
// --no-slurm). `taken`: values were taken from Slurm (log it as a warning, so that it
// shows at the default level); otherwise an informational note.
struct SlurmNotice {
  std::string text;
  bool taken = false;
  // SLURM_* values that are malformed but not needed, because a flag (or PET_*) gives
  // what they would: one line each, naming the variable, logged as warnings.
  std::vector<std::string> warnings;
};

// The port a step's rendezvous listens on when neither DDPRUN_SLURM_PORT nor
// --rdzv-endpoint says: kSlurmPortBase + (8 * job id + step id) mod kSlurmPortSpan, so
// that concurrent steps of one job and nearby jobs sharing a first node differ, and the
// range stays below Linux's ephemeral ports (32768-60999).
constexpr int kSlurmPortBase = 29400;
constexpr int kSlurmPortSpan = 2000;
int slurm_port(unsigned long long job_id, unsigned long long step_id);

// Inside an srun step (SLURM_JOB_ID and SLURM_STEP_ID set; not the batch, extern or
// interactive step) and without the no_slurm flag or --standalone, adds to `raw` each
// value the command line and PET_* did not give: nnodes (SLURM_STEP_NUM_NODES),
// node_rank (SLURM_NODEID), rdzv_backend c10d and rdzv_endpoint (first host of
// SLURM_STEP_NODELIST : slurm_port or DDPRUN_SLURM_PORT) or, when the static backend was
// asked for, master_addr / master_port, rdzv_id ("slurm-<job>.<step>") and
// nproc_per_node (the step's GPUs: SLURM_GPUS_ON_NODE, else the SLURM_STEP_GPUS /
// SLURM_JOB_GPUS list, else 1). Throws UsageError (one line) when srun started more
// tasks than nodes (ddprun must run once per node), unless the command line gives every
// option this would fill (Slurm stands aside), or a SLURM_* value that an option
// left open needs is malformed (the message asks only for flags that were not given); a
// malformed value that a given flag made unnecessary is a warning (SlurmNotice::warnings).
// With SLURM_JOB_ID but no step (an salloc shell, a batch script) it changes nothing
// and says so.
SlurmNotice apply_slurm_environment(RawOptions& raw, const std::map<std::string, std::string>& env);

}  // namespace ddprun::launcher
