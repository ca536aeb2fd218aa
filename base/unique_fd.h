// unique_fd.h: UniqueFd, a move-only owner of one file descriptor (and, for its users,
// the errno helper base/sys_error.h). Used by the process layer (spawn, supervisor, log
// fan-out, orphan guard), the ssh launch's stdin watch and the store (its server's epoll,
// listening and wake descriptors, each connection's socket; the client's socket).
// Thread-safety: a UniqueFd is a plain value; one owner at a time.
#pragma once

#include <unistd.h>

#include <utility>

#include "base/sys_error.h"

namespace ddprun {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }
  int release() { return std::exchange(fd_, -1); }
  // Closes the current fd (if any). EINTR from close() is not retried: on Linux the fd
  // is released whatever close() returns, and retrying could close a reused number.
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace ddprun
