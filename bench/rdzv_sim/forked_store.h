// forked_store.h: the c10d store of ddprun-rdzv-sim --store-process (bench/rdzv_sim/): a
// TcpStoreServer in a child process forked while the simulator has no other thread
// (before a size's agents start), so that the agents' process holds only their ends of
// the connections. The child answers each byte on its command pipe with its counters and
// stops when the pipe closes. Thread-safety: one thread.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "store/tcp_store_server.h"

namespace ddprun::bench {

class ForkedStore {
 public:
  // Forks; the child starts a TcpStoreServer with `so`. Throws std::runtime_error when
  // the child cannot be made or its server does not start.
  explicit ForkedStore(const store::ServerOptions& so);
  ~ForkedStore();  // closes the pipe (the child stops its server), reaps the child
  ForkedStore(const ForkedStore&) = delete;
  ForkedStore& operator=(const ForkedStore&) = delete;

  std::uint16_t port() const { return port_; }
  // The child's TcpStoreServer::stats(); throws std::runtime_error when it does not answer.
  store::ServerStats stats() const;

 private:
  [[noreturn]] static void serve(const store::ServerOptions& so, int cmd, int reply);

  pid_t pid_ = -1;
  int cmd_ = -1, reply_ = -1;
  std::uint16_t port_ = 0;
};

}  // namespace ddprun::bench
