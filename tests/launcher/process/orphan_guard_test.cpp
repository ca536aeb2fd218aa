// The orphan guard: `kill -9` of the agent leaves no process of the job alive,
// grandchildren included; a normal agent exit lets the guard exit too.
#include "launcher/process/orphan_guard.h"

#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdlib>

#include "launcher/process/supervisor.h"
#include "tests/launcher/process/daemon_util.h"
#include "tests/launcher/process/process_test_util.h"

using namespace ddprun::launcher;
using namespace ddprun::launcher::test;
using namespace std::chrono_literals;

namespace {

// Forks a stand-in agent: guard + supervisor + `workers` shell workers. It reports its
// workers' process groups (as ints) on a pipe and then either waits forever or, with
// `exit_normally`, waits for its workers and returns from main-like code.
struct FakeAgent {
  pid_t pid = 0;
  std::vector<pid_t> groups;
};

FakeAgent start_fake_agent(int workers, const std::string& script, bool exit_normally) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    int rc = 0;
    try {
      agent_signal_setup();
      SupervisorOptions o;
      o.orphan_guard = start_orphan_guard();  // while single-threaded
      {
        ProcessSupervisor sup(o);
        std::vector<WorkerSpec> specs;
        for (int r = 0; r < workers; ++r) {
          WorkerSpec w;
          w.local_rank = r;
          w.argv = {"/bin/sh", "-c", script};
          w.env = {"PATH=/usr/bin:/bin"};
          specs.push_back(w);
        }
        sup.start(specs);
        std::vector<pid_t> pids = sup.live_pids();
        int n = static_cast<int>(pids.size());
        if (::write(fds[1], &n, sizeof n) != sizeof n) ::_exit(3);
        for (pid_t p : pids) {
          if (::write(fds[1], &p, sizeof p) != sizeof p) ::_exit(3);
        }
        if (!exit_normally) {
          while (true) ::pause();
        }
        for (int i = 0; i < workers; ++i) sup.next_event(10s);
      }
    } catch (...) {
      rc = 2;
    }
    ::_exit(rc);
  }
  ::close(fds[1]);
  FakeAgent agent;
  agent.pid = pid;
  int n = 0;
  REQUIRE(::read(fds[0], &n, sizeof n) == sizeof n);
  for (int i = 0; i < n; ++i) {
    pid_t p = 0;
    REQUIRE(::read(fds[0], &p, sizeof p) == sizeof p);
    agent.groups.push_back(p);
  }
  ::close(fds[0]);
  return agent;
}

pid_t find_guard(pid_t agent) {
  pid_t found = 0;
  eventually([&] {
    DIR* dir = ::opendir("/proc");
    while (dirent* e = ::readdir(dir)) {
      ProcInfo info;
      pid_t pid = std::atoi(e->d_name);
      if (pid > 0 && proc_info(pid, &info) && info.ppid == agent && info.comm == "ddprun-guard") {
        found = pid;
      }
    }
    ::closedir(dir);
    return found != 0;
  });
  return found;
}

// The set of signals `pid` ignores (SigIgn of /proc/<pid>/status: bit signo-1).
unsigned long long ignored_signals(pid_t pid) {
  const std::string status = slurp("/proc/" + std::to_string(pid) + "/status");
  const auto at = status.find("SigIgn:");
  return at == std::string::npos ? 0 : std::strtoull(status.c_str() + at + 7, nullptr, 16);
}
constexpr unsigned long long kTerminal =
    (1ULL << (SIGINT - 1)) | (1ULL << (SIGTERM - 1)) | (1ULL << (SIGHUP - 1));

}  // namespace

TEST_CASE("orphan guard: kill -9 of the agent kills every worker group", "[orphan_guard]") {
  FakeAgent agent = start_fake_agent(2, "sleep 1000 & exec sleep 1000", false);
  REQUIRE(agent.groups.size() == 2);
  pid_t guard = find_guard(agent.pid);
  REQUIRE(guard != 0);
  // Each group holds the worker (exec'd sleep) and its background sleep.
  REQUIRE(eventually([&] { return processes_in_groups(agent.groups).size() == 4; }));
  ProcInfo gi;
  REQUIRE(proc_info(guard, &gi));
  CHECK(gi.session == guard);  // own session: survives a kill of the agent's group

  ::kill(agent.pid, SIGKILL);
  int status = 0;
  REQUIRE(::waitpid(agent.pid, &status, 0) == agent.pid);
  auto t0 = std::chrono::steady_clock::now();
  CHECK(eventually([&] { return processes_in_groups(agent.groups).empty(); }, 3s));
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  CHECK(eventually([&] { return !alive(guard); }, 3s));
  for (const auto& p : processes_in_groups(agent.groups)) {
    UNSCOPED_INFO("left alive: " << p.pid << " " << p.comm);
  }
}

TEST_CASE("orphan guard: kill -9 of the agent also kills daemons that left their group",
          "[orphan_guard][descendants]") {
  const TempDir tmp;
  const std::string dir = tmp.str();
  FakeAgent agent =
      start_fake_agent(1,
                       daemon_command("setsid", dir + "/setsid", 600) + "; " +
                           daemon_command("setpgid", dir + "/setpgid", 600) + "; exec sleep 1000",
                       false);
  const pid_t setsid_daemon = wait_for_pidfile(dir + "/setsid");
  const pid_t setpgid_daemon = wait_for_pidfile(dir + "/setpgid");
  REQUIRE(setsid_daemon > 0);
  REQUIRE(setpgid_daemon > 0);
  CHECK(alive(setsid_daemon));
  CHECK(alive(setpgid_daemon));
  ::kill(agent.pid, SIGKILL);
  int status = 0;
  REQUIRE(::waitpid(agent.pid, &status, 0) == agent.pid);
  CHECK(eventually([&] { return !alive(setsid_daemon) && !alive(setpgid_daemon); }, 5s));
  CHECK(eventually([&] { return processes_in_groups(agent.groups).empty(); }, 3s));
  for (pid_t p : {setsid_daemon, setpgid_daemon}) {
    if (alive(p)) ::kill(p, SIGKILL);
  }
}

TEST_CASE("orphan guard: ignores terminal signals and exits after a normal agent exit",
          "[orphan_guard]") {
  // The worker (and so the agent) ends when the test says so, not after a guessed time
  // that a loaded machine could spend before the guard is found.
  const TempDir dir;
  const std::string go = dir.str() + "/go";
  FakeAgent agent = start_fake_agent(1, "while [ ! -e " + go + " ]; do sleep 0.05; done", true);
  pid_t guard = find_guard(agent.pid);
  REQUIRE(guard != 0);
  // The kernel drops a signal that its target ignores when it is sent: with the three
  // ignored (SigIgn of /proc/<pid>/status), the kills below cannot end the guard later.
  CHECK((ignored_signals(guard) & kTerminal) == kTerminal);
  ::kill(guard, SIGINT);
  ::kill(guard, SIGTERM);
  ::kill(guard, SIGHUP);
  CHECK(alive(guard));
  dir.write("go", "");
  int status = 0;
  REQUIRE(::waitpid(agent.pid, &status, 0) == agent.pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(eventually([&] { return !alive(guard); }, 3s));
  CHECK(processes_in_groups(agent.groups).empty());
}
