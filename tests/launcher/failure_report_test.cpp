// torchrun's failure report, golden text (reference C.2), and failure construction.
#include "launcher/failure_report.h"

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <ctime>
#include <filesystem>

#include "tests/support/temp_dir.h"

using namespace ddprun::launcher;
namespace fs = std::filesystem;

namespace {

void utc() {
  ::setenv("TZ", "UTC", 1);
  ::tzset();
}

using ddprun::test::TempDir;

}  // namespace

TEST_CASE("one failure with a traceback: golden text", "[failure_report]") {
  utc();
  Failure f;
  f.global_rank = 1;
  f.local_rank = 1;
  f.pid = 11407;
  f.exitcode = 1;
  f.error_file = "/tmp/torchelastic_x/fj_y/attempt_0/1/error.json";
  f.message = "Traceback (most recent call last):\n  File \"t.py\", line 3\nValueError: boom\n  ";
  f.timestamp = 1795778539;  // 2026-11-27 11:22:19 UTC
  const std::string expected =
      "============================================================\n"
      "train.py FAILED\n"
      "------------------------------------------------------------\n"
      "Failures:\n"
      "  <NO_OTHER_FAILURES>\n"
      "------------------------------------------------------------\n"
      "Root Cause (first observed failure):\n"
      "[0]:\n"
      "  time      : 2026-11-27_11:22:19\n"
      "  host      : localhost\n"
      "  rank      : 1 (local_rank: 1)\n"
      "  exitcode  : 1 (pid: 11407) \n"  // torchrun 2.14: a trailing space
      "  error_file: /tmp/torchelastic_x/fj_y/attempt_0/1/error.json\n"
      "  traceback : Traceback (most recent call last):\n"
      "  File \"t.py\", line 3\n"
      "ValueError: boom\n"
      "  \n"
      "============================================================";
  CHECK(format_failure_report("train.py", {f}, "localhost") == expected);
}

TEST_CASE("several failures: root cause is the earliest - border shrinks to fit",
          "[failure_report]") {
  utc();
  Failure a;
  a.global_rank = 0;
  a.pid = 10;
  a.exitcode = -15;
  a.error_file = "<N/A>";
  a.message = "Signal 15 (SIGTERM) received by PID 10";
  a.timestamp = 200;
  Failure b = a;
  b.global_rank = 2;
  b.local_rank = 2;
  b.pid = 12;
  b.exitcode = 3;
  b.message = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html";
  b.timestamp = 100;
  const std::string text = format_failure_report("x", {a, b}, "h");
  const std::string expected =
      "============================================================\n"
      "x FAILED\n"
      "------------------------------------------------------------\n"
      "Failures:\n"
      "[0]:\n"
      "  time      : 1970-01-01_00:03:20\n"
      "  host      : h\n"
      "  rank      : 0 (local_rank: 0)\n"
      "  exitcode  : -15 (pid: 10)  (SIGTERM)\n"
      "  error_file: <N/A>\n"
      "  traceback : Signal 15 (SIGTERM) received by PID 10\n"
      "------------------------------------------------------------\n"
      "Root Cause (first observed failure):\n"
      "[1]:\n"
      "  time      : 1970-01-01_00:01:40\n"
      "  host      : h\n"
      "  rank      : 2 (local_rank: 2)\n"
      "  exitcode  : 3 (pid: 12) \n"
      "  error_file: <N/A>\n"
      "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
      "============================================================";
  CHECK(text == expected);
  CHECK(root_cause_index({a, b}) == 1);
  b.timestamp = 200;
  CHECK(root_cause_index({a, b}) == 0);  // ties: the first listed

  Failure tiny;
  tiny.error_file = "-";
  tiny.message = "m";
  const std::string narrow = format_failure_report("s", {tiny}, "h");
  // The widest line is "  time      : 1970-01-01_00:00:00" (33 columns).
  CHECK(narrow.rfind(std::string(33, '=') + "\ns FAILED\n" + std::string(33, '-') + "\n", 0) == 0);
}

TEST_CASE("torchrun 2.14's signal names, ChildFailedError line and failed log line",
          "[failure_report]") {
  // Issue 31 item 10: Python's signal.Signals(n).name, else no name at all.
  Failure f;
  f.error_file = "<N/A>";
  const auto exit_line = [&](int exitcode) {
    f.exitcode = exitcode;
    f.pid = 7;
    const std::string text = format_failure_report("t.py", {f}, "h");
    const auto at = text.find("  exitcode  : ");
    return text.substr(at, text.find('\n', at) - at);
  };
  CHECK(exit_line(-SIGKILL) == "  exitcode  : -9 (pid: 7)  (SIGKILL)");
  CHECK(exit_line(-SIGABRT) == "  exitcode  : -6 (pid: 7)  (SIGABRT)");  // not SIGIOT
  CHECK(exit_line(-SIGIO) == "  exitcode  : -29 (pid: 7)  (SIGIO)");     // not SIGPOLL
  CHECK(exit_line(-SIGRTMIN) ==
        "  exitcode  : -" + std::to_string(SIGRTMIN) + " (pid: 7)  (SIGRTMIN)");
  CHECK(exit_line(-SIGRTMAX) ==
        "  exitcode  : -" + std::to_string(SIGRTMAX) + " (pid: 7)  (SIGRTMAX)");
  CHECK(exit_line(-(SIGRTMIN + 3)) ==
        "  exitcode  : -" + std::to_string(SIGRTMIN + 3) + " (pid: 7) ");
  CHECK(exit_line(0) == "  exitcode  : 0 (pid: 7) ");
  WorkerExit e;
  e.pid = 9;
  e.signal = SIGRTMIN + 3;
  CHECK(make_failure(e, "").message.rfind(
            "Signal " + std::to_string(SIGRTMIN + 3) + " (<N/A>) received by PID 9", 0) == 0);
  CHECK(std::string(kChildFailedErrorLine) ==
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ");
  f.exitcode = 1;
  f.local_rank = 1;
  f.pid = 4242;
  CHECK(failed_log_line(f, "/usr/bin/python3") ==
        "failed (exitcode: 1) local_rank: 1 (pid: 4242) of binary: /usr/bin/python3");
}

namespace {

WorkerExit exit_of(int global_rank, int local_rank, pid_t pid, int exit_code, int signo,
                   std::int64_t at, std::string stderr_tail = "") {
  WorkerExit e;
  e.global_rank = global_rank;
  e.local_rank = local_rank;
  e.pid = pid;
  e.exit_code = exit_code;
  e.signal = signo;
  e.when = std::chrono::system_clock::time_point(std::chrono::seconds(at));
  e.stderr_tail = std::move(stderr_tail);
  return e;
}

}  // namespace

TEST_CASE("make_failure: signals, plain exits, error files", "[failure_report]") {
  TempDir dir;
  const std::string missing = (dir.path / "none.json").string();
  const Failure sig = make_failure(exit_of(3, 1, 4242, 0, SIGKILL, 1000), missing);
  CHECK(sig.exitcode == -9);
  CHECK(sig.error_file == "<N/A>");
  CHECK(sig.message == "Signal 9 (SIGKILL) received by PID 4242");
  CHECK(sig.summary == sig.message);
  CHECK(sig.timestamp == 1000);
  CHECK(failure_hint(sig).find("OOM killer") != std::string::npos);

  const Failure plain = make_failure(exit_of(0, 0, 7, 2, 0, 5), missing);
  CHECK(plain.exitcode == 2);
  CHECK(plain.message ==
        "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html");
  CHECK(failure_hint(plain).empty());
  // Issue 31 item 7: a python without torch is named, with PYTHON_EXEC.
  Failure no_torch = plain;
  no_torch.message =
      "Traceback (most recent call last):\n    File \"t.py\", line 1, in "
      "<module>\n  ModuleNotFoundError: No module named 'torch'";
  CHECK(failure_hint(no_torch, "/usr/bin/python3 (python3 from PATH)") ==
        "the workers ran /usr/bin/python3 (python3 from PATH), which has no torch: set "
        "PYTHON_EXEC to the python that has it (or run the ddprun installed in that "
        "environment)");
  CHECK(failure_hint(no_torch, "").empty());  // --no-python: not ddprun's interpreter

  const std::string file = dir.write(
      "error.json", R"({"message": {"message": "ValueError: bad", "extraInfo": )"
                    R"({"py_callstack": "Traceback:\nValueError: bad\n", "timestamp": "77"}}})");
  // The error file wins over stderr.
  const Failure rec = make_failure(exit_of(1, 1, 9, 1, 0, 1000,
                                           "Traceback (most recent call "
                                           "last):\nKeyError: 'x'\n"),
                                   file);
  CHECK(rec.error_file == file);
  CHECK(rec.timestamp == 77);
  CHECK(rec.message == "Traceback:\n  ValueError: bad\n  ");
}

TEST_CASE("make_failure without an error file: the traceback from stderr", "[failure_report]") {
  TempDir dir;
  const std::string missing = (dir.path / "none.json").string();
  const std::string tail =
      "epoch 1\n"
      "Traceback (most recent call last):\n"
      "  File \"/w/train.py\", line 9, in <module>\n"
      "    raise ValueError(\"boom\")\n"
      "ValueError: boom\n";
  const Failure f = make_failure(exit_of(1, 1, 9, 1, 0, 1000, tail), missing);
  CHECK(f.error_file == "<N/A>");
  CHECK(f.message ==
        "Traceback (most recent call last):\n"
        "    File \"/w/train.py\", line 9, in <module>\n"
        "      raise ValueError(\"boom\")\n"
        "  ValueError: boom");
  CHECK(f.summary == "ValueError: boom");
  CHECK(f.callstack == tail.substr(tail.find("Traceback")));

  // No traceback: the last lines, under a label; after the signal's line for a signal.
  const Failure abrt = make_failure(
      exit_of(0, 0, 5, 0, SIGABRT, 1000, "terminate called after throwing\n  what(): oops\n"),
      missing);
  CHECK(abrt.message ==
        "Signal 6 (SIGABRT) received by PID 5\n"
        "  stderr (last 2 lines):\n"
        "  terminate called after throwing\n"
        "    what(): oops");
  CHECK(abrt.summary == "Signal 6 (SIGABRT) received by PID 5");
  CHECK(abrt.callstack == "terminate called after throwing\n  what(): oops\n");

  const Failure last =
      make_failure(exit_of(0, 0, 5, 2, 0, 1000, "usage: x\nx: error: bad\n"), missing);
  CHECK(last.message == "stderr (last 2 lines):\n  usage: x\n  x: error: bad");
  CHECK(last.summary == "x: error: bad");

  // Blank lines only: torchrun's text.
  const Failure blank = make_failure(exit_of(0, 0, 5, 3, 0, 1000, "\n\n"), missing);
  CHECK(blank.message.rfind("To enable traceback see: ", 0) == 0);
}

TEST_CASE("make_failure: a stall watchdog's note and faulthandler's stacks", "[failure_report]") {
  WorkerExit e;
  e.global_rank = 1;
  e.local_rank = 1;
  e.pid = 42;
  e.signal = SIGABRT;
  e.note = "stalled: no progress (CPU time or output) for 30 s; stacks dumped";
  // An earlier traceback (handled, printed) is not what the report shows: the dump is later.
  e.stderr_tail =
      "Traceback (most recent call last):\n  File \"a.py\", line 1, in <module>\nKeyError: 1\n"
      "epoch 3\n"
      "Fatal Python error: Aborted\n\n"
      "Thread 0x00007f0cafdd36c0 (most recent call first):\n"
      "  File \"/w/train.py\", line 4 in bg\n\n"
      "Current thread 0x00007f0cd2104040 (most recent call first):\n"
      "  File \"/w/train.py\", line 9 in step\n"
      "  File \"/w/train.py\", line 14 in <module>\n\n"
      "Extension modules: torch._C, numpy.core._multiarray_umath (total: 2)\n";
  const Failure f = make_failure(e, "");
  CHECK(f.exitcode == -SIGABRT);
  CHECK(f.message ==
        "stalled: no progress (CPU time or output) for 30 s; stacks dumped\n"
        "  Signal 6 (SIGABRT) received by PID 42\n"
        "  Python stacks (faulthandler, most recent call first):\n"
        "  Fatal Python error: Aborted\n"
        "  \n"
        "  Thread 0x00007f0cafdd36c0 (most recent call first):\n"
        "    File \"/w/train.py\", line 4 in bg\n"
        "  \n"
        "  Current thread 0x00007f0cd2104040 (most recent call first):\n"
        "    File \"/w/train.py\", line 9 in step\n"
        "    File \"/w/train.py\", line 14 in <module>");
  CHECK(f.summary == e.note);
  CHECK(f.callstack.find("line 9 in step\n") != std::string::npos);
  CHECK(f.callstack.find("Extension modules") == std::string::npos);
}
