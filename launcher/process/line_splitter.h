// line_splitter.h: LineSplitter, which turns a worker's output byte stream (pipe chunks of
// any size) into whole lines (and pieces of overlong lines, byte-exact), so that the log fan-out
// can write each line with one write(). Pure: no I/O. Used by log_fanout.cpp; table-tested in
// tests/launcher/process. Thread-safety: none (one splitter per stream, used by the supervisor
// thread only).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::launcher {

// One line, or one piece of a line. `text` excludes the terminator; `end` is the
// terminator exactly as found in the stream ("\n", "\r\n", or a lone "\r" as used by
// progress bars), or empty when the line is not complete: a piece of an overlong line
// (more follows), or the unterminated end of the stream. Nothing is ever added: the
// pieces' text and end, concatenated, are the stream's bytes.
struct Line {
  std::string_view text;
  std::string_view end;
  bool continued = false;  // continues a line whose earlier piece came before
  bool complete() const { return !end.empty(); }
};
class LineSplitter {
 public:
  static constexpr std::size_t kDefaultMaxLine = 64 * 1024;

  // `max_line` (>= 1): a line longer than this is emitted in pieces of `max_line` bytes
  // (incomplete pieces; the last one carries the terminator), so memory stays bounded.
  explicit LineSplitter(std::size_t max_line = kDefaultMaxLine);

  // Appends `chunk` and returns the lines it completes, in order. A partial line is kept
  // for the next call; a trailing '\r' is kept too, as it may be the start of "\r\n".
  // The views stay valid until the next call of feed() or finish().
  const std::vector<Line>& feed(std::string_view chunk);

  // End of stream: returns what is left (a final unterminated line, or a lone '\r' line)
  // and resets the splitter to empty.
  const std::vector<Line>& finish();

  // The pending partial line as an incomplete piece now (a prompt that waits for input,
  // after a quiet period), except a trailing '\r' (it may still start "\r\n"); the rest
  // of the line comes later as `continued` pieces. Empty when nothing can be let out.
  const std::vector<Line>& flush_partial();

  // Bytes held back in the pending partial line.
  std::size_t pending() const { return buffer_.size() - consumed_; }
  // Bytes flush_partial() would let out now.
  std::size_t flushable() const {
    const std::size_t n = pending();
    return n > 0 && buffer_.back() == '\r' ? n - 1 : n;
  }

 private:
  void compact();

  std::size_t max_line_;
  std::string buffer_;
  std::size_t consumed_ = 0;  // bytes of buffer_ already returned as lines
  std::size_t scanned_ = 0;   // bytes of buffer_ known to contain no terminator
  std::vector<Line> lines_;
  bool in_line_ = false;  // the last piece returned was incomplete
};

}  // namespace ddprun::launcher
