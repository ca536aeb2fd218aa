// stderr_excerpt.h: what the failure report shows of a failed worker that wrote no error
// file (a plain script without @record), cut from the end of its stderr. Used by
// failure_report.cpp. Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::launcher {

// From WorkerExit's stderr_tail (kept whatever --redirects/--tee say): the last Python
// traceback together with the exceptions chained before it ("During handling of the above
// exception..."), else Python faulthandler's dump of every thread's stack ("Fatal Python
// error: ..."; the stall watchdog's SIGABRT makes one) when it comes after the last
// traceback, else the last lines. Bounded to kMaxLines lines and kMaxBytes bytes, lines to
// kMaxLineBytes; what is left out is said in a line of its own.

struct StderrExcerpt {
  static constexpr std::size_t kMaxLines = 100;
  static constexpr std::size_t kMaxBytes = 16 * 1024;
  static constexpr std::size_t kMaxLineBytes = 2 * 1024;
  // Without a traceback, at most this many of the last lines.
  static constexpr std::size_t kLastLines = 20;

  // True: `lines` is a traceback (from "Traceback (most recent call last):"); false: the
  // last lines of stderr, or nothing when stderr held only blank lines.
  bool traceback = false;
  // True: `lines` is a faulthandler dump, from its "Fatal Python error:" line to the end
  // (its "Extension modules:" line left out).
  bool stack_dump = false;
  // The lines, without their '\n'; a line shows what a terminal would (the part after its
  // last '\r'). Omitted lines are replaced by one "... (N lines omitted) ..." line.
  std::vector<std::string> lines;
  // traceback: the line naming the last exception ("ValueError: boom"), or "" if its
  // traceback was cut off before it.
  std::string exception;
};

// Reads `tail`, the last bytes a worker wrote to stderr. `cut` says bytes before it were
// dropped: its first line is then partial and is skipped (unless it is the only one).
StderrExcerpt excerpt_stderr(std::string_view tail, bool cut);

}  // namespace ddprun::launcher
