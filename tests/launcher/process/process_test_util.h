// process_test_util.h: helpers for the process-layer tests: a pipe captured by a reader
// thread, /proc inspection, and the agent's signal setup; with the shared test support
// (eventually, TempDir, slurp) named in this namespace.
// Thread-safety: PipeCapture's accessors are safe from the test thread.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/unique_fd.h"
#include "launcher/process/signals.h"
#include "tests/support/eventually.h"
#include "tests/support/temp_dir.h"

namespace ddprun::launcher::test {

using ddprun::test::eventually;
using ddprun::test::slurp;
using ddprun::test::TempDir;

// What ddprun's main does before starting threads; tests call it first thing.
inline void agent_signal_setup() {
  prepare_agent_signals({SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2});
}

// A pipe whose read end is drained by a thread into a string (e.g. the "console").
class PipeCapture {
 public:
  PipeCapture() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("pipe2");
    read_.reset(fds[0]);
    write_.reset(fds[1]);
    reader_ = std::thread([this] {
      char buf[65536];
      while (true) {
        {
          std::unique_lock lock(mu_);
          while (paused_) {
            lock.unlock();
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            lock.lock();
          }
        }
        ssize_t n = ::read(read_.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        std::lock_guard lock(mu_);
        text_.append(buf, static_cast<std::size_t>(n));
      }
    });
  }
  ~PipeCapture() {
    close_write();
    set_paused(false);
    if (reader_.joinable()) reader_.join();
  }
  int fd() const { return write_.get(); }
  void close_write() { write_.reset(); }
  void set_paused(bool p) {
    std::lock_guard lock(mu_);
    paused_ = p;
  }
  std::string text() {
    std::lock_guard lock(mu_);
    return text_;
  }
  bool contains(const std::string& needle) { return text().find(needle) != std::string::npos; }
  // Closes our write end and waits for EOF (every other holder must be gone).
  std::string finish() {
    close_write();
    set_paused(false);
    if (reader_.joinable()) reader_.join();
    return text();
  }

 private:
  UniqueFd read_, write_;
  std::mutex mu_;
  std::string text_;
  bool paused_ = false;
  std::thread reader_;
};

inline std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

struct ProcInfo {
  pid_t pid = 0;
  char state = '?';
  pid_t ppid = 0;
  pid_t pgrp = 0;
  pid_t session = 0;
  std::string comm;
};

// Parses /proc/<pid>/stat; false if the process does not exist.
inline bool proc_info(pid_t pid, ProcInfo* info) {
  std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  auto open = stat.find('(');
  auto close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos) return false;
  info->pid = pid;
  info->comm = stat.substr(open + 1, close - open - 1);
  std::istringstream rest(stat.substr(close + 2));
  rest >> info->state >> info->ppid >> info->pgrp >> info->session;
  return true;
}

// Live (non-zombie) processes whose process group is in `groups`.
inline std::vector<ProcInfo> processes_in_groups(const std::vector<pid_t>& groups) {
  std::vector<ProcInfo> found;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return found;
  while (dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    ProcInfo info;
    if (!proc_info(static_cast<pid_t>(pid), &info) || info.state == 'Z' || info.state == 'X') {
      continue;
    }
    for (pid_t g : groups) {
      if (info.pgrp == g) found.push_back(info);
    }
  }
  ::closedir(dir);
  return found;
}

inline bool alive(pid_t pid) {
  ProcInfo info;
  return proc_info(pid, &info) && info.state != 'Z' && info.state != 'X';
}

}  // namespace ddprun::launcher::test
