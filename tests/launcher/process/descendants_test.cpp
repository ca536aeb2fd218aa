// Daemons that leave their worker's process group (setsid or setpgid, then fork again):
// the supervisor adopts them as a child subreaper, reaps them when they exit without
// mistaking them for workers, and kills them at the attempt's end; the job token marks
// the processes the orphan guard must find once the agent is gone.
#include "launcher/process/descendants.h"

#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>

#include "tests/launcher/process/daemon_util.h"
#include "tests/launcher/process/supervisor_harness.h"

using namespace ddprun::launcher;
using namespace ddprun::launcher::test;
using namespace std::chrono_literals;
using Kind = SupervisorEvent::Kind;

TEST_CASE("supervisor: daemons that left the worker's group die at the attempt's end",
          "[supervisor][descendants]") {
  const std::string how = GENERATE(std::string("setsid"), std::string("setpgid"));
  INFO(how);
  Harness h;
  TempDir dir;
  const std::string pidfile = dir.str() + "/daemon";
  h.sup->start({sh(0, daemon_command(how, pidfile, 600) + "; exit 0")});
  const pid_t daemon = wait_for_pidfile(pidfile);
  REQUIRE(daemon > 0);
  SupervisorEvent ev = h.next(10s);
  REQUIRE(ev.kind == Kind::kWorkerExited);
  CHECK(ev.exit.exit_code == 0);
  CHECK(h.next(10s).kind == Kind::kAllSucceeded);
  ProcInfo info;
  REQUIRE(proc_info(daemon, &info));
  CHECK(alive(daemon));
  // Out of the worker's group (whose id is the worker's session id, setsid in spawn).
  if (how == "setsid") {
    CHECK(info.session == info.pgrp);  // a session of its own (led by the exited parent)
  } else {
    CHECK(info.pgrp != info.session);  // a group of its own in the worker's session
  }
  CHECK(info.ppid == ::getpid());  // adopted: the supervisor is a subreaper
  h.sup->stop(SIGTERM, 1s);        // the attempt's end
  CHECK(eventually([&] { return gone(daemon); }, 10s));
  if (alive(daemon)) ::kill(daemon, SIGKILL);
}

TEST_CASE("supervisor: an adopted daemon's exit is reaped and is no worker's exit",
          "[supervisor][descendants]") {
  Harness h;
  TempDir dir;
  const std::string pidfile = dir.str() + "/daemon";
  h.sup->start({sh(0, daemon_command("setsid", pidfile, 0) + "; exec sleep 30")});
  const pid_t daemon = wait_for_pidfile(pidfile);
  REQUIRE(daemon > 0);
  CHECK(eventually([&] { return gone(daemon); }, 10s));  // no zombie left behind
  // No event reports "nothing pending", so the absence of one is checked over a while.
  CHECK(h.next(300ms).kind == Kind::kTimeout);  // the worker still runs
  CHECK(h.sup->live_pids().size() == 1);
  h.sup->stop(SIGTERM, 1s);
}

TEST_CASE("processes_with_token finds the processes whose environment carries the token",
          "[descendants]") {
  const std::string token = make_job_token();
  CHECK(token.size() == 32);
  CHECK(make_job_token() != token);
  std::vector<std::string> env = {"PATH=/usr/bin:/bin", "DDPRUN_JOB_TOKEN=old"};
  set_env_entry(env, kJobTokenVar, token);
  CHECK(env == std::vector<std::string>{"PATH=/usr/bin:/bin", "DDPRUN_JOB_TOKEN=" + token});
  auto start = [](std::vector<std::string> e) {
    std::vector<char*> envp;
    for (auto& kv : e) envp.push_back(kv.data());
    envp.push_back(nullptr);
    pid_t pid = ::fork();
    if (pid == 0) {
      char* argv[] = {const_cast<char*>("/bin/sleep"), const_cast<char*>("30"), nullptr};
      ::execve(argv[0], argv, envp.data());
      ::_exit(127);
    }
    return pid;
  };
  const pid_t marked = start(env);
  const pid_t other = start({"PATH=/usr/bin:/bin", "DDPRUN_JOB_TOKEN=" + token + "x"});
  CHECK(eventually([&] {
    auto found = processes_with_token(token);
    return found == std::vector<pid_t>{marked};
  }));
  for (pid_t p : {marked, other}) {
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }
  CHECK(processes_with_token(token).empty());
}
