// dstate_watch.h: torchrun 2.14's TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT: how long each
// live worker has been in Linux uninterruptible sleep (D state, /proc/<pid>/stat), so that
// the Agent ends a group with a worker wedged in the kernel (a dead GPU, an NFS hang)
// instead of waiting for the D state to end. Used by the Agent's monitor loop.
// Thread-safety: none (one Agent thread).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ddprun::launcher {

// The timeout in seconds from the agent's environment, as torchrun reads it: unset, empty,
// not a number or not positive disables the check (nullopt).
std::optional<double> uninterruptible_state_timeout(const std::map<std::string, std::string>& env);

// The state letter of /proc/<pid>/stat ('R', 'S', 'D', ...); nullopt when unreadable.
std::optional<char> process_state(pid_t pid);

class DStateWatch {
 public:
  using Clock = std::chrono::steady_clock;
  struct Stuck {
    pid_t pid;
    double seconds;  // in D state without a break, as seen by the checks
  };

  explicit DStateWatch(double timeout_s) : timeout_s_(timeout_s) {}

  // One look at `live` (the workers' pids): the ones in D state since at least the
  // timeout, in `live`'s order. A pid seen out of D state (or gone) starts over.
  std::vector<Stuck> check(const std::vector<pid_t>& live, Clock::time_point now = Clock::now());

  double timeout_s() const { return timeout_s_; }

 private:
  double timeout_s_;
  std::map<pid_t, Clock::time_point> since_;  // first seen in D state
};

}  // namespace ddprun::launcher
