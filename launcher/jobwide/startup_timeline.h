// startup_timeline.h: the start-up timeline (issue 32; docs/usage.md, "Start-up
// timeline"), pure: from each rank's start-up times (flight_record.h's StartupTimes, from
// the stack probe's hook), how long each phase took per rank (start the interpreter, import
// torch, form the process group, reach the first collective: each on the rank's own host's
// clock, so no clock offset enters), one summary line per phase, and a warning for each
// rank (or each host, when all its ranks do) that stands out: at least kStandOutFactor x
// the phase's median and kStandOutSeconds more. Also the codec of one node's ranks on the
// job-wide board. Used by StartupWatch (startup_watch.h). Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/jobwide/named_line.h"
#include "launcher/process/flight_record.h"

namespace ddprun::launcher {

inline constexpr double kStandOutFactor = 2;
inline constexpr double kStandOutSeconds = 3;
inline constexpr std::size_t kMaxStartupBytes = 256 * 1024;

struct RankStartup {
  int rank = 0;  // global
  std::string host;
  StartupTimes times;
};

// A phase's seconds for one rank (nullopt: a time unknown).
struct RankPhases {
  int rank = 0;
  std::string host;
  std::optional<double> phase[4];
};

// The four phases' names as the lines say them ("import torch").
extern const char* const kStartupPhases[4];

struct StartupReport {
  std::vector<RankPhases> ranks;     // by rank
  std::vector<std::string> summary;  // one line per phase with two ranks or more
  std::vector<NamedLine> warnings;   // those that stand out, with the ranks they name
};

StartupReport startup_report(const std::vector<RankStartup>& ranks);

std::string encode_startup(const std::vector<RankStartup>& ranks);
// nullopt, with `error` set (one line), when `text` is not one node's start-up.
std::optional<std::vector<RankStartup>> decode_startup(const std::string& text, std::string& error);

}  // namespace ddprun::launcher
