// status_command.h: `ddprun status`, the live view of a running job from any machine that
// reaches its rendezvous (issue 32; docs/usage.md, "Status"): reads every node's status
// value (job_status.h) from the run's latest round through a read-only BoardReader
// (rendezvous/board_reader.h) and prints one table, or with --json the joined record;
// --watch again every 2 s until the job ends. It never writes to the rendezvous and takes
// no part in the job. main.cpp runs it when argv[1] is exactly "status".
// Thread-safety: run once, from the main thread.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace ddprun::launcher {

// Exit codes of `ddprun status`, one per outcome (docs/usage.md).
enum StatusExit : int {
  kStatusOk = 0,
  kStatusUsage = 2,        // a bad command line
  kStatusUnreachable = 3,  // the rendezvous cannot be reached or stopped answering
  kStatusNoRun = 4,        // nothing of this run id there
  kStatusNoRound = 5,      // the run's nodes are still joining: no round formed yet
  kStatusCorrupt = 6,      // a value that is not ddprun's (a status or rendezvous key)
  kStatusEnded = 7,        // the run has ended (or was closed)
};

// `args`: argv after "status"; `env`: the environment (PET_RDZV_* and LOGLEVEL are read).
int run_status_command(const std::vector<std::string>& args,
                       const std::map<std::string, std::string>& env);

}  // namespace ddprun::launcher
