// line_splitter.cpp: byte chunks to lines and pieces of overlong lines (see
// line_splitter.h). Used by log_fanout.
#include "launcher/process/line_splitter.h"

#include <algorithm>

namespace ddprun::launcher {

LineSplitter::LineSplitter(std::size_t max_line) : max_line_(std::max<std::size_t>(max_line, 1)) {}

void LineSplitter::compact() {
  // Runs at the start of each call: the views handed out by the previous call are dead.
  lines_.clear();
  if (consumed_ > 0) {
    buffer_.erase(0, consumed_);
    scanned_ -= consumed_;
    consumed_ = 0;
  }
}

const std::vector<Line>& LineSplitter::feed(std::string_view chunk) {
  compact();
  buffer_.append(chunk);
  const std::string_view all = buffer_;
  std::size_t start = consumed_;
  std::size_t i = std::max(scanned_, start);
  while (i < all.size()) {
    char c = all[i];
    if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 == all.size()) break;  // maybe "\r\n": wait for more
      std::size_t end_len = (c == '\r' && all[i + 1] == '\n') ? 2 : 1;
      lines_.push_back({all.substr(start, i - start), all.substr(i, end_len), in_line_});
      in_line_ = false;
      i += end_len;
      start = i;
      continue;
    }
    if (i - start + 1 > max_line_) {
      lines_.push_back({all.substr(start, max_line_), {}, in_line_});
      in_line_ = true;
      start += max_line_;
      continue;  // re-examine byte i as part of the next piece
    }
    ++i;
  }
  // A full-length pending piece can be emitted once the next byte shows it is not
  // followed by its terminator; until then keep it (it may still end in "\r\n").
  consumed_ = start;
  scanned_ = std::max(i, start);
  return lines_;
}

const std::vector<Line>& LineSplitter::flush_partial() {
  compact();
  const std::size_t n = flushable();
  if (n > 0) {
    // feed() left no terminator in the pending bytes but a trailing '\r'.
    lines_.push_back({std::string_view(buffer_).substr(0, n), {}, in_line_});
    in_line_ = true;
    consumed_ = n;
    scanned_ = std::max(scanned_, consumed_);
  }
  return lines_;
}

const std::vector<Line>& LineSplitter::finish() {
  compact();
  const std::string_view rest = buffer_;
  if (!rest.empty()) {
    if (rest.back() == '\r') {
      lines_.push_back({rest.substr(0, rest.size() - 1), rest.substr(rest.size() - 1), in_line_});
    } else {
      lines_.push_back({rest, {}, in_line_});
    }
  }
  in_line_ = false;
  consumed_ = buffer_.size();
  scanned_ = consumed_;
  return lines_;
}

}  // namespace ddprun::launcher
