// The RendezvousHandler contract, one suite over every multi-node handler: c10d on a real
// TCP store (the registry's handler), c10d's StoreRendezvous over a MemoryStore, and
// etcd-v3 against a real etcd member started per case (etcd_cluster.h). MIN:MAX with
// last call, a late joiner waits and its round follows, a leaving node is noticed, a
// closed rendezvous rejects, the exit barrier, interrupt() ends a wait. Backend-specific
// stories stay in c10d/store_rendezvous_test.cpp and etcd/etcd_rendezvous_test.cpp.
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <set>
#include <string>

#include "rendezvous/c10d/store_rendezvous.h"
#include "rendezvous/etcd/etcd_rendezvous.h"
#include "rendezvous/registry.h"
#include "store/memory_store.h"
#include "tests/rendezvous/etcd/etcd_cluster.h"
#include "tests/rendezvous/rdzv_test_util.h"

using namespace ddprun;
using namespace ddprun::rdzv;
using namespace std::chrono_literals;
using test::eventually;
using test::Handlers;
using test::rendezvous_all;
using test::rendezvous_outcome;

namespace {

// Tiny intervals keep the cases fast: last call 300 ms; a silent member is gone after
// about a second (etcd: its lease's TTL, 2 s at least).
struct C10dTcp {
  static constexpr const char* kName = "c10d on TCP";
  test::ReservedPort port;
  std::unique_ptr<RendezvousHandler> node(int i, int min_nodes, int max_nodes) {
    return make_rendezvous_handler(test::node_params("c10d", i, port, min_nodes, max_nodes));
  }
};

struct C10dMemory {
  static constexpr const char* kName = "c10d on a MemoryStore";
  std::shared_ptr<store::MemoryStore> mem = std::make_shared<store::MemoryStore>();
  std::unique_ptr<RendezvousHandler> node(int i, int min_nodes, int max_nodes) {
    StoreRendezvous::Config c;
    c.endpoint = "memory";
    c.round = test::loopback_round("contract", i, min_nodes, max_nodes);
    c.round.join_timeout = 20s;
    c.round.last_call_timeout = 300ms;
    c.round.keep_alive_interval = 100ms;
    c.round.keep_alive_max_attempt = 10;
    c.poll_slice = 20ms;
    return std::make_unique<StoreRendezvous>(c, test::memory_connect(mem, "contract"));
  }
};

struct Etcd {
  static constexpr const char* kName = "etcd-v3";
  test::EtcdCluster cluster{1};
  std::unique_ptr<RendezvousHandler> node(int i, int min_nodes, int max_nodes) {
    EtcdRendezvous::Config c;
    c.etcd.endpoints = cluster.urls();
    c.round = test::loopback_round("contract", i, min_nodes, max_nodes);
    c.round.join_timeout = 20s;
    c.round.last_call_timeout = 300ms;
    c.round.keep_alive_interval = 1s;
    c.round.keep_alive_max_attempt = 2;
    // Far beyond the cases' deadlines: only etcd watches can wake the waits in time.
    c.recheck_interval = 120s;
    c.round.progress_interval = 120s;
    return std::make_unique<EtcdRendezvous>(c);
  }
};

std::set<int> group_ranks(const std::vector<RendezvousInfo>& infos) {
  std::set<int> out;
  for (const auto& i : infos) out.insert(i.group_rank);
  return out;
}

// Every node of one formed round agrees on it.
void check_round(const std::vector<RendezvousInfo>& infos, int n) {
  std::set<int> want;
  for (int i = 0; i < n; ++i) want.insert(i);
  CHECK(group_ranks(infos) == want);
  for (const auto& info : infos) {
    CHECK(info.round == infos[0].round);
    CHECK(info.group_world_size == n);
    CHECK(info.world_size == n);
    CHECK(info.master_port == infos[0].master_port);
    CHECK(info.master_port != 0);
  }
}

}  // namespace

TEMPLATE_TEST_CASE("handler contract: MIN nodes form a round once last call ends",
                   "[contract][etcd]", C10dTcp, C10dMemory, Etcd) {
  TestType b;
  INFO(TestType::kName);
  Handlers hs;
  for (int i = 0; i < 2; ++i) hs.push_back(b.node(i, 2, 3));
  const auto t0 = std::chrono::steady_clock::now();
  const auto infos = rendezvous_all(hs);
  check_round(infos, 2);
  CHECK(std::chrono::steady_clock::now() - t0 >= 300ms);  // MAX not in: last call ran
  CHECK_FALSE(hs[0]->needs_new_round());
  CHECK(hs[0]->num_nodes_waiting() == 0);
}

TEMPLATE_TEST_CASE("handler contract: a late joiner waits, and the next round has it",
                   "[contract][etcd]", C10dTcp, C10dMemory, Etcd) {
  TestType b;
  INFO(TestType::kName);
  Handlers hs;
  for (int i = 0; i < 2; ++i) hs.push_back(b.node(i, 2, 3));
  const int first = rendezvous_all(hs)[0].round;
  hs.push_back(b.node(2, 2, 3));
  auto late = rendezvous_outcome(*hs[2]);
  REQUIRE(eventually([&] { return hs[0]->num_nodes_waiting() > 0; }, 10s));
  REQUIRE(eventually([&] { return hs[0]->needs_new_round() && hs[1]->needs_new_round(); }, 10s));
  CHECK(late.wait_for(0s) == std::future_status::timeout);  // still waiting
  auto f0 = std::async(std::launch::async, [&] { return hs[0]->next_rendezvous(); });
  auto f1 = std::async(std::launch::async, [&] { return hs[1]->next_rendezvous(); });
  const std::vector<RendezvousInfo> infos{f0.get(), f1.get()};
  CHECK(late.get() == "formed");
  CHECK(infos[0].round > first);
  CHECK(infos[0].round == infos[1].round);
  CHECK(infos[0].group_world_size == 3);
}

TEMPLATE_TEST_CASE("handler contract: a node that leaves is noticed", "[contract][etcd]", C10dTcp,
                   C10dMemory, Etcd) {
  TestType b;
  INFO(TestType::kName);
  Handlers hs;
  for (int i = 0; i < 3; ++i) hs.push_back(b.node(i, 3, 3));
  check_round(rendezvous_all(hs), 3);
  hs[2]->shutdown();  // a clean exit without the exit barrier
  CHECK(eventually([&] { return hs[0]->needs_new_round(); }, 10s));
  CHECK(hs[1]->needs_new_round_now());
}

TEMPLATE_TEST_CASE("handler contract: a closed rendezvous rejects a new node", "[contract][etcd]",
                   C10dTcp, C10dMemory, Etcd) {
  TestType b;
  INFO(TestType::kName);
  Handlers hs;
  for (int i = 0; i < 2; ++i) hs.push_back(b.node(i, 2, 2));
  rendezvous_all(hs);
  CHECK_FALSE(hs[0]->is_closed());
  hs[0]->set_closed();
  CHECK(hs[0]->is_closed());
  auto late = b.node(2, 2, 2);
  CHECK_THROWS_AS(late->next_rendezvous(), RendezvousClosedError);
}

TEMPLATE_TEST_CASE("handler contract: the exit barrier waits for every member", "[contract][etcd]",
                   C10dTcp, C10dMemory, Etcd) {
  TestType b;
  INFO(TestType::kName);
  Handlers hs;
  for (int i = 0; i < 2; ++i) hs.push_back(b.node(i, 2, 2));
  rendezvous_all(hs);
  auto first = std::async(std::launch::async, [&] { return hs[1]->exit_barrier(20s); });
  CHECK(first.wait_for(300ms) == std::future_status::timeout);  // waits for node 0
  CHECK(hs[0]->exit_barrier(20s));
  CHECK(first.get());
}

TEMPLATE_TEST_CASE("handler contract: interrupt() ends a waiting next_rendezvous",
                   "[contract][etcd]", C10dTcp, C10dMemory, Etcd) {
  TestType b;
  INFO(TestType::kName);
  auto h = b.node(0, 2, 2);
  auto f = rendezvous_outcome<RendezvousInterruptedError>(*h);
  CHECK(f.wait_for(500ms) == std::future_status::timeout);  // waits for the second node
  const auto t0 = std::chrono::steady_clock::now();
  h->interrupt();
  CHECK_THAT(f.get(), Catch::Contains("interrupted"));
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);
}
