// LocalRendezvous, the one-node handler: the workers' store it hosts (emptied every
// round, on --master-port and --local-addr when given), closing, and that a one-node job
// makes no rendezvous traffic whatever the backend.
#include "rendezvous/local_rendezvous.h"

#include <catch2/catch.hpp>

#include "rendezvous/endpoint.h"
#include "rendezvous/registry.h"
#include "store/tcp_store_client.h"
#include "tests/rendezvous/rdzv_test_util.h"

using namespace ddprun;
using namespace ddprun::rdzv;

namespace {

std::unique_ptr<store::TcpStore> client(const RendezvousInfo& info) {
  store::TcpStoreOptions o;
  o.host = info.master_addr;
  o.port = info.master_port;
  o.timeout = std::chrono::seconds(5);
  o.connect_timeout = std::chrono::seconds(5);
  o.wait_for_workers = false;
  return std::make_unique<store::TcpStore>(o);
}

}  // namespace

TEST_CASE("one node: a reachable / empty workers' store every round", "[local]") {
  RendezvousParams p;
  p.local_world_size = 3;
  auto h = make_rendezvous_handler(p);
  REQUIRE(dynamic_cast<LocalRendezvous*>(h.get()) != nullptr);
  auto a = h->next_rendezvous();
  CHECK(a.group_rank == 0);
  CHECK(a.group_world_size == 1);
  CHECK(a.rank_base == 0);
  CHECK(a.world_size == 3);
  CHECK(a.use_agent_store);
  CHECK(a.master_addr == "127.0.0.1");
  REQUIRE(a.master_port != 0);
  {
    auto c = client(a);
    c->set("/stale", "1");
    CHECK(c->check({"/stale"}));
  }
  auto b = h->next_rendezvous();
  CHECK(b.round == a.round + 1);
  CHECK(b.master_port == a.master_port);
  CHECK_FALSE(client(b)->check({"/stale"}));
  CHECK(h->exit_barrier(std::chrono::milliseconds(1)));
  CHECK_FALSE(h->needs_new_round());
  CHECK(h->num_nodes_waiting() == 0);
  h->shutdown();
  h->shutdown();  // idempotent
}

TEST_CASE("one node / any backend: no rendezvous traffic / --master-port honoured", "[local]") {
  RendezvousParams p;
  p.backend = Backend::kC10d;
  p.endpoint = "nowhere.invalid:29400";  // never contacted for a single node
  const test::ReservedPort master_port;
  p.master_port = master_port;
  auto h = make_rendezvous_handler(p);
  auto info = h->next_rendezvous();
  CHECK(info.master_port == p.master_port);
  CHECK(client(info)->num_keys() >= 0);

  // A second job on the same --master-port gets a one-line error naming host:port.
  RendezvousParams q = p;
  auto h2 = make_rendezvous_handler(q);
  try {
    h2->next_rendezvous();
    FAIL("expected a bind error");
  } catch (const RendezvousError& e) {
    std::string msg = e.what();
    CHECK(msg.find(":" + std::to_string(*p.master_port)) != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
  }
}

TEST_CASE("one node: --local-addr is what MASTER_ADDR advertises and where it binds", "[local]") {
  RendezvousParams p{};  // value-initialized: GCC 12 at -O3 (unity) warns otherwise
  p.local_addr = "127.0.0.2";
  auto h = make_rendezvous_handler(p);
  auto info = h->next_rendezvous();
  CHECK(info.master_addr == "127.0.0.2");
  CHECK(client(info)->num_keys() == 0);
}

TEST_CASE(
    "one node, c10d (torchrun's default without --master-port, --standalone): MASTER_ADDR "
    "is the host's getfqdn() as torchrun's, and the store answers on IPv4 and IPv6 loopback",
    "[local]") {
  RendezvousParams p{};
  p.backend = Backend::kC10d;
  p.endpoint = "localhost:0";
  auto h = make_rendezvous_handler(p);
  auto info = h->next_rendezvous();
  const std::string fqdn = host_fqdn();
  INFO("getfqdn() " << fqdn << " resolves to " << resolve_addresses(fqdn).size() << " address(es)");
  // 127.0.0.1 only where the name does not lead back to this machine.
  CHECK((info.master_addr == fqdn || info.master_addr == "127.0.0.1"));
  CHECK(client(info)->num_keys() == 0);
  // "localhost" (this machine's getfqdn() when its name is an alias of 127.0.0.1) may
  // resolve to ::1 first: the store listens there too.
  for (const char* host : {"127.0.0.1", "::1", "localhost"}) {
    INFO(host);
    RendezvousInfo by = info;
    by.master_addr = host;
    if (std::string(host) == "::1" && resolve_addresses("::1").empty()) continue;
    CHECK(client(by)->num_keys() == 0);
  }
  // Static keeps torchrun's static MASTER_ADDR: --master-addr, else 127.0.0.1.
  RendezvousParams s{};
  CHECK(make_rendezvous_handler(s)->next_rendezvous().master_addr == "127.0.0.1");
}

TEST_CASE("closed single-node rendezvous refuses a new round", "[local]") {
  RendezvousParams p;
  auto h = make_rendezvous_handler(p);
  h->next_rendezvous();
  CHECK_FALSE(h->is_closed());
  h->set_closed();
  CHECK(h->is_closed());
  CHECK_THROWS_AS(h->next_rendezvous(), RendezvousClosedError);
}
