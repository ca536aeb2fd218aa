#include "rendezvous/local_rendezvous.h"

#include <catch2/catch.hpp>

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
  RendezvousParams p;
  p.local_addr = "127.0.0.2";
  auto h = make_rendezvous_handler(p);
  auto info = h->next_rendezvous();
  CHECK(info.master_addr == "127.0.0.2");
  CHECK(client(info)->num_keys() == 0);
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

TEST_CASE("backends: static, c10d, etcd-v3 - one-line errors name them", "[registry]") {
  CHECK(parse_backend("static") == Backend::kStatic);
  CHECK(parse_backend("c10d") == Backend::kC10d);
  CHECK(backend_name(Backend::kC10d) == "c10d");
  CHECK(parse_backend("etcd-v3") == Backend::kEtcdV3);
  CHECK(backend_name(Backend::kEtcdV3) == "etcd-v3");
  // torchrun's names of its v2 backend: etcd-v3 here (etcd 3.4 serves v2 only when told).
  CHECK(parse_backend("etcd") == Backend::kEtcdV3);
  CHECK(parse_backend("etcd-v2") == Backend::kEtcdV3);
  CHECK(backend_alias("etcd") == "etcd");
  CHECK(backend_alias("etcd-v2") == "etcd-v2");
  CHECK(backend_alias("etcd-v3").empty());
  CHECK(backend_alias("c10d").empty());
  CHECK_THROWS_WITH(parse_backend("zookeeper"),
                    Catch::Contains("supported: static, c10d, etcd-v3"));
}

TEST_CASE("registry: etcd-v3's endpoints, prefix and TLS files are checked at once",
          "[registry][etcd]") {
  RendezvousParams p;
  p.backend = Backend::kEtcdV3;
  p.min_nodes = p.max_nodes = 2;
  CHECK_THROWS_WITH(make_rendezvous_handler(p), Catch::Contains("needs --rdzv-endpoint"));
  p.endpoint = "http://127.0.0.1:2379,127.0.0.1:2380";
  CHECK(make_rendezvous_handler(p)->backend_name() == "etcd-v3");
  p.endpoint = "http://127.0.0.1:2379,ftp://x";
  CHECK_THROWS_WITH(make_rendezvous_handler(p), Catch::Contains("'ftp://x'"));
  p.endpoint = "127.0.0.1:2379";
  p.conf = parse_rdzv_conf("cacert=/nonexistent/ca.pem");
  CHECK_THROWS_WITH(make_rendezvous_handler(p), Catch::Contains("cacert='/nonexistent/ca.pem'"));
  CHECK_THROWS_WITH(parse_rdzv_conf("etcd_prefix=nope"), Catch::Contains("etcd_prefix='nope'"));
  CHECK_THROWS_WITH(parse_rdzv_conf("prefix=/a b"), Catch::Contains("prefix='/a b'"));
  CHECK(parse_rdzv_conf("prefix=/x/y/").etcd_prefix == "/x/y");
  CHECK(parse_rdzv_conf("prefix=/a-b_c.d:1").etcd_prefix == "/a-b_c.d:1");
  for (const char* bad : {"prefix=/", "prefix=//", "prefix=/a//b", "prefix=/\xc3\xa9t\xc3\xa9"}) {
    CHECK_THROWS_WITH(parse_rdzv_conf(bad), Catch::Contains("is not an etcd key prefix"));
  }
  CHECK_THROWS_WITH(parse_rdzv_conf("prefix=/a\x01"), Catch::Contains("prefix='/a\\x01'"));
  // One node: no rendezvous traffic, whatever the backend (the endpoints still checked).
  p.conf = {};
  p.min_nodes = p.max_nodes = 1;
  CHECK(make_rendezvous_handler(p)->backend_name() == "etcd-v3");
}

TEST_CASE("registry: the parameters' combinations are checked, whatever the node count",
          "[registry]") {
  RendezvousParams p;
  p.min_nodes = 2;
  p.max_nodes = 2;
  p.backend = Backend::kC10d;
  CHECK_THROWS_WITH(make_rendezvous_handler(p), Catch::Contains("--rdzv-endpoint"));
  p.backend = Backend::kStatic;
  for (int nodes : {1, 2}) {
    INFO(nodes << " node(s)");
    p.min_nodes = p.max_nodes = nodes;
    p.node_rank = nodes;
    CHECK_THROWS_WITH(make_rendezvous_handler(p), Catch::Contains("out of range"));
    p.node_rank.reset();
    p.conf.rank = nodes;  // --rdzv-conf rank, static's spelling of --node-rank
    CHECK_THROWS_WITH(make_rendezvous_handler(p),
                      Catch::Contains("--node-rank " + std::to_string(nodes)));
    p.conf.rank.reset();
  }
  p.master_port = 0;  // the other nodes must know the port
  CHECK_THROWS_WITH(make_rendezvous_handler(p), Catch::Contains("needs a fixed port"));
}

TEST_CASE("registry: malformed endpoints fail at once, any node count", "[registry]") {
  for (int nodes : {1, 2}) {
    RendezvousParams p;
    p.backend = Backend::kC10d;
    p.min_nodes = p.max_nodes = nodes;
    for (const char* bad : {":::::", "::1:70000", "node 1:29400", "host:65536"}) {
      INFO(nodes << " nodes, " << bad);
      p.endpoint = bad;
      CHECK_THROWS_WITH(make_rendezvous_handler(p),
                        Catch::Contains(std::string("--rdzv-endpoint '") + bad + "' is invalid"));
    }
  }
}
