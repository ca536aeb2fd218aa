// --rdzv-conf use_agent_store=0 (what USE_LIBUV=0 selects, for PyTorch built without
// libuv): no agent hosts the workers' store; every node learns one free port on group
// rank 0's address, where worker rank 0 will host it. Real loopback sockets.
#include <arpa/inet.h>

#include <catch2/catch.hpp>
#include <future>

#include "rendezvous/endpoint.h"
#include "rendezvous/registry.h"
#include "tests/rendezvous/rdzv_test_util.h"

using namespace ddprun;
using namespace ddprun::rdzv;

namespace {

// Whether `port` on `host` can be bound now (nobody listens there).
bool bindable(const std::string& host, std::uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

}  // namespace

TEST_CASE("free_tcp_port: a bindable port on every interface or on one address", "[worker_store]") {
  std::uint16_t any = free_tcp_port("");
  CHECK(any != 0);
  CHECK(bindable("127.0.0.1", any));
  std::uint16_t one = free_tcp_port("127.0.0.2");
  CHECK(bindable("127.0.0.2", one));
  CHECK_THROWS_WITH(free_tcp_port("not-an-address"), Catch::Contains("not-an-address"));
}

TEST_CASE("one node, use_agent_store=0: no store, a free port each round", "[worker_store]") {
  RendezvousParams p;
  p.local_world_size = 2;
  p.conf.use_agent_store = false;
  auto h = make_rendezvous_handler(p);
  auto a = h->next_rendezvous();
  CHECK_FALSE(a.use_agent_store);
  CHECK(a.master_addr == "127.0.0.1");
  REQUIRE(a.master_port != 0);
  CHECK(bindable("127.0.0.1", a.master_port));  // nobody (no agent) listens there
  auto b = h->next_rendezvous();
  CHECK(b.round == a.round + 1);
  CHECK_FALSE(b.use_agent_store);

  const test::ReservedPort master_port;
  p.master_port = master_port;  // --master-port is honoured, not bound
  auto fixed = make_rendezvous_handler(p)->next_rendezvous();
  CHECK(fixed.master_port == p.master_port);
  CHECK(bindable("127.0.0.1", fixed.master_port));

  CHECK_THROWS_WITH(parse_rdzv_conf("use_agent_store=maybe"),
                    Catch::Contains("use_agent_store='maybe'"));
}

TEST_CASE("c10d, use_agent_store=0: every node gets group rank 0's address and one port",
          "[worker_store][c10d]") {
  const test::ReservedPort port;
  std::vector<std::unique_ptr<RendezvousHandler>> hs;
  for (int i = 0; i < 3; ++i) {
    auto p = test::node_params("c10d", i, port, 3, 3);
    p.conf.use_agent_store = false;
    hs.push_back(make_rendezvous_handler(p));
  }
  std::vector<std::future<RendezvousInfo>> fs;
  for (auto& h : hs) {
    fs.push_back(std::async(std::launch::async, [&h] { return h->next_rendezvous(); }));
  }
  std::vector<RendezvousInfo> infos;
  for (auto& f : fs) infos.push_back(f.get());
  std::string addr0;
  for (std::size_t i = 0; i < infos.size(); ++i) {
    if (infos[i].group_rank == 0) addr0 = "127.0.0." + std::to_string(i + 1);
  }
  for (const auto& info : infos) {
    CHECK_FALSE(info.use_agent_store);
    CHECK(info.master_addr == addr0);
    CHECK(info.master_port == infos[0].master_port);
  }
  CHECK(bindable(addr0, infos[0].master_port));  // group rank 0 does not listen there
  for (auto& h : hs) h->shutdown();
}
