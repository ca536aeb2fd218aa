// run_capture.cpp: run_capture (run_capture.h): posix_spawnp into a new process group,
// stdout read through a pipe until EOF or the deadline, then the child reaped (its group
// SIGKILLed first when the deadline passed).
#include "launcher/process/run_capture.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>

extern char** environ;

namespace ddprun::launcher {
namespace {

using Clock = std::chrono::steady_clock;

// Reads `fd` until EOF, `max_bytes` or `deadline`; false when the deadline passed first.
bool read_until(int fd, Clock::time_point deadline, std::size_t max_bytes, std::string& text) {
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return false;
    if (n < 0) return true;
    std::array<char, 4096> buf{};
    const ssize_t got = ::read(fd, buf.data(), buf.size());
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return true;
    if (text.size() < max_bytes) {
      text.append(buf.data(), std::min(static_cast<std::size_t>(got), max_bytes - text.size()));
    }
  }
}

}  // namespace

std::optional<std::string> run_capture(const std::vector<std::string>& argv,
                                       const std::optional<std::vector<std::string>>& env,
                                       std::chrono::milliseconds timeout, std::size_t max_bytes) {
  if (argv.empty()) return std::nullopt;
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  if (env) {
    for (const auto& e : *env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
  }
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return std::nullopt;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);  // its own group: a timeout ends all it started
  pid_t pid = -1;
  const int rc =
      ::posix_spawnp(&pid, args[0], &actions, &attr, args.data(), env ? envp.data() : environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  if (rc != 0) {
    ::close(out[0]);
    return std::nullopt;
  }
  const auto deadline = Clock::now() + timeout;
  std::string text;
  bool in_time = read_until(out[0], deadline, max_bytes, text);
  ::close(out[0]);
  int status = 0;
  // stdout closed: the exit follows at once, unless the helper closed it and goes on.
  while (in_time) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) return std::nullopt;  // reaped elsewhere: status unknown
    if (Clock::now() >= deadline) {
      in_time = false;
    } else {
      ::usleep(2000);
    }
  }
  if (!in_time) {
    ::kill(-pid, SIGKILL);
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return std::nullopt;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return text;
}

}  // namespace ddprun::launcher
