// Table-driven tests of LineSplitter: chunks in, whole lines out.
#include "launcher/process/line_splitter.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

using ddprun::launcher::Line;
using ddprun::launcher::LineSplitter;

namespace {

// Renders lines as "text|end" with the terminator escaped (nothing after '|' for an
// incomplete piece) and '+' for a piece that continues the previous one.
std::string render(const Line& l) {
  std::string end;
  for (char c : l.end) end += c == '\n' ? "\\n" : c == '\r' ? "\\r" : std::string(1, c);
  return std::string(l.text) + "|" + end + (l.continued ? "+" : "");
}

std::vector<std::string> run(const std::vector<std::string>& chunks, std::size_t max_line) {
  LineSplitter s(max_line);
  std::vector<std::string> out;
  for (const auto& c : chunks) {
    for (const Line& l : s.feed(c)) out.push_back(render(l));
  }
  for (const Line& l : s.finish()) out.push_back(render(l));
  return out;
}

struct Case {
  const char* name;
  std::vector<std::string> chunks;
  std::size_t max_line;
  std::vector<std::string> want;
};

}  // namespace

TEST_CASE("LineSplitter table", "[line_splitter]") {
  const std::vector<Case> cases = {
      {"empty input", {}, 64, {}},
      {"one line", {"hello\n"}, 64, {"hello|\\n"}},
      {"two lines one chunk", {"a\nb\n"}, 64, {"a|\\n", "b|\\n"}},
      {"partial across chunks", {"hel", "lo\nwor", "ld\n"}, 64, {"hello|\\n", "world|\\n"}},
      {"byte by byte", {"a", "b", "\n", "c", "\n"}, 64, {"ab|\\n", "c|\\n"}},
      {"empty lines", {"\n\n\nx\n"}, 64, {"|\\n", "|\\n", "|\\n", "x|\\n"}},
      {"crlf", {"a\r\nb\r\n"}, 64, {"a|\\r\\n", "b|\\r\\n"}},
      {"crlf split between chunks", {"a\r", "\nb\n"}, 64, {"a|\\r\\n", "b|\\n"}},
      {"lone cr (progress bar)", {"10%\r20%\r", "30%\n"}, 64, {"10%|\\r", "20%|\\r", "30%|\\n"}},
      {"cr at eof", {"50%\r"}, 64, {"50%|\\r"}},
      {"eof flush", {"abc\nlast"}, 64, {"abc|\\n", "last|"}},
      {"eof flush only partial", {"x"}, 64, {"x|"}},
      {"overlong line in pieces", {"abcdefghij\n"}, 4, {"abcd|", "efgh|+", "ij|\\n+"}},
      {"exactly max then newline", {"abcd\n"}, 4, {"abcd|\\n"}},
      {"exactly max then crlf split", {"abcd\r", "\n"}, 4, {"abcd|\\r\\n"}},
      {"overlong across chunks", {"abc", "def", "ghi"}, 4, {"abcd|", "efgh|+", "i|+"}},
      {"overlong then eof", {"abcdef"}, 4, {"abcd|", "ef|+"}},
      {"overlong then next line", {"abcdefg\nxy\n"}, 4, {"abcd|", "efg|\\n+", "xy|\\n"}},
      {"nul and invalid utf-8",
       {std::string("a\0b\xff\xc3(\n", 7)},
       64,
       {std::string("a\0b\xff\xc3(|\\n", 9)}},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    CHECK(run(c.chunks, c.max_line) == c.want);
  }
}

TEST_CASE("LineSplitter keeps only the partial line pending", "[line_splitter]") {
  LineSplitter s(1024);
  std::string big;
  for (int i = 0; i < 1000; ++i) big += "line " + std::to_string(i) + "\n";
  big += "tail";
  std::size_t count = s.feed(big).size();
  CHECK(count == 1000);
  CHECK(s.pending() == 4);
  CHECK(s.feed("\n").size() == 1);
  CHECK(s.pending() == 0);
  CHECK(s.finish().empty());
}

TEST_CASE("LineSplitter pieces concatenate to exactly the input bytes", "[line_splitter]") {
  // Every byte value, long and short lines, "\r\n" across chunk boundaries, no final
  // newline: text + end of every piece, in order, must give back the input.
  std::string input;
  unsigned seed = 12345;
  auto rnd = [&] { return seed = seed * 1103515245 + 12345, (seed >> 16) & 0x7fff; };
  for (int i = 0; i < 20000; ++i) {
    const unsigned r = rnd() % 100;
    input += r < 5 ? '\n' : r < 8 ? '\r' : static_cast<char>(rnd() & 0xff);
  }
  for (std::size_t max_line : {1, 3, 64, 1000}) {
    LineSplitter s(max_line);
    std::string back;
    bool open = false;
    auto take = [&](const std::vector<Line>& lines) {
      for (const Line& l : lines) {
        CHECK(l.continued == open);
        CHECK(l.text.size() <= max_line);
        back.append(l.text).append(l.end);
        open = !l.complete();
      }
    };
    for (std::size_t pos = 0; pos < input.size();) {
      const std::size_t n = std::min<std::size_t>(1 + rnd() % 700, input.size() - pos);
      take(s.feed(std::string_view(input).substr(pos, n)));
      pos += n;
    }
    take(s.finish());
    CHECK(back == input);
  }
}

TEST_CASE("LineSplitter default cap is 64 KiB", "[line_splitter]") {
  LineSplitter s;
  std::string huge(200 * 1024, 'x');
  std::vector<std::size_t> sizes;
  for (const Line& l : s.feed(huge)) sizes.push_back(l.text.size());
  for (const Line& l : s.finish()) sizes.push_back(l.text.size());
  CHECK(sizes == std::vector<std::size_t>{65536, 65536, 65536, 200 * 1024 - 3 * 65536});
}

TEST_CASE("LineSplitter lets a quiet partial line out and continues it", "[line_splitter]") {
  LineSplitter s(8);
  std::vector<std::string> out;
  auto take = [&](const std::vector<Line>& lines) {
    for (const Line& l : lines) out.push_back(render(l));
  };
  take(s.feed("prompt> "));
  CHECK(out.empty());
  CHECK(s.flushable() == 8);
  take(s.flush_partial());
  CHECK(s.flushable() == 0);
  take(s.flush_partial());  // nothing more to let out
  take(s.feed("yes\r"));
  CHECK(s.flushable() == 3);  // the '\r' may start "\r\n": kept
  take(s.flush_partial());
  take(s.feed("\nnext"));
  take(s.finish());
  CHECK(out == std::vector<std::string>{"prompt> |", "yes|+", "|\\r\\n+", "next|"});
}
