// ProcessSupervisor's output path with real shell workers, and pipes, files and a
// terminal standing in for the agent's stdout/stderr: whole lines, prefixes, files,
// back-pressure, and exits released only after the worker's output.
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>

#include "launcher/process/log_fanout.h"
#include "launcher/process/supervisor.h"
#include "tests/launcher/process/supervisor_harness.h"

using ddprun::UniqueFd;
using namespace ddprun::launcher;
using namespace ddprun::launcher::test;
using namespace std::chrono_literals;
using Kind = SupervisorEvent::Kind;

TEST_CASE("supervisor: concurrent workers' console lines never interleave mid-line",
          "[supervisor]") {
  Harness h;
  TempDir dir;
  const int kLines = 2000;
  std::vector<WorkerSpec> workers;
  for (int r = 0; r < 4; ++r) {
    // Lines of ~1000 bytes (more than PIPE_BUF in flight at once from 4 writers).
    std::string script = "pad=$(printf '%0990d' 0); i=0; while [ $i -lt " + std::to_string(kLines) +
                         " ]; do echo \"R" + std::to_string(r) +
                         " L$i $pad\"; i=$((i+1)); done; echo \"err R" + std::to_string(r) +
                         "\" >&2";
    WorkerSpec w = sh(r, script, "[default" + std::to_string(r) + "]:");
    // Tee'd (-t 3), so console lines carry the prefix that tells the workers apart.
    w.out.mode = w.err.mode = StreamMode::kTee;
    w.out.file = dir.str() + "/" + std::to_string(r) + "/stdout.log";
    w.err.file = dir.str() + "/" + std::to_string(r) + "/stderr.log";
    workers.push_back(std::move(w));
  }
  h.sup->start(workers);
  int exited = 0;
  while (exited < 4) {
    SupervisorEvent ev = h.next();
    REQUIRE(ev.kind != Kind::kTimeout);
    if (ev.kind == Kind::kWorkerExited) {
      CHECK(ev.exit.exit_code == 0);
      ++exited;
    }
  }
  CHECK(h.next().kind == Kind::kAllSucceeded);
  h.sup.reset();
  std::string out = h.out->finish();
  std::string err = h.err->finish();
  // Every console line is one worker's bytes under its own prefix, in its order. A line
  // may be cut where it waited past ConsoleWriter::kMaxWait behind another's (a starved
  // machine: TSan beside CI's heaviest test); its rest resumes under the same prefix, so
  // each worker's console lines, joined, are its output exactly.
  const std::string pad(990, '0');
  std::map<int, std::string> joined;
  int lines = 0, bad = 0;
  for (const auto& line : split_lines(out)) {
    ++lines;
    if (line.size() < 11 || line.rfind("[default", 0) != 0 || line[9] != ']' || line[10] != ':' ||
        line[8] < '0' || line[8] > '3') {
      ++bad;
      continue;
    }
    joined[line[8] - '0'] += line.substr(11);
  }
  CHECK(bad == 0);
  for (int r = 0; r < 4; ++r) {
    std::string want;
    for (int i = 0; i < kLines; ++i)
      want += "R" + std::to_string(r) + " L" + std::to_string(i) + " " + pad;
    CHECK(joined[r] == want);
  }
  CHECK(lines >= 4 * kLines);
  CHECK(lines - 4 * kLines <= 4 * kLines / 20);  // cuts are rare: never one per pipe read
  for (int r = 0; r < 4; ++r) {
    CHECK(err.find("[default" + std::to_string(r) + "]:err R" + std::to_string(r) + "\n") !=
          std::string::npos);
  }
}

TEST_CASE("supervisor: the last lines of a crashing worker come before its exit event",
          "[supervisor]") {
  Harness h;
  h.sup->start({sh(0,
                   "i=1; while [ $i -le 3000 ]; do echo line$i; i=$((i+1)); done; "
                   "echo fatal-error >&2; printf partial-last; kill -9 $$")});
  SupervisorEvent ev = h.next();
  REQUIRE(ev.kind == Kind::kWorkerExited);
  CHECK(ev.exit.signal == SIGKILL);
  // The supervisor wrote them before releasing the event; the capture thread may still be
  // reading them from the pipe.
  CHECK(eventually([&] { return h.out->contains("line2999\nline3000\npartial-last"); }, 20s));
  CHECK(eventually([&] { return h.err->contains("fatal-error\n"); }, 20s));
}

TEST_CASE("supervisor: a worker printing without end does not stall another's exit",
          "[supervisor]") {
  Harness h;
  TempDir dir;
  // Lines of 999 bytes as fast as `yes` writes them, until stopped: a loop that served
  // this pipe before the other worker's exit would never release that exit.
  WorkerSpec chatty = sh(0, "yes \"$(printf '%0998d' 0)\"");
  chatty.out.mode = StreamMode::kRedirect;
  chatty.out.file = dir.str() + "/0/stdout.log";
  WorkerSpec failing = sh(1, "sleep 0.2; exit 5");
  h.sup->start({chatty, failing});
  SupervisorEvent ev = h.next();
  REQUIRE(ev.kind == Kind::kWorkerExited);
  CHECK(ev.exit.local_rank == 1);
  CHECK(ev.exit.exit_code == 5);
  h.sup->stop(SIGTERM, 2s);
  h.sup.reset();
  // What reached the file is whole lines, but for a last one cut by the stop.
  const std::string text = slurp(chatty.out.file);
  CHECK(text.size() >= 999);
  const std::vector<std::string> lines = split_lines(text);
  int bad = 0;
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
    if (lines[i] != std::string(998, '0')) ++bad;
  }
  CHECK(bad == 0);
}

TEST_CASE("supervisor: a console that stops reading delays but never loses output",
          "[supervisor]") {
  Harness h;
  h.out->set_paused(true);
  // 8 MB to the console, far above the pipe capacity and the writer's high-water mark.
  WorkerSpec chatty = sh(0, "head -c 8000000 /dev/zero | tr '\\0' 'y' | fold -w 99; echo done");
  WorkerSpec failing = sh(1, "sleep 0.2; exit 9");
  h.sup->start({chatty, failing});
  SupervisorEvent ev = h.next();
  REQUIRE(ev.kind == Kind::kWorkerExited);  // held at most briefly behind the jammed console
  CHECK(ev.exit.exit_code == 9);
  h.out->set_paused(false);
  ev = h.next();
  REQUIRE(ev.kind == Kind::kWorkerExited);
  CHECK(ev.exit.exit_code == 0);
  h.sup->stop(SIGTERM, 1s);
  h.sup.reset();
  std::string out = h.out->finish();
  CHECK(out.size() == 8000000 + 8000000 / 99 + 5);  // fold's last partial line ends in "done"
  CHECK(out.substr(out.size() - 5) == "done\n");
}

TEST_CASE("supervisor: a failed exit carries its stderr's last 64 KiB, whatever the route",
          "[supervisor]") {
  Harness h;
  TempDir dir;
  WorkerSpec redirected = sh(0, "echo out; echo err-a >&2; printf err-b >&2; exit 3");
  redirected.err.mode = StreamMode::kRedirect;
  redirected.err.file = dir.str() + "/0/stderr.log";
  WorkerSpec chatty =
      sh(1,
         "i=0; while [ $i -lt 20000 ]; do echo line$i; i=$((i+1)); done >&2; printf END >&2; "
         "exit 1");
  WorkerSpec fine = sh(2, "echo fine >&2");
  h.sup->start({redirected, chatty, fine});
  std::map<int, WorkerExit> exits;
  for (int i = 0; i < 3; ++i) {
    const SupervisorEvent ev = h.next();
    REQUIRE(ev.kind == Kind::kWorkerExited);
    exits[ev.exit.local_rank] = ev.exit;
  }
  CHECK(exits[0].stderr_tail == "err-a\nerr-b");
  CHECK(!exits[0].stderr_tail_cut);
  std::string written;
  for (int i = 0; i < 20000; ++i) written += "line" + std::to_string(i) + "\n";
  written += "END";
  CHECK(exits[1].stderr_tail.size() == WorkerExit::kStderrTailBytes);
  CHECK(exits[1].stderr_tail == written.substr(written.size() - WorkerExit::kStderrTailBytes));
  CHECK(exits[1].stderr_tail_cut);
  CHECK(exits[2].stderr_tail.empty());  // only failed exits carry it
}

TEST_CASE("supervisor: redirect and tee write files - the prefix only on the console",
          "[supervisor]") {
  Harness h;
  TempDir dir;
  WorkerSpec w = sh(0, "echo out1; echo out2; echo err1 >&2; printf no-newline", "[default0]:");
  w.out.mode = StreamMode::kTee;
  w.out.file = dir.str() + "/attempt_0/0/stdout.log";
  w.err.mode = StreamMode::kRedirect;
  w.err.file = dir.str() + "/attempt_0/0/stderr.log";
  WorkerSpec hidden = sh(1, "echo secret; echo secret-err >&2", "[default1]:");
  hidden.out.mode = StreamMode::kTee;
  hidden.out.file = dir.str() + "/attempt_0/1/stdout.log";
  hidden.out.show_on_console = false;
  hidden.err.show_on_console = false;
  h.sup->start({w, hidden});
  for (int i = 0; i < 2; ++i) REQUIRE(h.next().kind == Kind::kWorkerExited);
  REQUIRE(h.next().kind == Kind::kAllSucceeded);
  h.sup.reset();
  CHECK(h.out->finish() == "[default0]:out1\n[default0]:out2\n[default0]:no-newline");
  CHECK(h.err->finish().empty());
  CHECK(slurp(w.out.file) == "out1\nout2\nno-newline");
  CHECK(slurp(w.err.file) == "err1\n");
  CHECK(slurp(hidden.out.file) == "secret\n");
}

TEST_CASE("supervisor: duplicate filters copy matching lines, prefixed, to one shared file",
          "[supervisor]") {
  Harness h;
  TempDir dir;
  const std::string filtered = dir.str() + "/attempt_0/filtered_stdout.log";
  std::vector<WorkerSpec> workers;
  for (int r = 0; r < 2; ++r) {
    // A 200 KB line (split by the fan-out) that matches only past its first 64 KiB, a
    // \r\n line, and an unterminated matching last line.
    WorkerSpec w = sh(r,
                      "echo keep me; echo drop me; printf '%0200000d' 0; echo ' tail-keep';"
                      " printf 'keep crlf\\r\\n'; printf 'last keep'",
                      "[default" + std::to_string(r) + "]:");
    w.out.mode = StreamMode::kTee;
    w.out.file = dir.str() + "/attempt_0/" + std::to_string(r) + "/stdout.log";
    w.out.duplicate_filters = {"keep"};
    w.out.duplicate_file = filtered;
    workers.push_back(std::move(w));
  }
  h.sup->start(workers);
  for (int i = 0; i < 2; ++i) REQUIRE(h.next().kind == Kind::kWorkerExited);
  REQUIRE(h.next().kind == Kind::kAllSucceeded);
  h.sup.reset();
  h.out->finish();
  std::map<std::string, int> lines;
  for (const auto& line : split_lines(slurp(filtered))) {
    ++lines[line.size() > 100 ? line.substr(0, 11) + "..." + line.substr(line.size() - 10) : line];
  }
  for (const char* p : {"[default0]:", "[default1]:"}) {
    CAPTURE(p);
    CHECK(lines[std::string(p) + "keep me"] == 1);
    CHECK(lines[std::string(p) + "keep crlf\r"] == 1);
    CHECK(lines[std::string(p) + "last keep"] == 1);
    CHECK(lines[std::string(p) + "... tail-keep"] == 1);
    CHECK(lines.count(std::string(p) + "drop me") == 0);
  }
  CHECK(lines.size() == 8);
}

TEST_CASE("supervisor: only tee'd streams are prefixed (-t 1 leaves stderr bare)", "[supervisor]") {
  Harness h;
  TempDir dir;
  WorkerSpec w = sh(0, "echo out; echo err >&2", "[default0]:");
  w.out.mode = StreamMode::kTee;
  w.out.file = dir.str() + "/stdout.log";
  h.sup->start({w});
  REQUIRE(h.next().kind == Kind::kWorkerExited);
  REQUIRE(h.next().kind == Kind::kAllSucceeded);
  h.sup.reset();
  CHECK(h.out->finish() == "[default0]:out\n");
  CHECK(h.err->finish() == "err\n");
}

TEST_CASE("supervisor: a worker's exit is released only after its output is on the console",
          "[supervisor]") {
  agent_signal_setup();
  // A console pipe that nobody reads yet: whatever is in it at the moment the event is
  // delivered was written before the event.
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  UniqueFd console_read(fds[0]), console_write(fds[1]);
  SupervisorOptions o;
  o.console_stdout_fd = console_write.get();
  o.console_stderr_fd = console_write.get();
  ProcessSupervisor sup(o);
  // 2000 lines of 10 bytes = 20000 bytes (within the pipe's 64 KiB), then a failure.
  sup.start({sh(0, "i=1000; while [ $i -lt 3000 ]; do echo line_$i; i=$((i+1)); done; exit 3")});
  SupervisorEvent ev = sup.next_event(10s);
  REQUIRE(ev.kind == Kind::kWorkerExited);
  CHECK(ev.exit.exit_code == 3);
  int queued = 0;
  REQUIRE(::ioctl(console_read.get(), FIONREAD, &queued) == 0);
  CHECK(queued == 20000);
  std::string text(20000, '\0');
  REQUIRE(::read(console_read.get(), text.data(), text.size()) == 20000);
  CHECK(text.substr(0, 10) == "line_1000\n");
  CHECK(text.substr(text.size() - 10) == "line_2999\n");
}

TEST_CASE("supervisor: a grandchild that never stops writing cannot stall exit or stop",
          "[supervisor]") {
  Harness h;
  WorkerSpec w = sh(0, "yes spam & sleep 0.1; exit 7");
  w.out.mode = StreamMode::kRedirect;
  w.out.file = "/dev/null";
  h.sup->start({w});
  SupervisorEvent ev = h.next();
  REQUIRE(ev.kind == Kind::kWorkerExited);
  CHECK(ev.exit.exit_code == 7);
  auto t0 = std::chrono::steady_clock::now();
  CHECK(h.sup->stop(SIGTERM, 1s).empty());
  CHECK(std::chrono::steady_clock::now() - t0 < 30s);  // against a stall, not a speed
}

TEST_CASE("supervisor: console lines reach a regular file and a terminal", "[supervisor]") {
  agent_signal_setup();
  const std::string kind = GENERATE(std::string("file"), std::string("pty"));
  INFO("console is a " << kind);
  TempDir dir;
  UniqueFd console, master;
  std::mutex mu;
  std::string captured;
  auto seen = [&](const std::string& needle) {
    std::lock_guard lock(mu);
    return captured.find(needle) != std::string::npos;
  };
  std::thread reader;
  if (kind == "file") {
    console.reset(::open((dir.str() + "/console").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  } else {
    master.reset(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
    REQUIRE(master);
    REQUIRE(::grantpt(master.get()) == 0);
    REQUIRE(::unlockpt(master.get()) == 0);
    console.reset(::open(::ptsname(master.get()), O_RDWR | O_NOCTTY | O_CLOEXEC));
    reader = std::thread([&] {
      char buf[4096];
      ssize_t n;
      while ((n = ::read(master.get(), buf, sizeof buf)) > 0) {
        std::lock_guard lock(mu);
        captured.append(buf, n);
      }
    });
  }
  REQUIRE(console);
  {
    SupervisorOptions o;
    o.console_stdout_fd = console.get();
    o.console_stderr_fd = console.get();
    ProcessSupervisor sup(o);
    // Worker 1 asks for a terminal (WorkerSpec::terminal): a pty where the console is one
    // for its stderr, which goes to the console alone; its stdout, tee'd to a file, stays
    // a pipe (issue 31 item 12: no colours or '\r' bars in the log); worker 0 keeps pipes.
    WorkerSpec term = sh(1,
                         "[ -t 1 ] && echo tty-out; [ -t 1 ] || echo pipe-out1; "
                         "[ -t 2 ] && echo tty-err >&2; printf 'a\\nb'");
    term.terminal = true;
    term.out.mode = StreamMode::kTee;
    term.out.file = dir.str() + "/1.log";
    sup.start({sh(0, "echo one; echo two >&2; [ -t 1 ] || echo pipe-out"), term});
    REQUIRE(sup.next_event(10s).kind == Kind::kWorkerExited);
    REQUIRE(sup.next_event(10s).kind == Kind::kWorkerExited);
  }
  if (kind == "file") {
    std::string text = slurp(dir.str() + "/console");
    CHECK(text.find("one\n") != std::string::npos);
    CHECK(text.find("two\n") != std::string::npos);
    CHECK(text.find("pipe-out\n") != std::string::npos);
    CHECK(text.find("tty-") == std::string::npos);
    CHECK(slurp(dir.str() + "/1.log") == "pipe-out1\na\nb");
  } else {
    // The terminal's line discipline turns "\n" into "\r\n".
    CHECK(eventually([&] { return seen("two\r\n"); }, 20s));
    CHECK(seen("one\r\n"));
    CHECK(seen("pipe-out\r\n"));
    CHECK(eventually([&] { return seen("tty-err\r\n"); }, 20s));
    CHECK_FALSE(seen("tty-out"));
    CHECK(slurp(dir.str() + "/1.log") == "pipe-out1\na\nb");
    console.reset();  // the master then reads EIO and the reader ends
    reader.join();
  }
}

namespace {

// What tests/launcher/process workers print below: a 200 KiB line (three splitter pieces
// and a bit), every byte value (NUL, invalid UTF-8, a lone '\r'), and a last line
// without a newline. Made by `printf` from this octal-escaped format.
std::string hostile_bytes(std::string* printf_format) {
  std::string bytes(200 * 1024, 'a');
  bytes += "\n";
  std::string format = "\\n";
  for (int c = 1; c < 256; ++c) {
    bytes += static_cast<char>(c);
    char esc[8];
    std::snprintf(esc, sizeof esc, "\\%03o", c);
    format += esc;
  }
  bytes += std::string("\0mid\0\n", 6);
  format += "\\000mid\\000\\n";
  bytes += "last line, no newline \xff";
  format += "last line, no newline \\377";
  *printf_format = format;
  return bytes;
}

}  // namespace

TEST_CASE("supervisor: files and the unprefixed console get the worker's bytes unchanged",
          "[supervisor]") {
  Harness h;
  TempDir dir;
  std::string format;
  const std::string want = hostile_bytes(&format);
  // The big line comes from head/tr, the rest from printf.
  const std::string script =
      "head -c " + std::to_string(200 * 1024) + " /dev/zero | tr '\\0' a; printf '" + format + "'";
  WorkerSpec w = sh(0, script + "; (" + script + ") >&2", "[default0]:");
  w.err.mode = StreamMode::kRedirect;  // stdout to the console, stderr to a file
  w.err.file = dir.str() + "/0/stderr.log";
  WorkerSpec both = sh(1, script + "; (" + script + ") >&2", "[default1]:");
  both.out.mode = both.err.mode = StreamMode::kRedirect;
  both.out.file = dir.str() + "/1/stdout.log";
  both.err.file = dir.str() + "/1/stderr.log";
  h.sup->start({w, both});
  for (int i = 0; i < 2; ++i) REQUIRE(h.next().kind == Kind::kWorkerExited);
  REQUIRE(h.next().kind == Kind::kAllSucceeded);
  h.sup.reset();
  const std::string out = h.out->finish();
  CHECK(out.size() == want.size());
  CHECK(out == want);
  CHECK(h.err->finish().empty());
  CHECK(slurp(w.err.file) == want);
  CHECK(slurp(both.out.file) == want);
  CHECK(slurp(both.err.file) == want);
}

TEST_CASE("supervisor: a long tee'd line comes out whole under one prefix", "[supervisor]") {
  Harness h;
  TempDir dir;
  // Rank 0: 300 KB lines; rank 1: short lines at the same time. Console lines must each
  // be one worker's whole line; the long lines must be intact.
  WorkerSpec big = sh(0,
                      "l=$(head -c 300000 /dev/zero | tr '\\0' b); i=0; "
                      "while [ $i -lt 5 ]; do echo \"$l\"; i=$((i+1)); done",
                      "[default0]:");
  WorkerSpec small =
      sh(1, "i=0; while [ $i -lt 3000 ]; do echo short$i; i=$((i+1)); done", "[default1]:");
  for (WorkerSpec* w : {&big, &small}) {
    w->out.mode = StreamMode::kTee;
    w->out.file = dir.str() + "/" + std::to_string(w->local_rank) + "/stdout.log";
  }
  h.sup->start({big, small});
  for (int i = 0; i < 2; ++i) REQUIRE(h.next().kind == Kind::kWorkerExited);
  REQUIRE(h.next().kind == Kind::kAllSucceeded);
  h.sup.reset();
  // Rank 1's lines wait behind a long line in progress, and would cut it only after
  // ConsoleWriter::kMaxWait (possible on a loaded machine): so rank 0's console lines are
  // its 5 lines, give or take a few cuts, never one per 64 KiB piece (25).
  const std::vector<std::string> lines = split_lines(h.out->finish());
  std::string payload;
  int pieces = 0, shorts = 0, bad = 0;
  for (const std::string& line : lines) {
    if (line.rfind("[default0]:", 0) == 0 && line.size() > 11 &&
        line.find_first_not_of('b', 11) == std::string::npos) {
      payload += line.substr(11);
      ++pieces;
    } else if (line == "[default1]:short" + std::to_string(shorts)) {
      ++shorts;
    } else {
      ++bad;
    }
  }
  CHECK(bad == 0);
  CHECK(payload == std::string(5 * 300000, 'b'));
  CHECK(pieces >= 5);
  CHECK(pieces < 15);
  CHECK(shorts == 3000);
  std::string file;
  for (int i = 0; i < 5; ++i) file += std::string(300000, 'b') + "\n";
  CHECK(slurp(big.out.file) == file);
}

TEST_CASE("supervisor: a line held open too long is cut, and resumes under its prefix",
          "[supervisor]") {
  Harness h;
  TempDir dir;
  // Rank 0 writes 100 KB of a line and then waits (for the test's go-ahead) before its
  // end; rank 1's line must not wait for it forever.
  const std::string go = dir.str() + "/go";
  WorkerSpec slow = sh(0,
                       "head -c 100000 /dev/zero | tr '\\0' c; while [ ! -e " + go +
                           " ]; do sleep 0.05; done; echo END",
                       "[default0]:");
  WorkerSpec other = sh(1, "sleep 0.3; echo w1; exec sleep 30", "[default1]:");
  for (WorkerSpec* w : {&slow, &other}) {
    w->out.mode = StreamMode::kTee;
    w->out.file = dir.str() + "/" + std::to_string(w->local_rank) + "/stdout.log";
  }
  h.sup->start({slow, other});
  CHECK(eventually([&] { return h.out->contains("[default1]:w1\n"); }, 20s));
  std::ofstream(go).put('x');
  SupervisorEvent ev = h.next(20s);
  REQUIRE(ev.kind == Kind::kWorkerExited);
  CHECK(ev.exit.local_rank == 0);
  h.sup->stop(SIGTERM, 1s);
  h.sup.reset();
  // The first 64 KiB piece held the console, and the rest of the line so far followed
  // as a partial line (OutputRouter::kPartialWait) under no second prefix; w1 cut the
  // line; its end resumes under the prefix.
  CHECK(h.out->finish() ==
        "[default0]:" + std::string(100000, 'c') + "\n[default1]:w1\n" + "[default0]:END\n");
  CHECK(slurp(slow.out.file) == std::string(100000, 'c') + "END\n");
}

TEST_CASE("supervisor: prefix_all prefixes every console line - stdin_fd is the worker's stdin",
          "[supervisor]") {
  Harness h;
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  UniqueFd read_end(fds[0]);
  UniqueFd write_end(fds[1]);
  // The worker echoes its stdin to stdout and stderr until end of file.
  WorkerSpec w = sh(0, "while read -r l; do echo \"got $l\"; echo \"err $l\" >&2; done; echo eof",
                    "[host-a]:");
  w.prefix_all = true;
  w.stdin_fd = read_end.get();
  h.sup->start({w});
  read_end.reset();  // only the worker holds the read end now
  const std::string input = "one\ntwo\n";
  REQUIRE(::write(write_end.get(), input.data(), input.size()) ==
          static_cast<ssize_t>(input.size()));
  write_end.reset();  // end of file: the worker finishes
  REQUIRE(h.next().kind == Kind::kWorkerExited);
  REQUIRE(h.next().kind == Kind::kAllSucceeded);
  h.sup.reset();
  CHECK(h.out->finish() == "[host-a]:got one\n[host-a]:got two\n[host-a]:eof\n");
  CHECK(h.err->finish() == "[host-a]:err one\n[host-a]:err two\n");
}

TEST_CASE("console: a piece ended by a lone carriage return is not glued to another stream's line",
          "[supervisor]") {
  TempDir dir;
  const std::string path = dir.str() + "/console";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  {
    ConsoleWriter console(fd);  // a regular file: blocking writes, in call order
    const auto a = console.open_stream();
    const auto b = console.open_stream();
    const auto piece = [&](std::uint64_t s, std::string_view text, std::string_view end) {
      console.write_line(s, s == a ? "[a]:" : "[b]:", Line{text, end, false});
    };
    piece(a, "", "\r");  // tqdm starts with "\r"
    piece(a, " 10%", "\r");
    piece(b, "epoch 1", "\n");  // a's bar is still on the line: a newline first
    piece(a, " 20%", "\r");     // after b's complete line: nothing added
    piece(a, " 30%", "\r");     // a's own segments follow each other unchanged
    piece(b, "25%", "\r");      // b's bar after a's: a newline first
    piece(a, "done", "\n");
    piece(b, "tail", "\n");
    console.close_stream(a);
    console.close_stream(b);
  }
  ::close(fd);
  CHECK(slurp(path) ==
        "[a]:\r[a]: 10%\r\n[b]:epoch 1\n[a]: 20%\r[a]: 30%\r\n[b]:25%\r\n[a]:done\n[b]:tail\n");
}

TEST_CASE("console: stdout and stderr on one file share the line after a lone carriage return",
          "[supervisor]") {
  TempDir dir;
  const std::string path = dir.str() + "/console";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  {
    ConsoleWriter out(fd);  // as `ddprun ... >log 2>&1`: both consoles are one file
    ConsoleWriter err(fd);
    out.share_line_with(err);
    const auto bar = err.open_stream();
    const auto print = out.open_stream();
    err.write_line(bar, "[h1]:", Line{" 10%", "\r", false});
    out.write_line(print, "[h2]:", Line{"print", "\n", false});  // after h1's bar: newline
    err.write_line(bar, "[h1]:", Line{" 20%", "\r", false});
    err.write_line(bar, "[h1]:", Line{" 30%", "\r", false});  // its own writer and stream
    out.write_line(print, "[h2]:", Line{"more", "\n", false});
    out.close_stream(print);
    err.close_stream(bar);
  }
  ::close(fd);
  CHECK(slurp(path) == "[h1]: 10%\r\n[h2]:print\n[h1]: 20%\r[h1]: 30%\r\n[h2]:more\n");
}

TEST_CASE("console: a prompt on stdout is not glued to a line on stderr of the same file",
          "[supervisor]") {
  TempDir dir;
  const std::string path = dir.str() + "/console";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  {
    ConsoleWriter out(fd);  // as a terminal that is both stdout and stderr
    ConsoleWriter err(fd);
    out.share_line_with(err);
    const auto prompt = out.open_stream();
    const auto log = err.open_stream();
    out.write_line(prompt, "[r0]:", Line{"(Pdb) ", "", false});  // a partial line let out
    err.write_line(log, "[r1]:", Line{"warning", "\n", false});  // another worker, stderr
    out.write_line(prompt, "[r0]:", Line{"next", "\n", true});   // resumes under its prefix
    out.write_line(prompt, "[r0]:", Line{"(Pdb) ", "", false});
    out.write_line(prompt, "[r0]:", Line{"c", "\n", true});  // nothing between: no prefix
    out.close_stream(prompt);
    err.close_stream(log);
  }
  ::close(fd);
  CHECK(slurp(path) == "[r0]:(Pdb) \n[r1]:warning\n[r0]:next\n[r0]:(Pdb) c\n");
}
