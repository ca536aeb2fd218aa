// stderr_excerpt.cpp: the traceback (or last lines) of a worker's stderr tail (see
// stderr_excerpt.h).
#include "launcher/stderr_excerpt.h"

#include <fmt/format.h>

#include <algorithm>

namespace ddprun::launcher {
namespace {

// How Python starts a traceback (3.11+ also prints exception groups this way).
bool is_header(std::string_view line) {
  return line == "Traceback (most recent call last):" ||
         line == "  + Exception Group Traceback (most recent call last):";
}

// How faulthandler starts its dump of the threads' stacks (fatal signals, SIGABRT).
bool is_dump_header(std::string_view line) { return line.rfind("Fatal Python error: ", 0) == 0; }

// The lines Python prints between two chained tracebacks.
bool is_chain_link(std::string_view line) {
  return line == "During handling of the above exception, another exception occurred:" ||
         line == "The above exception was the direct cause of the following exception:";
}

std::vector<std::string_view> split_lines(std::string_view tail, bool cut) {
  if (cut) {
    const auto nl = tail.find('\n');
    if (nl != std::string_view::npos) tail.remove_prefix(nl + 1);
  }
  std::vector<std::string_view> lines;
  while (!tail.empty()) {
    const auto nl = tail.find('\n');
    std::string_view line = tail.substr(0, nl);
    tail.remove_prefix(nl == std::string_view::npos ? tail.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    // A progress bar redraws its line with '\r': keep what a terminal would show.
    if (const auto cr = line.rfind('\r'); cr != std::string_view::npos) line.remove_prefix(cr + 1);
    lines.push_back(line);
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

std::string capped(std::string_view line) {
  if (line.size() <= StderrExcerpt::kMaxLineBytes) return std::string(line);
  return fmt::format("{} ... ({} bytes omitted)", line.substr(0, StderrExcerpt::kMaxLineBytes),
                     line.size() - StderrExcerpt::kMaxLineBytes);
}

// Index of the first line of the traceback whose header is at `header`, extended over the
// tracebacks chained before it.
std::size_t chain_start(const std::vector<std::string_view>& lines, std::size_t header) {
  std::size_t start = header;
  // "<previous exception>", "", "During handling ...", "", "Traceback ..." (start).
  while (start >= 3 && lines[start - 1].empty() && is_chain_link(lines[start - 2]) &&
         lines[start - 3].empty()) {
    std::size_t prev = start - 3;
    while (prev > 0 && !is_header(lines[prev - 1])) --prev;
    if (prev == 0) break;  // its header was before the tail began
    start = prev - 1;
  }
  return start;
}

// lines[from, lines.size()), each capped; if they exceed kMaxLines or kMaxBytes, the first
// line, a note, and as many of the last lines as fit.
std::vector<std::string> bounded(const std::vector<std::string_view>& lines, std::size_t from) {
  std::vector<std::string> out;
  std::size_t bytes = 0;
  for (std::size_t i = from; i < lines.size(); ++i) {
    out.push_back(capped(lines[i]));
    bytes += out.back().size() + 1;
  }
  if (out.size() <= StderrExcerpt::kMaxLines && bytes <= StderrExcerpt::kMaxBytes) return out;
  // Keep out[0] (where the traceback starts) and a tail [keep_from, size).
  constexpr std::size_t kNoteBytes = 40;
  std::size_t budget = StderrExcerpt::kMaxBytes - out[0].size() - 1 - kNoteBytes;
  std::size_t keep_from = out.size();
  while (keep_from > 1 && out.size() - keep_from < StderrExcerpt::kMaxLines - 2 &&
         out[keep_from - 1].size() + 1 <= budget) {
    --keep_from;
    budget -= out[keep_from].size() + 1;
  }
  std::vector<std::string> kept;
  kept.push_back(std::move(out[0]));
  kept.push_back(fmt::format("... ({} lines omitted) ...", keep_from - 1));
  for (std::size_t i = keep_from; i < out.size(); ++i) kept.push_back(std::move(out[i]));
  return kept;
}

}  // namespace

StderrExcerpt excerpt_stderr(std::string_view tail, bool cut) {
  const std::vector<std::string_view> lines = split_lines(tail, cut);
  StderrExcerpt excerpt;
  std::size_t header = lines.size();
  while (header > 0 && !is_header(lines[header - 1]) && !is_dump_header(lines[header - 1])) {
    --header;
  }
  if (header > 0 && is_dump_header(lines[header - 1])) {
    std::vector<std::string_view> dump;
    for (std::size_t i = header - 1; i < lines.size(); ++i) {
      if (lines[i].rfind("Extension modules: ", 0) == 0) continue;
      dump.push_back(lines[i]);
    }
    while (!dump.empty() && dump.back().empty()) dump.pop_back();
    excerpt.stack_dump = true;
    excerpt.lines = bounded(dump, 0);
    return excerpt;
  }
  if (header == 0) {
    excerpt.lines =
        bounded(lines, lines.size() - std::min(lines.size(), StderrExcerpt::kLastLines));
    return excerpt;
  }
  --header;
  excerpt.traceback = true;
  excerpt.lines = bounded(lines, chain_start(lines, header));
  // The exception line ends the frames: the first line after the header not indented.
  const auto it = std::find_if(lines.begin() + static_cast<std::ptrdiff_t>(header) + 1, lines.end(),
                               [](std::string_view l) { return !l.empty() && l[0] != ' '; });
  if (it != lines.end()) excerpt.exception = capped(*it);
  return excerpt;
}

}  // namespace ddprun::launcher
