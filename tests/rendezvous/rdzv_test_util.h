// rdzv_test_util.h: helpers of the rendezvous tests: parameters for a node of a loopback
// "cluster" (node_params; loopback_round and memory_connect for handlers built by hand),
// running next_rendezvous() on threads (rendezvous_all, rendezvous_outcome),
// plus the shared test support (eventually, ReservedPort) in the same namespace
// (ddprun::test). Call them from the test's thread.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/c10d/store_rendezvous.h"
#include "rendezvous/registry.h"
#include "rendezvous/rendezvous.h"
#include "rendezvous/round_config.h"
#include "store/memory_store.h"
#include "store/prefix_store.h"
#include "store/store.h"
#include "tests/support/eventually.h"
#include "tests/support/reserved_port.h"

namespace ddprun::test {

// Node `i` (0-based) of a loopback cluster: --local-addr 127.0.0.<i+1>; the endpoint is
// 127.0.0.1:port, so node 0 hosts the rendezvous store. Tiny intervals keep tests fast.
inline rdzv::RendezvousParams node_params(const std::string& backend, int i, std::uint16_t port,
                                          int min_nodes, int max_nodes, int nproc = 1) {
  rdzv::RendezvousParams p;
  p.backend = rdzv::parse_backend(backend);
  p.backend_alias = rdzv::backend_alias(backend);
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

// The round settings of node `i` of a group of min..max nodes under `run_id`: it
// advertises `addr`, binds its workers' store to 127.0.0.1 and is called n<i>; the
// intervals stay the defaults for the caller to set.
inline rdzv::RoundConfig loopback_round(const std::string& run_id, int i, int min_nodes,
                                        int max_nodes, const std::string& addr = "127.0.0.1") {
  rdzv::RoundConfig r;
  r.run_id = run_id;
  r.min_nodes = min_nodes;
  r.max_nodes = max_nodes;
  r.advertise_addr = addr;
  r.bind_addr = "127.0.0.1";
  r.hostname = "n" + std::to_string(i);
  return r;
}

// A StoreRendezvous connection to `mem` as the launcher's PrefixStore sees the rendezvous
// store: keys under ddprun/rdzv/<run_id>.
inline rdzv::StoreRendezvous::Connect memory_connect(std::shared_ptr<store::MemoryStore> mem,
                                                     const std::string& run_id) {
  return [mem = std::move(mem), prefix = "ddprun/rdzv/" + run_id](auto, const auto&) {
    return std::make_shared<store::PrefixStore>(prefix, mem);
  };
}

using Handlers = std::vector<std::unique_ptr<rdzv::RendezvousHandler>>;

// Runs next_rendezvous() on every handler concurrently; their infos in handler order.
inline std::vector<rdzv::RendezvousInfo> rendezvous_all(Handlers& hs) {
  std::vector<std::future<rdzv::RendezvousInfo>> fs;
  for (auto& h : hs) {
    fs.push_back(std::async(std::launch::async, [&h] { return h->next_rendezvous(); }));
  }
  std::vector<rdzv::RendezvousInfo> out;
  for (auto& f : fs) out.push_back(f.get());
  return out;
}

// next_rendezvous() on a thread of its own: "formed", or the message of the `Error` it
// threw (any other exception reaches the test through get()).
template <typename Error = rdzv::RendezvousError>
std::future<std::string> rendezvous_outcome(rdzv::RendezvousHandler& h) {
  return std::async(std::launch::async, [&h] {
    try {
      h.next_rendezvous();
      return std::string("formed");
    } catch (const Error& e) {
      return std::string(e.what());
    }
  });
}

// The heartbeat counters of slots 0..n-1 of round `round` of run "test_job", read through
// a client of the rendezvous store ("left" or "done" read as 0).
inline std::vector<long> heartbeats(store::Store& s, int round, int n) {
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) {
    keys.push_back("ddprun/rdzv/test_job/r" + std::to_string(round) + "/hb/" + std::to_string(i));
  }
  std::vector<long> out;
  for (const auto& v : s.multi_get(keys)) out.push_back(std::atol(v.c_str()));
  return out;
}

// For eventually(): true once each of those n slots has beaten `k` more times than when
// this was called. A node beats at most once per keep_alive_interval and looks at the
// round after every beat, so this observes both time gone by and fresh looks of every node.
inline std::function<bool()> beaten(store::Store& s, int round, int n, int k) {
  return [&s, round, n, k, since = heartbeats(s, round, n)] {
    const auto now = heartbeats(s, round, n);
    for (std::size_t i = 0; i < now.size(); ++i) {
      if (now[i] < since[i] + k) return false;
    }
    return true;
  };
}

}  // namespace ddprun::test
