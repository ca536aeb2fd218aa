// slurm_env.h: what a Slurm job step (srun) implies for ddprun's options, so that
// `srun --ntasks-per-node=1 ddprun train.py` needs no other flag (docs/slurm.md).
// Used by cli.cpp between reading the command line / PET_* and build_config; the rule
// steps (namespace slurm) by apply_slurm_environment and the table tests.
// Thread-safety: pure functions of their arguments.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <variant>
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
// and says so. The steps below, in this order, one per rule of docs/slurm.md.
SlurmNotice apply_slurm_environment(RawOptions& raw, const std::map<std::string, std::string>& env);

namespace slurm {

using Env = std::map<std::string, std::string>;

// What the command line and PET_* asked for, as far as Slurm's rules need it.
struct Asked {
  explicit Asked(const RawOptions& raw);
  bool has(const char* dest) const { return raw->values.count(dest) > 0; }
  const RawOptions* raw;
  std::string backend;        // --rdzv-backend as given, "" if not
  bool static_style = false;  // static asked for, or --master-addr/--master-port without a backend
  bool c10d_style = false;    // c10d asked for or left to Slurm (neither static nor etcd)
};

// The srun step ddprun runs in.
struct StepIds {
  unsigned long long job = 0;
  unsigned long long step = 0;
};

// Rule "an salloc shell or a batch script" (and --no-slurm, --standalone): the step's
// ids, or the notice that Slurm is not used (empty text: no Slurm job, or --no-slurm).
// Throws UsageError for a job or step id that is not a number.
std::variant<StepIds, SlurmNotice> slurm_step_or_notice(const RawOptions& raw, const Env& env);

// The step's node count and the variable it came from.
struct NodeCount {
  std::string var;  // SLURM_STEP_NUM_NODES or SLURM_NNODES; "" when neither is set
  std::optional<unsigned long long> n;
};

// Rule `--nnodes`: the step's node count. Throws UsageError when it is missing or malformed
// and --nnodes is not given; with --nnodes given, a malformed value is a warning.
NodeCount read_nnodes(const Asked& asked, const Env& env, const StepIds& ids,
                      std::vector<std::string>& warnings);

// Rule "Slurm stands aside": the command line gives every option Slurm would fill (the
// user set the job up; with the static rendezvous, --rdzv-id is not needed). The options
// still open, as flags ("" when none).
std::string options_left_to_slurm(const Asked& asked);

// Rule "more than one task per node": throws UsageError when srun started more tasks than
// nodes and options_left_to_slurm is not empty (the message names those options).
void check_one_task_per_node(const Asked& asked, const Env& env, const NodeCount& nnodes);

// Rule `--node-rank`: SLURM_NODEID, checked against the node count. Throws UsageError when
// it is missing or malformed and --node-rank is not given; otherwise a warning.
std::optional<unsigned long long> read_node_id(const Asked& asked, const Env& env,
                                               const StepIds& ids, const NodeCount& nnodes,
                                               std::vector<std::string>& warnings);

// Rule `--rdzv-endpoint` / `--master-addr`: the step's hosts (SLURM_STEP_NODELIST, else
// SLURM_NODELIST), as many as its nodes. A list that does not parse or does not match
// the node count throws UsageError when the first host would fill an open option, and is
// a warning otherwise; empty then.
std::vector<std::string> read_hostlist(const Asked& asked, const Env& env, const NodeCount& nnodes,
                                       std::vector<std::string>& warnings);

// Rule "Port": DDPRUN_SLURM_PORT, else slurm_port(job, step). Throws UsageError for a
// DDPRUN_SLURM_PORT outside [1, 65535].
int slurm_port_from_env(const Env& env, const StepIds& ids);

// Rule `--nproc-per-node`: the step's GPUs on this node (0: none said), read only when
// --nproc-per-node is open. Throws UsageError for a malformed count or one beyond
// ddprun's limit of workers per node.
unsigned long long read_gpus(const Asked& asked, const Env& env, const StepIds& ids);

// What Slurm gives, read by the steps above.
struct StepValues {
  StepIds ids;
  std::optional<unsigned long long> nnodes;
  std::optional<unsigned long long> node_id;
  std::vector<std::string> hosts;
  int port = 0;
  unsigned long long gpus = 0;
};

// Fills each option the command line and PET_* left open from `values` (with Slurm
// standing aside, nothing); returns the notice: what was taken and what was kept, `taken`
// when anything was (no warnings: the caller adds those of the steps above).
SlurmNotice fill_from_slurm(RawOptions& raw, const Asked& asked, const StepValues& values);

}  // namespace slurm
}  // namespace ddprun::launcher
