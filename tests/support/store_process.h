// store_process.h: a real ddprun-store process on an OS-chosen loopback port, for the C++
// suites that need the store as its own process (to SIGSTOP it, or to read its memory).
// Used by tests/store/memory_return_test.cpp and tests/rendezvous/c10d. Thread-safety:
// one per test; freeze()/thaw()/rss_kib() may be called from any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace ddprun::test {

class StoreProcess {
 public:
  // Spawns `binary serve --host 127.0.0.1 --port 0` and reads the port from its first
  // line; throws std::runtime_error naming what failed.
  explicit StoreProcess(const std::string& binary);
  ~StoreProcess();  // SIGCONT, SIGTERM, reaped
  StoreProcess(const StoreProcess&) = delete;
  StoreProcess& operator=(const StoreProcess&) = delete;

  std::uint16_t port() const { return port_; }
  // A frozen store, as when the agent that hosts it is stopped (SIGSTOP / SIGCONT).
  void freeze() const;
  void thaw() const;
  // VmRSS in KiB from /proc/<pid>/status (-1 when it cannot be read).
  long rss_kib() const;

 private:
  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
};

}  // namespace ddprun::test
