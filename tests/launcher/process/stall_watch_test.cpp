// stall_watch_test.cpp: the stall watchdog: /proc/<pid>/stat parsing (table), the progress
// decision on a fake clock, the process-tree CPU reader on real processes, and the
// ProcessSupervisor's kStalled event with real stuck, busy and chatty workers.
#include "launcher/process/stall_watch.h"

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <map>

#include "launcher/process/spawn.h"
#include "tests/launcher/process/supervisor_harness.h"

namespace ddprun::launcher::test {
namespace {

using Kind = SupervisorEvent::Kind;
using TP = StallDetector::Clock::time_point;

TP at(double seconds) {
  return TP(std::chrono::duration_cast<TP::duration>(std::chrono::duration<double>(seconds)));
}

}  // namespace

TEST_CASE("stall: parse_proc_stat reads state, ppid and the four CPU fields", "[stall]") {
  struct Row {
    const char* text;
    bool ok;
    char state;
    pid_t ppid;
    std::uint64_t ticks;
  };
  const Row rows[] = {
      {"42 (python3) S 7 42 42 0 -1 4194304 100 0 0 0 11 22 3 4 20 0 1 0 5 6 7\n", true, 'S', 7,
       40},
      // comm with spaces and parentheses: fields count from the last ')'.
      {"9 (a) b (c)) R 1 9 9 0 -1 0 0 0 0 0 5 5 0 0 20 0", true, 'R', 1, 10},
      // negative cutime (never seen, but signed in proc(5)) counts as 0.
      {"9 (x) Z 1 9 9 0 -1 0 0 0 0 0 1 2 -3 4 20 0", true, 'Z', 1, 7},
      {"", false, '?', 0, 0},
      {"9 (x", false, '?', 0, 0},
      {"9 (x) S 1 9 9 0 -1 0 0 0 0 0 1 2 3", false, '?', 0, 0},  // cut before cstime
      {"9 (x) S 1 9 9 0 -1 0 0 0 0 0 1 zz 3 4 20", false, '?', 0, 0},
      {"9 (x) SS 1 9 9 0 -1 0 0 0 0 0 1 2 3 4 20", false, '?', 0, 0},
  };
  for (const Row& r : rows) {
    INFO(r.text);
    const auto st = parse_proc_stat(r.text);
    REQUIRE(st.has_value() == r.ok);
    if (!r.ok) continue;
    CHECK(st->state == r.state);
    CHECK(st->ppid == r.ppid);
    CHECK(st->cpu_ticks == r.ticks);
  }
}

TEST_CASE("stall: the detector on a fake clock", "[stall]") {
  StallDetector d(std::chrono::milliseconds(10000));
  CHECK(d.sample_interval() == std::chrono::milliseconds(1000));
  CHECK(StallDetector(std::chrono::milliseconds(100)).sample_interval().count() == 100);
  CHECK(StallDetector(std::chrono::milliseconds(2000)).sample_interval().count() == 400);

  // Worker 0 computes silently, 1 sleeps, 2 only prints, 3 uses a trickle of CPU.
  CHECK(!d.all_stalled(at(0)));  // nothing watched yet
  d.reset(4, at(0));
  double cpu0 = 0, cpu3 = 0;
  std::uint64_t out2 = 0;
  for (int s = 0; s <= 12; ++s) {
    const TP now = at(s);
    d.observe(0, now, cpu0, 0);
    d.observe(1, now, 1.5, 100);  // constant since the baseline
    d.observe(2, now, 0.2, out2);
    d.observe(3, now, cpu3, 0);
    cpu0 += 0.9;
    cpu3 += 0.02;  // 2 % of a core: below kMinBusyFraction
    out2 += 1;
    if (s < 10) CHECK(d.stalled(now).empty());
  }
  CHECK(d.stalled(at(12)) == std::vector<std::size_t>{1, 3});
  CHECK(!d.all_stalled(at(12)));  // 0 and 2 progress
  CHECK(d.idle_for(1, at(12)) == std::chrono::milliseconds(12000));
  CHECK(d.idle_for(0, at(12)) == std::chrono::milliseconds(0));
  // An exited worker is no longer watched; reset() starts afresh.
  d.forget(1);
  CHECK(d.stalled(at(12)) == std::vector<std::size_t>{3});
  d.reset(2, at(20));
  CHECK(d.stalled(at(29.9)).empty());
  CHECK(d.stalled(at(30)) == std::vector<std::size_t>{0, 1});
  CHECK(d.all_stalled(at(30)));
  d.forget(0);
  d.forget(1);
  CHECK(!d.all_stalled(at(30)));  // none watched
  d.observe(7, at(30), 1, 1);     // out of range: ignored
}

TEST_CASE("stall: with stack samples, moves are progress and so is CPU time they do not cover",
          "[stall]") {
  StallDetector d(std::chrono::milliseconds(5000));
  // Worker 0 spins on one line (its own CPU time is left out by the caller: constant, no
  // moves); 1 moves without CPU; 2 has no samples yet (judged by CPU), then its first
  // report counts as a move, then it spins; 3's main thread waits for a child process
  // that computes (a wrapper running the trainer: no moves, the child's CPU grows).
  d.reset(4, at(0));
  std::uint64_t moves1 = 0;
  for (int s = 0; s <= 10; ++s) {
    const double cpu = 0.9 * s;
    d.observe(0, at(s), 1.0, 0, 7);
    d.observe(1, at(s), 0, 0, moves1 += 3);
    d.observe(2, at(s), s < 4 ? cpu : 0.5, 0,
              s < 4 ? std::nullopt : std::optional<std::uint64_t>(0));
    d.observe(3, at(s), cpu, 0, 2);
  }
  CHECK(d.idle_for(0, at(10)) == std::chrono::milliseconds(10000));
  CHECK(d.idle_for(1, at(10)) == std::chrono::milliseconds(0));
  CHECK(d.idle_for(2, at(10)) == std::chrono::milliseconds(6000));  // last progress: at 4
  CHECK(d.idle_for(3, at(10)) == std::chrono::milliseconds(0));
  CHECK(d.stalled(at(8.9)) == std::vector<std::size_t>{0});
  CHECK(d.stalled(at(9)) == std::vector<std::size_t>{0, 2});
}

TEST_CASE("stall: process_tree_cpu_seconds counts a busy grandchild, not a sleeper", "[stall]") {
  SpawnOptions busy;
  // The busy loop runs in a child of the worker: the tree's CPU time must include it.
  busy.argv = {"/bin/sh", "-c", "sh -c 'while :; do :; done' & wait"};
  SpawnOptions idle;
  idle.argv = {"/bin/sh", "-c", "sleep 30 & wait"};
  const pid_t b = spawn_process(busy);
  const pid_t i = spawn_process(idle);
  CHECK(eventually([&] { return process_tree_cpu_seconds(b) > 0.2; }));
  CHECK(process_tree_cpu_seconds(i) < 0.1);
  // The busy grandchild's own time is what the tree has; leaving out the worker's own
  // (its stack is sampled instead) keeps it.
  CHECK(eventually([&] { return process_tree_cpu_seconds(b, b) > 0.2; }));
  ::kill(-b, SIGKILL);
  ::kill(-i, SIGKILL);
  ::waitpid(b, nullptr, 0);
  ::waitpid(i, nullptr, 0);
  CHECK(process_tree_cpu_seconds(b) == 0);  // gone
}

TEST_CASE("stall: workers all stuck end the attempt with one kStalled event", "[stall]") {
  Harness h(true, 1000ms);
  h.sup->start(
      {sh(0, "echo started; exec sleep 60"), sh(1, "sleep 0.3; exec sleep 60"), sh(2, "exit 0")});
  const auto t0 = std::chrono::steady_clock::now();
  SupervisorEvent ev = h.next(20s);
  if (ev.kind == Kind::kWorkerExited) {  // rank 2's clean exit: no longer watched
    CHECK(ev.exit.local_rank == 2);
    CHECK(!ev.exit.failed());
    ev = h.next(20s);
  }
  REQUIRE(ev.kind == Kind::kStalled);
  CHECK(std::chrono::steady_clock::now() - t0 >= 1s);
  std::map<int, WorkerExit> exits;
  for (const auto& e : ev.exits) exits[e.local_rank] = e;
  REQUIRE(exits.size() == 2);  // every worker alive when it fired
  for (int r : {0, 1}) {
    INFO("rank " << r << ": " << exits[r].note);
    CHECK(exits[r].signal == SIGABRT);
    CHECK(exits[r].note.find("stalled: no progress (CPU time or output) for ") == 0);
    CHECK(exits[r].stderr_tail.empty());
  }
  CHECK(h.sup->stop(SIGTERM, 1s).empty());
  CHECK(h.next(200ms).kind == Kind::kTimeout);  // no exit reported twice
}

TEST_CASE("stall: no alarm for silent computation, chatty sleepers or ranks waiting for them",
          "[stall]") {
  Harness h(true, 600ms);
  // Rank 2 waits idle (for a slower peer, say): only logged while the others progress.
  h.sup->start({sh(0, "while :; do :; done"), sh(1, "while :; do echo x; sleep 0.1; done"),
                sh(2, "exec sleep 60")});
  CHECK(h.next(2500ms).kind == Kind::kTimeout);
  CHECK(h.sup->stop(SIGTERM, 1s).size() == 3);
}

TEST_CASE("stall: ddprun's own back-pressure and its own pauses are not a worker's stall",
          "[stall]") {
  StallDetector d(std::chrono::milliseconds(5000));  // samples every second
  d.reset(2, at(0));
  d.observe(0, at(0), 0, 0);
  d.observe(1, at(0), 0, 0);
  // Worker 0 is held back (its output unread) from 1 s to 8 s; then it idles.
  for (int s = 1; s <= 8; ++s) {
    d.observe(0, at(s), 0, 0);
    d.held_back(0, at(s));
  }
  CHECK(d.stalled(at(12.9)) == std::vector<std::size_t>{1});  // 1 is not sampled meanwhile
  CHECK(d.stalled(at(13)) == std::vector<std::size_t>{0, 1});
  // Worker 1's owner did not sample it from 0 s to 30 s (ddprun stopped): only the two
  // sample intervals after the last sample count against it.
  d.observe(1, at(30), 0, 0);
  CHECK(d.idle_for(1, at(30)) == std::chrono::milliseconds(2000));
  d.held_back(7, at(30));  // out of range: ignored
}

TEST_CASE("stall: a worker blocked writing to a console that stopped reading is not stalled",
          "[stall]") {
  // The console stops reading: ddprun queues its high-water mark, stops reading the
  // worker's pipe, and `seq` blocks in write(2) using no CPU.
  Harness h(true, 600ms);
  h.out->set_paused(true);
  h.sup->start({sh(0, "seq 1 400000; echo done")});
  CHECK(h.next(3000ms).kind == Kind::kTimeout);
  h.out->set_paused(false);
  const SupervisorEvent ev = h.next(20s);
  REQUIRE(ev.kind == Kind::kWorkerExited);
  CHECK(!ev.exit.failed());
  CHECK(eventually([&] { return h.out->text().ends_with("400000\ndone\n"); }));
}

TEST_CASE("stall: a worker that ignores SIGABRT is killed after kStallDumpWait", "[stall]") {
  Harness h(true, 300ms);
  h.sup->start({sh(0, "trap '' ABRT; while :; do sleep 1; done")});
  const SupervisorEvent ev = h.next(kStallDumpWait + 20s);
  REQUIRE(ev.kind == Kind::kStalled);
  REQUIRE(ev.exits.size() == 1);
  CHECK(ev.exits[0].signal == SIGKILL);
  CHECK(ev.exits[0].note.find("stalled") == 0);
}

}  // namespace ddprun::launcher::test
