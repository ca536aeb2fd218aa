// ProcessSupervisor's life cycle with real shell workers and real signals: exits and
// their reporting, stop and its SIGKILL escalation, signals, start failures, shutdown.
// Its output path is tested in supervisor_output_test.cpp.
#include "launcher/process/supervisor.h"

#include <sys/ioctl.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <regex>

#include "tests/launcher/process/supervisor_harness.h"

using namespace ddprun::launcher;
using namespace ddprun::launcher::test;
using namespace std::chrono_literals;
using Kind = SupervisorEvent::Kind;

TEST_CASE("supervisor: exit codes and ranks are reported - no kAllSucceeded on failure",
          "[supervisor]") {
  const bool pidfd = GENERATE(true, false);  // false: the SIGCHLD fallback
  INFO("use_pidfd=" << pidfd);
  Harness h(pidfd);
  h.sup->start({sh(0, "exit 0"), sh(1, "sleep 0.1; exit 1"), sh(2, "sleep 0.2; exit 77")});
  std::map<int, WorkerExit> exits;
  for (int i = 0; i < 3; ++i) {
    SupervisorEvent ev = h.next();
    REQUIRE(ev.kind == Kind::kWorkerExited);
    exits[ev.exit.local_rank] = ev.exit;
  }
  CHECK(exits[0].exit_code == 0);
  CHECK(!exits[0].failed());
  CHECK(exits[1].exit_code == 1);
  CHECK(exits[1].global_rank == 11);
  CHECK(exits[2].exit_code == 77);
  CHECK(exits[2].failed());
  CHECK(exits[2].pid > 0);
  // No event reports "nothing pending", so the absence of one is checked over a while.
  CHECK(h.next(300ms).kind == Kind::kTimeout);
  CHECK(h.sup->stop(SIGTERM, 1s).empty());
}

TEST_CASE("supervisor: a worker killed by a signal is reported with the signal", "[supervisor]") {
  Harness h;
  h.sup->start({sh(0, "kill -SEGV $$")});
  SupervisorEvent ev = h.next();
  REQUIRE(ev.kind == Kind::kWorkerExited);
  CHECK(ev.exit.signal == SIGSEGV);
  CHECK(ev.exit.failed());
}

TEST_CASE("supervisor: kAllSucceeded follows the last successful exit", "[supervisor]") {
  const bool pidfd = GENERATE(true, false);  // false: the SIGCHLD fallback
  INFO("use_pidfd=" << pidfd);
  Harness h(pidfd);
  h.sup->start({sh(0, "exit 0"), sh(1, "sleep 0.1"), sh(2, "true")});
  for (int i = 0; i < 3; ++i) {
    SupervisorEvent ev = h.next();
    REQUIRE(ev.kind == Kind::kWorkerExited);
    CHECK(ev.exit.exit_code == 0);
  }
  CHECK(h.next().kind == Kind::kAllSucceeded);
  CHECK(h.sup->live_pids().empty());
  // A second attempt on the same supervisor works too.
  h.sup->start({sh(0, "exit 3")});
  SupervisorEvent ev = h.next();
  REQUIRE(ev.kind == Kind::kWorkerExited);
  CHECK(ev.exit.exit_code == 3);
}

TEST_CASE("supervisor: a failure reaches next_event promptly", "[supervisor]") {
  const bool pidfd = GENERATE(true, false);  // false: the SIGCHLD fallback
  INFO("use_pidfd=" << pidfd);
  Harness h(pidfd);
  h.sup->start({sh(0, "exec sleep 30"), sh(1, "exec sleep 30")});
  std::vector<pid_t> pids = h.sup->live_pids();
  REQUIRE(pids.size() == 2);
  auto t0 = std::chrono::steady_clock::now();
  ::kill(pids[1], SIGKILL);
  SupervisorEvent ev = h.next();
  auto latency = std::chrono::steady_clock::now() - t0;
  REQUIRE(ev.kind == Kind::kWorkerExited);
  CHECK(ev.exit.signal == SIGKILL);
  CHECK(ev.exit.local_rank == 1);
  CHECK(latency < 500ms);  // event-driven: typically well under a millisecond
  auto exits = h.sup->stop(SIGTERM, 2s);
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].local_rank == 0);
  CHECK(exits[0].signal == SIGTERM);
}

TEST_CASE("supervisor: stop escalates to SIGKILL after the grace period", "[supervisor]") {
  const bool pidfd = GENERATE(true, false);  // false: the SIGCHLD fallback
  INFO("use_pidfd=" << pidfd);
  Harness h(pidfd);
  h.sup->start({sh(0, "trap '' TERM; echo ready; while :; do sleep 0.05; done")});
  REQUIRE(eventually([&] { return h.out->contains("ready\n"); }));
  auto t0 = std::chrono::steady_clock::now();
  auto exits = h.sup->stop(SIGTERM, 300ms);
  auto took = std::chrono::steady_clock::now() - t0;
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].signal == SIGKILL);
  CHECK(took >= 300ms);
  CHECK(took < 5s);
  CHECK(h.sup->live_pids().empty());
}

TEST_CASE("supervisor: stop returns early when the workers obey", "[supervisor]") {
  Harness h;
  h.sup->start({sh(0, "echo ready; exec sleep 30"), sh(1, "exec sleep 30")});
  REQUIRE(eventually([&] { return h.out->contains("ready\n"); }));
  auto t0 = std::chrono::steady_clock::now();
  auto exits = h.sup->stop(SIGTERM, 20s);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  REQUIRE(exits.size() == 2);
  for (const auto& e : exits) CHECK(e.signal == SIGTERM);
  // No event reports "nothing pending", so the absence of one is checked over a while.
  CHECK(h.next(100ms).kind == Kind::kTimeout);  // each exit is delivered once
}

TEST_CASE("supervisor: cut_short ends the grace at once", "[supervisor]") {
  Harness h;
  h.sup->start({sh(0, "trap 'echo got TERM' TERM; echo ready; while :; do sleep 0.05; done")});
  REQUIRE(eventually([&] { return h.out->contains("ready\n"); }));
  std::thread cutter([&] {
    eventually([&] { return h.out->contains("got TERM\n"); });  // the grace has begun
    h.sup->cut_short();
  });
  auto t0 = std::chrono::steady_clock::now();
  auto exits = h.sup->stop(SIGTERM, 30s);
  cutter.join();
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].signal == SIGKILL);
}

TEST_CASE("supervisor: a handled signal is reported and cuts a stop's grace short",
          "[supervisor]") {
  Harness h;
  ::kill(::getpid(), SIGHUP);
  SupervisorEvent ev = h.next();
  REQUIRE(ev.kind == Kind::kSignal);
  CHECK(ev.signo == SIGHUP);

  h.sup->start(
      {sh(0, "trap 'echo got INT' INT; trap '' TERM; echo ready; while :; do sleep 0.05; done")});
  REQUIRE(eventually([&] { return h.out->contains("ready\n"); }));
  std::thread second_ctrl_c([&] {
    eventually([&] { return h.out->contains("got INT\n"); });  // the grace has begun
    ::kill(::getpid(), SIGINT);
  });
  auto t0 = std::chrono::steady_clock::now();
  auto exits = h.sup->stop(SIGINT, 30s);
  second_ctrl_c.join();
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].signal == SIGKILL);
  ev = h.next();
  REQUIRE(ev.kind == Kind::kSignal);
  CHECK(ev.signo == SIGINT);
}

TEST_CASE("supervisor: stop kills grandchildren in the group, leader alive or not",
          "[supervisor]") {
  Harness h;
  // Worker 0 waits for its background child; worker 1 exits at once and leaves its
  // grandchild behind, holding the stdout pipe open.
  h.sup->start({sh(0, "sleep 1000 & echo gc0=$!; wait"), sh(1, "sleep 1000 & echo gc1=$!")});
  std::smatch m;
  std::string text;
  REQUIRE(eventually([&] {
    text = h.out->text();
    return std::regex_search(text, m, std::regex("gc0=\\d+\n")) &&
           std::regex_search(text, m, std::regex("gc1=\\d+\n"));
  }));
  std::regex_search(text, m, std::regex("gc0=(\\d+)"));
  pid_t gc0 = std::stoi(m[1]);
  std::regex_search(text, m, std::regex("gc1=(\\d+)"));
  pid_t gc1 = std::stoi(m[1]);
  // The leader of worker 1 exits; its exit is reported although the pipe stays open.
  SupervisorEvent ev = h.next();
  REQUIRE(ev.kind == Kind::kWorkerExited);
  CHECK(ev.exit.local_rank == 1);
  CHECK(alive(gc0));
  CHECK(alive(gc1));
  auto exits = h.sup->stop(SIGTERM, 2s);
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].local_rank == 0);
  CHECK(eventually([&] { return !alive(gc0) && !alive(gc1); }, 20s));
}

TEST_CASE("supervisor: forward_signal delivers without stopping", "[supervisor]") {
  Harness h;
  h.sup->start({sh(0, "trap 'echo got USR1' USR1; echo ready; while :; do sleep 0.05; done")});
  REQUIRE(eventually([&] { return h.out->contains("ready\n"); }));
  h.sup->forward_signal(SIGUSR1);
  CHECK(eventually([&] { return h.out->contains("got USR1\n"); }));
  CHECK(h.sup->live_pids().size() == 1);
  // No event reports "nothing pending", so the absence of one is checked over a while.
  CHECK(h.next(200ms).kind == Kind::kTimeout);
  auto exits = h.sup->stop(SIGTERM, 2s);
  REQUIRE(exits.size() == 1);
}

TEST_CASE("supervisor: start failures are SpawnErrors and stop the started workers",
          "[supervisor]") {
  Harness h;
  WorkerSpec good = sh(0, "echo started; exec sleep 30");
  WorkerSpec bad = sh(1, "");
  bad.argv = {"ddprun-no-such-worker", "--flag"};
  CHECK_THROWS_WITH(h.sup->start({good, bad}),
                    "cannot execute 'ddprun-no-such-worker': No such file or directory");
  CHECK(h.sup->live_pids().empty());
  WorkerSpec unwritable = sh(0, "true");
  unwritable.out.mode = StreamMode::kRedirect;
  unwritable.out.file = "/proc/ddprun-cannot-create/stdout.log";
  CHECK_THROWS_AS(h.sup->start({unwritable}), SpawnError);
  CHECK_THROWS_WITH(h.sup->start({unwritable}),
                    Catch::Contains("/proc/ddprun-cannot-create/stdout.log"));
  // The supervisor is still usable.
  h.sup->start({sh(0, "exit 4")});
  SupervisorEvent ev = h.next();
  REQUIRE(ev.kind == Kind::kWorkerExited);
  CHECK(ev.exit.exit_code == 4);
}

TEST_CASE("supervisor: the destructor kills and reaps leftover workers", "[supervisor]") {
  std::vector<pid_t> pids;
  {
    const bool pidfd = GENERATE(true, false);  // false: the SIGCHLD fallback
    INFO("use_pidfd=" << pidfd);
    Harness h(pidfd);
    h.sup->start({sh(0, "exec sleep 30"), sh(1, "trap '' TERM; exec sleep 30")});
    pids = h.sup->live_pids();
    REQUIRE(pids.size() == 2);
  }
  for (pid_t p : pids) {
    errno = 0;
    CHECK(::kill(p, 0) == -1);  // reaped, not a zombie: the pid no longer exists
    CHECK(errno == ESRCH);
  }
}
