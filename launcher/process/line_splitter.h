// line_splitter.h: LineSplitter, which turns a worker's output byte stream (pipe chunks of
// any size) into whole lines, so that the log fan-out can write each line with one write().
// Pure: no I/O. Used by log_fanout.cpp; table-tested in tests/launcher/process.
// Thread-safety: none (one splitter per stream, used by the supervisor thread only).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::launcher {

// One line. `text` excludes the terminator; `end` is the terminator as found in the
// stream ("\n", "\r\n", or a lone "\r" as used by progress bars), or "\n" supplied by the
// splitter when it had to break the line (an overlong piece, or the unterminated last line
// at EOF) so that every emitted line can be written as a whole line.
struct Line {
  std::string_view text;
  std::string_view end;
  bool broken = false;  // true when `end` was supplied by the splitter
};

class LineSplitter {
 public:
  static constexpr std::size_t kDefaultMaxLine = 64 * 1024;

  // `max_line` (>= 1): a line longer than this is emitted in pieces of `max_line` bytes.
  explicit LineSplitter(std::size_t max_line = kDefaultMaxLine);

  // Appends `chunk` and returns the lines it completes, in order. A partial line is kept
  // for the next call; a trailing '\r' is kept too, as it may be the start of "\r\n".
  // The views stay valid until the next call of feed() or finish().
  const std::vector<Line>& feed(std::string_view chunk);

  // End of stream: returns what is left (a final unterminated line, or a lone '\r' line)
  // and resets the splitter to empty.
  const std::vector<Line>& finish();

  // Bytes held back in the pending partial line.
  std::size_t pending() const { return buffer_.size() - consumed_; }

 private:
  void compact();

  std::size_t max_line_;
  std::string buffer_;
  std::size_t consumed_ = 0;  // bytes of buffer_ already returned as lines
  std::size_t scanned_ = 0;   // bytes of buffer_ known to contain no terminator
  std::vector<Line> lines_;
};

}  // namespace ddprun::launcher
