// supervisor_harness.h: what the ProcessSupervisor tests share: a supervisor whose
// console is two captured pipes and `sh -c` worker specs.
// Used by supervisor_test.cpp and supervisor_output_test.cpp. Thread-safety: one test.
#pragma once

#include <catch2/catch.hpp>
#include <cstdlib>
#include <memory>
#include <string>

#include "launcher/process/supervisor.h"
#include "tests/launcher/process/process_test_util.h"

namespace ddprun::launcher::test {

using namespace std::chrono_literals;

// A supervisor whose console is two captured pipes.
struct Harness {
  explicit Harness(bool use_pidfd = true, std::chrono::milliseconds stall_timeout = 0ms) {
    agent_signal_setup();
    out = std::make_unique<PipeCapture>();
    err = std::make_unique<PipeCapture>();
    SupervisorOptions o;
    o.console_stdout_fd = out->fd();
    o.console_stderr_fd = err->fd();
    o.use_pidfd = use_pidfd;
    o.stall_timeout = stall_timeout;
    sup = std::make_unique<ProcessSupervisor>(o);
  }
  // Next event that is not a timeout, or a kTimeout after `limit`: a guard against hanging,
  // not a speed (TSan beside CI's 256-agent test gave one event over 10 s).
  SupervisorEvent next(std::chrono::milliseconds limit = 60s) { return sup->next_event(limit); }

  std::unique_ptr<PipeCapture> out, err;
  std::unique_ptr<ProcessSupervisor> sup;
};

inline WorkerSpec sh(int rank, const std::string& script, const std::string& prefix = "") {
  WorkerSpec w;
  w.local_rank = rank;
  w.global_rank = rank + 10;
  w.argv = {"/bin/sh", "-c", script};
  w.env = {"PATH=/usr/bin:/bin", "RANK=" + std::to_string(rank)};
  w.line_prefix = prefix;
  return w;
}

}  // namespace ddprun::launcher::test
