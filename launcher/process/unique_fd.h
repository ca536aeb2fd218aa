// unique_fd.h: UniqueFd, a move-only owner of one file descriptor, and throw_errno, the
// launcher's one helper that turns a failed syscall into a std::system_error.
// Used by the process layer (spawn, supervisor, log fan-out, orphan guard).
// Thread-safety: a UniqueFd is a plain value; one owner at a time.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <string>
#include <system_error>
#include <utility>

namespace ddprun::launcher {

// Throws std::system_error(errno) whose what() reads "<what>: <strerror>".
[[noreturn]] inline void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

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

}  // namespace ddprun::launcher
