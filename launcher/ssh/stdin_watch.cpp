// stdin_watch.cpp: StdinWatch's thread (see stdin_watch.h): poll stdin, SIGTERM at end
// of file. Used by main.cpp.
#include "launcher/ssh/stdin_watch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>

#include "launcher/process/signals.h"

namespace ddprun::launcher {

StdinWatch::StdinWatch(int fd, int signo)
    : watched_(::fcntl(fd, F_DUPFD_CLOEXEC, 3)), wake_(::eventfd(0, EFD_CLOEXEC)) {
  if (!watched_) throw_errno("cannot take stdin for the ssh session watch");
  if (!wake_) throw_errno("eventfd");
  const UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!null || ::dup2(null.get(), fd) < 0) throw_errno("cannot put /dev/null on stdin");
  thread_ = std::thread([this, signo] { run(signo); });
}

StdinWatch::~StdinWatch() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(wake_.get(), &one, sizeof one);
  thread_.join();
}

void StdinWatch::run(int signo) {
  const int fd = watched_.get();
  std::array<pollfd, 2> fds{pollfd{fd, POLLIN, 0}, pollfd{wake_.get(), POLLIN, 0}};
  std::array<char, 4096> discard{};
  for (;;) {
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents != 0) return;  // the destructor: the agent is done
    if (fds[0].revents == 0) continue;
    const ssize_t n = ::read(fd, discard.data(), discard.size());
    if (n > 0 || (n < 0 && (errno == EINTR || errno == EAGAIN))) continue;  // not used
    break;  // end of file (or an error: the launcher's end is gone either way)
  }
  spdlog::warn("the launcher's ssh session closed (stdin reached end of file): stopping ({})",
               signal_name(signo));
  ::kill(::getpid(), signo);  // process-directed: reaches the supervisor's signalfd
}

}  // namespace ddprun::launcher
