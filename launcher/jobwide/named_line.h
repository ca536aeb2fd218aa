// named_line.h: NamedLine, a line of node 0's job-wide report (a start-up warning, a
// straggler) with the global ranks it names, as node 0 publishes it on the round's JobBoard,
// so that each other node says the lines naming its own ranks: by rank, not by matching
// host names in the text (several agents may share a host's name). Used by StartupWatch
// (startup_watch.h) and StragglerWatch (straggler_watch.h). Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace ddprun::launcher {

inline constexpr std::size_t kMaxNamedLinesBytes = 64 * 1024;

struct NamedLine {
  std::string line;
  std::vector<int> ranks;  // global ranks the line names

  // Whether it names one of the ranks first..first+count-1 (one node's).
  bool names_any_of(int first, int count) const;
  bool operator==(const NamedLine&) const = default;
};

std::string encode_named_lines(const std::vector<NamedLine>& lines);
// nullopt, with `error` set (one line), when `text` is not what encode_named_lines wrote.
std::optional<std::vector<NamedLine>> decode_named_lines(const std::string& text,
                                                         std::string& error);

}  // namespace ddprun::launcher
