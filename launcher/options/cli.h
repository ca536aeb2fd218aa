// cli.h: ddprun's command line, torchrun-compatible: every torchrun option in both
// spellings (--nproc-per-node / --nproc_per_node), each also read from PET_<NAME>, then
// the training script and its arguments, untouched. cli.cpp is the launcher's only user
// of CLI11. Used by main.cpp and tests. Thread-safety: pure (reads only `host`).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "launcher/options/config.h"
#include "launcher/options/slurm_env.h"

namespace ddprun::launcher {

struct CliOutcome {
  enum class Kind {
    kRun,    // `config` is ready to launch
    kPrint,  // print `text` to stdout and exit 0 (--help, --version)
    kError,  // print "ddprun: error: <text>" and the usage hint to stderr, exit 2
  };
  Kind kind = Kind::kError;
  std::string text;
  LaunchConfig config;
  SlurmNotice slurm;  // kRun: the line about SLURM_* to log at start (slurm_env.h)
};

// Parses `args` (argv without argv[0]) with `host` as the environment and host facts.
// Never throws for bad input: errors come back as kError with a one-line message.
CliOutcome parse_command_line(const std::vector<std::string>& args, const HostFacts& host);

// The hint printed after an error line.
std::string usage_hint();

// This process's environment (environ), as a map.
std::map<std::string, std::string> current_environment();

// Collects the facts about this host that parsing needs (environ, CPU and GPU counts).
HostFacts current_host_facts();

}  // namespace ddprun::launcher
