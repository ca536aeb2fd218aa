// stdin_watch.h: StdinWatch, the remote agent's end of a multi-host launch (the hidden
// --exit-on-stdin-eof, which ssh_launch gives every agent it starts). The launcher holds
// the write end of each ssh's stdin and never writes; when the launcher dies (even by
// SIGKILL), is stopped, or the link drops, ssh/sshd close the agent's stdin. The watch
// sees end of file and sends the agent process SIGTERM, so the agent stops its workers
// through its one way to cancel (a terminating signal, docs/architecture.md).
// Used by main.cpp. Thread-safety: one thread of its own, started by the constructor and
// joined by the destructor; the object itself is used from one thread.
#pragma once

#include <thread>

#include "launcher/process/unique_fd.h"

namespace ddprun::launcher {

class StdinWatch {
 public:
  // Watches `fd` (normally 0). `signo`: sent to this process at end of file or error.
  explicit StdinWatch(int fd, int signo);
  ~StdinWatch();
  StdinWatch(const StdinWatch&) = delete;
  StdinWatch& operator=(const StdinWatch&) = delete;

 private:
  void run(int fd, int signo);
  UniqueFd wake_;  // eventfd: the destructor's "stop watching"
  std::thread thread_;
};

}  // namespace ddprun::launcher
