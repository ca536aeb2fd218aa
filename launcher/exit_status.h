// exit_status.h: ddprun's exit status (docs/usage.md, "Exit status"): by default
// torchrun's (0 success, 1 any failure), with --exit-codes classes (PET_EXIT_CODES) one
// status per class of failure, for platforms that act on the class (Kubernetes
// podFailurePolicy, Slurm requeue): the workers' own error, infrastructure, a stall, a
// signal that stopped ddprun. Used by the Agent (which class) and main (which status).
// Thread-safety: pure.
#pragma once

#include <string>

namespace ddprun::launcher {

enum class ExitClass {
  kSuccess,         // every worker exited 0
  kWorkerError,     // a worker failed by itself (its exception, exit code, crash)
  kInfrastructure,  // a node, the store or the rendezvous lost; a worker SIGKILLed by
                    // someone else (the OOM killer); a worker wedged in D state
  kStall,           // the stall watchdog (or the job-wide verdict) ended the workers
  kSignal,          // a handled signal stopped ddprun (SIGTERM: preemption)
};

// The class of a worker's own failure: killed by SIGKILL from outside ddprun (the OOM
// killer, most likely) is infrastructure; any other exit, signal or crash its own error.
ExitClass class_of_exit(int signal);

// The status ddprun exits with. `signo`: the signal of kSignal.
int exit_status(ExitClass cls, int signo, bool by_class);

// "worker error", "infrastructure", ... for messages.
std::string exit_class_name(ExitClass cls);

}  // namespace ddprun::launcher
