// supervision.h: the one start-up of a ProcessSupervisor, shared by ddprun's two run modes
// (main.cpp's Agent and ssh/ssh_launch.cpp's multi-host launch), and the one way a usage
// error is printed. Thread-safety: run_supervised runs on main's thread before any other
// thread exists (it blocks the handled signals and forks the orphan guard).
#pragma once

#include <functional>
#include <string>

#include "launcher/options/config.h"
#include "launcher/process/supervisor.h"

namespace ddprun::launcher {

// Prints "ddprun: error: MESSAGE" and the usage hint to stderr; returns 2 (bad usage).
int usage_error_exit(const std::string& message);

// Whether the supervisor runs the workers' watchdogs (--stall-timeout, the file timer).
// The ssh launch supervises ssh clients, not workers: the hosts' agents run them.
enum class Watchdogs { kFromConfig, kNone };

// Blocks config.signals_to_handle and SIGCHLD (signals.h), starts the orphan guard,
// builds a ProcessSupervisor and runs `body` on it. Returns body's exit status, or 1
// after printing "ddprun: error: WHAT" when the start-up or `body` throws.
int run_supervised(const LaunchConfig& config, Watchdogs watchdogs,
                   const std::function<int(ProcessSupervisor&)>& body);

}  // namespace ddprun::launcher
