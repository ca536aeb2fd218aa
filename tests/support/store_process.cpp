// store_process.cpp: spawning, freezing and stopping a ddprun-store process for tests.
#include "tests/support/store_process.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <stdexcept>
#include <vector>

extern char** environ;

namespace ddprun::test {

StoreProcess::StoreProcess(const std::string& binary) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("StoreProcess: pipe() failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  std::vector<std::string> args{binary, "serve", "--host", "127.0.0.1", "--port", "0"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = ::posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  std::string line;  // "ddprun-store listening on 127.0.0.1:PORT"
  char c = 0;
  while (rc == 0 && ::read(fds[0], &c, 1) == 1 && c != '\n') line += c;
  ::close(fds[0]);
  if (rc != 0) throw std::runtime_error("StoreProcess: cannot spawn " + binary);
  const auto colon = line.rfind(':');
  if (colon == std::string::npos) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    throw std::runtime_error("StoreProcess: " + binary + " printed no port: '" + line + "'");
  }
  port_ = static_cast<std::uint16_t>(std::stoi(line.substr(colon + 1)));
}

StoreProcess::~StoreProcess() {
  ::kill(pid_, SIGCONT);
  ::kill(pid_, SIGTERM);
  ::waitpid(pid_, nullptr, 0);
}

void StoreProcess::freeze() const { ::kill(pid_, SIGSTOP); }
void StoreProcess::thaw() const { ::kill(pid_, SIGCONT); }

long StoreProcess::rss_kib() const {
  std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
  std::string word;
  while (in >> word) {
    if (word == "VmRSS:") {
      long kib = 0;
      in >> kib;
      return kib;
    }
  }
  return -1;
}

}  // namespace ddprun::test
