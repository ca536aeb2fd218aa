// The traceback (or last lines) the failure report takes from a worker's stderr tail.
#include "launcher/stderr_excerpt.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

using namespace ddprun::launcher;

namespace {

using Lines = std::vector<std::string>;

std::string join(const Lines& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

const Lines kFirst = {
    "Traceback (most recent call last):",
    "  File \"/w/a.py\", line 3, in <module>",
    "    d['x']",
    "KeyError: 'x'",
};
const Lines kSecond = {
    "Traceback (most recent call last):",
    "  File \"/w/a.py\", line 5, in <module>",
    "    raise ValueError('boom')",
    "ValueError: boom",
};

Lines concat(std::initializer_list<Lines> parts) {
  Lines out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

}  // namespace

TEST_CASE("stderr excerpt: traceback or last lines, table", "[stderr_excerpt]") {
  const Lines during = {"",
                        "During handling of the above exception, another exception occurred:", ""};
  const Lines cause = {"",
                       "The above exception was the direct cause of the following exception:", ""};
  struct Row {
    const char* name;
    std::string tail;
    bool cut;
    bool traceback;
    Lines lines;
    std::string exception;
  };
  const std::vector<Row> rows = {
      {"nothing", "", false, false, {}, ""},
      {"blank lines only", "\n\n\r\n", false, false, {}, ""},
      {"no traceback: the last lines", "a\nb\nc\n", false, false, {"a", "b", "c"}, ""},
      {"no traceback: at most kLastLines", join(Lines(30, "x")) + "last", false, false,
       concat({Lines(StderrExcerpt::kLastLines - 1, "x"), {"last"}}), ""},
      {"one traceback, output around it", join(concat({{"epoch 1"}, kSecond, {"bye"}})), false,
       true, concat({kSecond, {"bye"}}), "ValueError: boom"},
      {"two separate tracebacks: the last one",
       join(concat({kFirst, {"handled, going on"}, kSecond})), false, true, kSecond,
       "ValueError: boom"},
      {"chained (During handling): the whole chain", join(concat({{"x"}, kFirst, during, kSecond})),
       false, true, concat({kFirst, during, kSecond}), "ValueError: boom"},
      {"chained (direct cause) three deep", join(concat({kFirst, cause, kFirst, during, kSecond})),
       false, true, concat({kFirst, cause, kFirst, during, kSecond}), "ValueError: boom"},
      {"chain whose first header was cut off",
       join(concat({{"    d['x']", "KeyError: 'x'"}, during, kSecond})), true, true, kSecond,
       "ValueError: boom"},
      {"a cut tail starts with a partial line",
       "ceback (most recent call last):\nA\nB",
       true,
       false,
       {"A", "B"},
       ""},
      {"a cut tail of one partial line keeps it",
       "just one piece",
       true,
       false,
       {"just one piece"},
       ""},
      {"last line without a newline", join(kFirst).substr(0, join(kFirst).size() - 1), false, true,
       kFirst, "KeyError: 'x'"},
      {"CRLF and progress bars",
       "10%\r50%\r100%\r\nTraceback (most recent call last):\r\n"
       "  File \"a.py\", line 1\r\nOSError: x\r\n",
       false,
       true,
       {"Traceback (most recent call last):", "  File \"a.py\", line 1", "OSError: x"},
       "OSError: x"},
      {"traceback cut before its exception line",
       "Traceback (most recent call last):\n"
       "  File \"a.py\", line 1, in f\n",
       false,
       true,
       {"Traceback (most recent call last):", "  File \"a.py\", line 1, in f"},
       ""},
  };
  for (const auto& row : rows) {
    CAPTURE(row.name);
    const StderrExcerpt e = excerpt_stderr(row.tail, row.cut);
    CHECK(e.traceback == row.traceback);
    CHECK(e.lines == row.lines);
    CHECK(e.exception == row.exception);
  }
}

TEST_CASE("stderr excerpt: a huge traceback is bounded, its start and end kept",
          "[stderr_excerpt]") {
  Lines frames;
  for (int i = 0; i < 5000; ++i) {
    frames.push_back("  File \"/w/deep.py\", line " + std::to_string(i) + ", in f");
    frames.push_back("    f()");
  }
  const std::string tail =
      join(concat({{"Traceback (most recent call last):"}, frames, {"RuntimeError: deep"}}));
  const StderrExcerpt e = excerpt_stderr(tail, false);
  REQUIRE(e.traceback);
  CHECK(e.lines.size() <= StderrExcerpt::kMaxLines);
  CHECK(join(e.lines).size() <= StderrExcerpt::kMaxBytes);
  CHECK(e.lines.front() == "Traceback (most recent call last):");
  CHECK(e.lines[1].find("lines omitted") != std::string::npos);
  CHECK(e.lines.back() == "RuntimeError: deep");
  CHECK(e.lines[e.lines.size() - 2] == "    f()");
  CHECK(e.exception == "RuntimeError: deep");

  // One enormous line (a tensor in the message) is cut, and the rest still fits.
  const std::string huge(1 << 20, 'v');
  const StderrExcerpt h =
      excerpt_stderr(join({"Traceback (most recent call last):", "  File \"a.py\", line 1",
                           "ValueError: " + huge, "after"}),
                     false);
  CHECK(join(h.lines).size() <= StderrExcerpt::kMaxBytes);
  REQUIRE(h.lines.size() == 4);
  CHECK(h.lines[2].rfind("ValueError: vvv", 0) == 0);
  CHECK(h.lines[2].find("bytes omitted)") != std::string::npos);
  CHECK(h.lines[3] == "after");
  CHECK(h.exception == h.lines[2]);
}
