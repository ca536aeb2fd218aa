// rdzv_test_util.h: helpers of the rendezvous tests: free loopback ports, polling with a
// deadline, parameters for a node of a loopback "cluster". Single-threaded helpers.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "rendezvous/registry.h"

namespace ddprun::rdzv::test {

// A port that was free a moment ago on 127.0.0.1 (bound to port 0, then closed).
inline std::uint16_t free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// Polls `pred` every 10 ms until it holds or `timeout` passes; returns its last value.
inline bool eventually(const std::function<bool()>& pred,
                       std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

// Node `i` (0-based) of a loopback cluster: --local-addr 127.0.0.<i+1>; the endpoint is
// 127.0.0.1:port, so node 0 hosts the rendezvous store. Tiny intervals keep tests fast.
inline RendezvousParams node_params(const std::string& backend, int i, std::uint16_t port,
                                    int min_nodes, int max_nodes, int nproc = 1) {
  RendezvousParams p;
  p.backend = parse_backend(backend);
  p.run_id = "test_job";
  p.endpoint = "127.0.0.1:" + std::to_string(port);
  p.min_nodes = min_nodes;
  p.max_nodes = max_nodes;
  p.local_addr = "127.0.0." + std::to_string(i + 1);
  p.local_world_size = nproc;
  p.conf.join_timeout = std::chrono::seconds(20);
  p.conf.timeout = std::chrono::seconds(20);
  p.conf.last_call_timeout = std::chrono::milliseconds(300);
  p.conf.keep_alive_interval = std::chrono::milliseconds(100);
  p.conf.keep_alive_max_attempt = 10;
  p.conf.read_timeout = std::chrono::seconds(10);
  return p;
}

}  // namespace ddprun::rdzv::test
