// stdin_watch.h: StdinWatch, a remote agent's end of a multi-host launch (the hidden
// --exit-on-stdin-eof): when the launcher ends (even by SIGKILL) or the link drops, ssh
// closes the agent's stdin; the watch sees end of file and sends the agent SIGTERM, its
// one way to cancel. The session's pipe becomes the watch's alone: /dev/null takes its
// place as fd 0, so the agent's workers read end of file (input(), breakpoint() on a
// remote rank end instead of waiting forever on a pipe nobody writes). Used by main.cpp.
// Thread-safety: one thread of its own, started by the constructor and joined by the destructor;
// the object is used from one thread.
#pragma once

#include <thread>

#include "base/unique_fd.h"

namespace ddprun::launcher {

class StdinWatch {
 public:
  // Watches what `fd` (normally 0) is, and puts /dev/null on `fd`. `signo`: sent to this
  // process at end of file or error. Throws std::system_error when it cannot.
  explicit StdinWatch(int fd, int signo);
  ~StdinWatch();
  StdinWatch(const StdinWatch&) = delete;
  StdinWatch& operator=(const StdinWatch&) = delete;

 private:
  void run(int signo);
  UniqueFd watched_;  // the session's pipe, moved off `fd`
  UniqueFd wake_;     // eventfd: the destructor's "stop watching"
  std::thread thread_;
};

}  // namespace ddprun::launcher
