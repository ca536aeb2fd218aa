// The RendezvousHandler contract, one suite over every multi-node handler: c10d on a real
// TCP store (the registry's handler), c10d's StoreRendezvous over a MemoryStore, and
// etcd-v3 against a real etcd member started per case (etcd_cluster.h). MIN:MAX with
// last call, a late joiner waits and its round follows, a leaving node is noticed, a
// closed rendezvous rejects, the exit barrier, interrupt() ends a wait, and what a formed
// round gives its members (layout_round(): rank bases, the loopback MASTER_ADDR refusal,
// GLOO_SOCKET_IFNAME). Backend-specific
// stories stay in c10d/store_rendezvous_test.cpp and etcd/etcd_rendezvous_test.cpp.
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "rendezvous/c10d/store_rendezvous.h"
#include "rendezvous/endpoint.h"
#include "rendezvous/etcd/etcd_rendezvous.h"
#include "rendezvous/published_address.h"
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

// How a node of a case differs from the default (a loopback address, one worker).
struct Shape {
  std::string addr;  // the address it publishes ("" = the default)
  int nproc = 1;
};

// Tiny intervals keep the cases fast: last call 300 ms. No case waits for a silent
// member to be counted gone (a node leaves by shutdown()), so that takes 3 s (etcd: its
// lease's TTL, 6 s): a node starved of CPU for a second, as TSan's beside 256 ASan agents
// in ctest was, is not taken for dead while the round forms.
struct C10dTcp {
  static constexpr const char* kName = "c10d on TCP";
  test::ReservedPort port;
  std::unique_ptr<RendezvousHandler> node(int i, int min_nodes, int max_nodes,
                                          const Shape& shape = {}) {
    RendezvousParams p = test::node_params("c10d", i, port, min_nodes, max_nodes, shape.nproc);
    p.conf.keep_alive_max_attempt = 30;
    if (!shape.addr.empty()) {
      p.local_addr = shape.addr;
      p.conf.is_host = i == 0;  // node 0 hosts the rendezvous store, whatever its address
    }
    return make_rendezvous_handler(p);
  }
};

std::string addr_of(int i, const Shape& shape) {
  (void)i;
  return shape.addr.empty() ? "127.0.0.1" : shape.addr;
}

struct C10dMemory {
  static constexpr const char* kName = "c10d on a MemoryStore";
  std::shared_ptr<store::MemoryStore> mem = std::make_shared<store::MemoryStore>();
  std::unique_ptr<RendezvousHandler> node(int i, int min_nodes, int max_nodes,
                                          const Shape& shape = {}) {
    StoreRendezvous::Config c;
    c.endpoint = "memory";
    c.round = test::loopback_round("contract", i, min_nodes, max_nodes, addr_of(i, shape));
    c.round.local_world_size = shape.nproc;
    c.round.join_timeout = 20s;
    c.round.last_call_timeout = 300ms;
    c.round.keep_alive_interval = 100ms;
    c.round.keep_alive_max_attempt = 30;
    c.poll_slice = 20ms;
    return std::make_unique<StoreRendezvous>(c, test::memory_connect(mem, "contract"));
  }
};

struct Etcd {
  static constexpr const char* kName = "etcd-v3";
  test::EtcdCluster cluster{1};
  std::unique_ptr<RendezvousHandler> node(int i, int min_nodes, int max_nodes,
                                          const Shape& shape = {}) {
    EtcdRendezvous::Config c;
    c.etcd.endpoints = cluster.urls();
    c.round = test::loopback_round("contract", i, min_nodes, max_nodes, addr_of(i, shape));
    c.round.local_world_size = shape.nproc;
    c.round.join_timeout = 20s;
    c.round.last_call_timeout = 300ms;
    c.round.keep_alive_interval = 1s;
    // A 6 s lease: its fence (TTL - 1.5 s) leaves a busy machine (TSan beside ctest) time
    // for a keepalive; with 2 s the fence was 0.5 s, which such a machine missed, and a
    // 3 s lease expired once while its node waited in last call.
    c.round.keep_alive_max_attempt = 6;
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

// This machine's first non-loopback IPv4 address ("" = none).
std::string this_machines_address() {
  for (const std::string& a : local_interface_addresses()) {
    if (!is_loopback_host(a) && a.find(':') == std::string::npos) return a;
  }
  return {};
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

TEMPLATE_TEST_CASE("handler contract: a node left out by the pre-flight check does not rejoin",
                   "[contract][etcd]", C10dTcp, C10dMemory, Etcd) {
  TestType b;
  INFO(TestType::kName);
  Handlers hs;
  // Node 2 on an address of its own (the others share 127.0.0.1).
  const Shape own{.addr = "127.0.0.3"};
  for (int i = 0; i < 3; ++i) hs.push_back(i == 2 ? b.node(i, 2, 3, own) : b.node(i, 2, 3));
  const std::vector<RendezvousInfo> infos = rendezvous_all(hs);
  const std::string left_out = infos[2].node_address;
  REQUIRE(left_out == "127.0.0.3");
  hs[0]->leave_out(left_out, "import torch: ModuleNotFoundError");
  hs[2]->shutdown();
  // The same node started again: refused at its first join, naming why.
  auto again = b.node(2, 2, 3, own);
  CHECK_THROWS_WITH(again->next_rendezvous(),
                    Catch::Contains("(" + left_out +
                                    ") was left out of this job by the "
                                    "pre-flight check (import torch: ModuleNotFoundError)"));
  // The others go on, and another node may still join.
  hs.pop_back();
  hs.push_back(b.node(3, 2, 3));
  check_round(rendezvous_all(hs), 3);
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

TEMPLATE_TEST_CASE("handler contract: rank bases and world size follow nproc by group rank",
                   "[contract][etcd][layout]", C10dTcp, C10dMemory, Etcd) {
  TestType b;
  INFO(TestType::kName);
  Handlers hs;
  const std::vector<int> nproc{2, 3, 1};
  for (int i = 0; i < 3; ++i)
    hs.push_back(b.node(i, 3, 3, {"", nproc[static_cast<std::size_t>(i)]}));
  const auto infos = rendezvous_all(hs);
  std::vector<int> by_rank(3, 0);  // nproc by group rank
  for (std::size_t i = 0; i < infos.size(); ++i) {
    by_rank.at(static_cast<std::size_t>(infos[i].group_rank)) = nproc[i];
  }
  for (const auto& info : infos) {
    int base = 0;
    for (int g = 0; g < info.group_rank; ++g) base += by_rank[static_cast<std::size_t>(g)];
    CHECK(info.rank_base == base);
    CHECK(info.world_size == 6);
    CHECK(info.group_world_size == 3);
  }
}

TEMPLATE_TEST_CASE("handler contract: the job board names each node by its group rank",
                   "[contract][etcd][layout]", C10dTcp, C10dMemory, Etcd) {
  TestType b;
  INFO(TestType::kName);
  // Nodes join in the order 0, 2, 1 while group ranks follow the addresses (0, 1, 2): a
  // board that numbered nodes by their order of joining (the c10d slot, the etcd member
  // index) would swap nodes 1 and 2 (the job-wide judges' "node 0" then is not group rank
  // 0, which the start-up timeline's test met).
  Handlers hs;
  for (int i : {0, 2, 1}) hs.push_back(b.node(i, 3, 3, {"127.0.0." + std::to_string(2 + i)}));
  std::vector<std::future<RendezvousInfo>> fs;
  for (auto& h : hs) {
    fs.push_back(std::async(std::launch::async, [&h] { return h->next_rendezvous(); }));
    std::this_thread::sleep_for(150ms);  // the joining order (a race lost only weakens it)
  }
  std::vector<RendezvousInfo> infos;
  for (auto& f : fs) infos.push_back(f.get());
  check_round(infos, 3);
  for (std::size_t i = 0; i < hs.size(); ++i) {
    rdzv::JobBoard* board = hs[i]->job_board();
    REQUIRE(board != nullptr);
    CHECK(board->node() == infos[i].group_rank);
    CHECK(board->nodes() == 3);
  }
  CHECK(infos[1].group_rank == 2);  // node 2, by its address
}

TEMPLATE_TEST_CASE("handler contract: a loopback MASTER_ADDR for a member elsewhere is refused",
                   "[contract][etcd][layout]", C10dTcp, C10dMemory, Etcd) {
  TestType b;
  INFO(TestType::kName);
  Handlers hs;
  // Node 0 (group rank 0: it hosts the rendezvous store, and 127.x sorts first) publishes
  // a loopback address; node 1 one on another machine (TEST-NET-3, never dialled).
  hs.push_back(b.node(0, 2, 2, {"127.0.0.1"}));
  hs.push_back(b.node(1, 2, 2, {"203.0.113.9"}));
  std::vector<std::future<std::string>> outcomes;
  for (auto& h : hs) outcomes.push_back(rendezvous_outcome<RendezvousStateError>(*h));
  for (auto& f : outcomes) {
    CHECK_THAT(f.get(), Catch::Contains("would give the workers the loopback address 127.0.0.1 "
                                        "as MASTER_ADDR, which node 203.0.113.9") &&
                            Catch::Contains("--local-addr"));
  }
}

TEMPLATE_TEST_CASE("handler contract: the workers get GLOO_SOCKET_IFNAME where gloo needs it",
                   "[contract][etcd][layout]", C10dTcp, C10dMemory, Etcd) {
  TestType b;
  INFO(TestType::kName);
  // Two nodes at this machine's own non-loopback address: a round "spanning machines"
  // whose addresses route. Where this machine's host name gives gloo no usable address
  // (this CI machine: `vm` resolves to 127.0.0.1), each member's workers get the
  // interface of that address.
  const std::string addr = this_machines_address();
  std::string why;
  const std::string want = addr.empty() ? "" : gloo_interface({addr}, why);
  if (want.empty()) {
    WARN(
        "skipped: no non-loopback address, GLOO_SOCKET_IFNAME set, or the host name "
        "resolves to an address of this machine");
    return;
  }
  Handlers hs;
  for (int i = 0; i < 2; ++i) hs.push_back(b.node(i, 2, 2, {addr}));
  for (const auto& info : rendezvous_all(hs)) {
    CHECK(info.gloo_socket_ifname == want);
    CHECK(info.master_addr == addr);
  }
}
