// status_options.h: the command line of `ddprun status` as one table: its parser
// (launcher/status_command.cpp) takes each option's name and whether it has a value from
// here, and ddprun's --dump-cli-json (cli.cpp) lists the verb with these options, so the
// man page and the bash and zsh completion generated from it (packaging/clidoc.py) know
// the verb. Thread-safety: constants.
#pragma once

#include <array>
#include <string_view>

namespace ddprun::launcher {

// The word after `ddprun` that runs the status view instead of a job.
inline constexpr std::string_view kStatusVerb = "status";
inline constexpr std::string_view kStatusSummary =
    "the live view of a running job from any machine that reaches its rendezvous: every "
    "node and rank, its state, restarts, seconds since progress, file:line and last "
    "collective (read-only)";

struct VerbOption {
  std::string_view name;     // the long spelling ("--rdzv-id"); '_' for '-' is accepted too
  std::string_view metavar;  // the value's shape; "" for a flag
  std::string_view help;
};

inline constexpr std::array<VerbOption, 8> kStatusOptions{{
    {"--rdzv-backend", "c10d|static|etcd-v3",
     "the job's rendezvous backend (default PET_RDZV_BACKEND, else c10d)"},
    {"--rdzv-endpoint", "HOST[:PORT]",
     "the job's rendezvous endpoint (default PET_RDZV_ENDPOINT; needed)"},
    {"--rdzv-id", "ID", "the job's run id (default PET_RDZV_ID, else none)"},
    {"--rdzv-conf", "K=V,...", "the job's rendezvous settings (default PET_RDZV_CONF)"},
    {"--json", "", "print the joined record as JSON instead of a table"},
    {"--watch", "", "print again every 2 s until the job ends"},
    {"--timeout", "SECONDS", "how long one read may take, 1..600 (default 3)"},
    {"--help", "", "print this help and exit"},
}};

// The table's entry for `name` (long spelling, '-' only), nullptr when it has none.
constexpr const VerbOption* find_status_option(std::string_view name) {
  for (const VerbOption& o : kStatusOptions) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

}  // namespace ddprun::launcher
