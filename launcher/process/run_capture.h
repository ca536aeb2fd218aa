// run_capture.h: runs a short helper program and returns what it printed: `ssh -G HOST`
// (ssh_config.cpp) and the workers' Python asked for its torch version (torch_version.cpp).
// The helper runs in a process group of its own, stdin and stderr on /dev/null; a helper
// still running at the timeout is killed with its whole group and reaped, so nothing it
// started outlives the call. Thread-safety: no shared state; callable from any thread
// (it waits for its own child only).
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace ddprun::launcher {

// `argv[0]` is looked up in this process's PATH; `env` (KEY=VALUE strings) replaces the
// environment when given. Returns stdout (at most `max_bytes` are kept) when the helper
// exits 0 within `timeout`; nullopt when it cannot start, exits otherwise, or times out.
std::optional<std::string> run_capture(const std::vector<std::string>& argv,
                                       const std::optional<std::vector<std::string>>& env,
                                       std::chrono::milliseconds timeout,
                                       std::size_t max_bytes = 64 * 1024);

}  // namespace ddprun::launcher
