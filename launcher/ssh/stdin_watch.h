// stdin_watch.h: StdinWatch, a remote agent's end of a multi-host launch (the hidden
// --exit-on-stdin-eof): when the launcher ends (even by SIGKILL) or the link drops, ssh
// closes the agent's stdin; the watch sees end of file and sends the agent SIGTERM, its
// one way to cancel. Used by main.cpp. Thread-safety: one thread of its own, started by
// the constructor and joined by the destructor; the object is used from one thread.
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
