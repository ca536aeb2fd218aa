// signals.h: the agent's signal plumbing: blocking the handled signals before any thread
// starts, a signalfd over them, signal names <-> numbers (--signals-to-handle) and the
// tini-style 128+n exit-code mapping.
// Used by main.cpp/cli.cpp (names, blocking) and ProcessSupervisor (signalfd).
// Thread-safety: free functions without shared state; block_signals affects only the
// calling thread's mask (threads started later inherit it).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/unique_fd.h"

namespace ddprun::launcher {

// Blocks `signals` in the calling thread (pthread_sigmask SIG_BLOCK). main() calls it
// before any thread starts with the handled signals plus SIGCHLD, so that every thread
// inherits the mask and the signals are only ever consumed through the supervisor's
// signalfd (a signal not blocked in some thread would be delivered there instead, with
// its default action, e.g. killing the agent). Throws std::system_error.
void block_signals(const std::vector<int>& signals);

// What main() calls first, while single-threaded: block_signals(handled + SIGCHLD) and
// ignore SIGPIPE (a closed console then gives EPIPE instead of killing the agent;
// workers get the default SIGPIPE back in spawn). Throws std::system_error.
void prepare_agent_signals(const std::vector<int>& handled);

// A non-blocking, close-on-exec signalfd for `signals`.
// REQUIRES: the signals are blocked in every thread. Throws std::system_error.
UniqueFd make_signalfd(const std::vector<int>& signals);

// "SIGTERM", "TERM", "sigterm" or "15" -> 15. Throws std::invalid_argument naming the
// text ("unknown signal 'FOO'") for anything else, including numbers out of range.
int signal_from_name(std::string_view name);

// "SIGTERM,SIGINT" (commas, optional spaces; torchrun's --signals-to-handle) -> {15, 2}.
// Duplicates are dropped. Throws std::invalid_argument for SIGKILL/SIGSTOP ("SIGKILL
// cannot be handled"), and for an unknown or empty entry unless `unknown` is given: then
// the entry is left out and its message ("unknown signal 'X'") appended there.
std::vector<int> parse_signal_list(std::string_view list,
                                   std::vector<std::string>* unknown = nullptr);

// 15 -> "SIGTERM"; an unnamed number n -> "SIG<n>" (real-time signals: "SIGRTMIN+k").
std::string signal_name(int signo);

// The exit code a shell reports for a process killed by `signo`: 128 + signo.
constexpr int exit_code_for_signal(int signo) { return 128 + signo; }

}  // namespace ddprun::launcher
