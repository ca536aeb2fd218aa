// make_rendezvous_handler() and parse_backend() (registry.h): backend names and aliases,
// and the one-line errors for parameters that do not combine (endpoints, node ranks,
// ports, etcd-v3's endpoints, prefix and TLS files), whatever the node count.
#include "rendezvous/registry.h"

#include <catch2/catch.hpp>

using namespace ddprun;
using namespace ddprun::rdzv;

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
  // torchrun's etcd-v2 TLS keys are the same files (issue 21).
  const RdzvConf tls = parse_rdzv_conf(
      "protocol=https,ca_cert=/etc/ca.pem,ssl_cert=/etc/c.pem,ssl_cert_key=/etc/k.pem");
  CHECK(tls.cacert == "/etc/ca.pem");
  CHECK(tls.cert == "/etc/c.pem");
  CHECK(tls.key == "/etc/k.pem");
  CHECK(tls.etcd_protocol == "https");
  CHECK_THROWS_WITH(parse_rdzv_conf("protocol=ftp"), Catch::Contains("protocol='ftp'"));
  p.conf = parse_rdzv_conf("ca_cert=/nonexistent/ca.pem");
  CHECK_THROWS_WITH(make_rendezvous_handler(p), Catch::Contains("'/nonexistent/ca.pem'"));
  p.conf = parse_rdzv_conf("ssl_cert=/dev/null");  // a certificate without its key
  CHECK_THROWS_WITH(make_rendezvous_handler(p), Catch::Contains("cert and key go together"));
  p.conf = parse_rdzv_conf("protocol=https");  // TLS with the system's CAs: accepted
  CHECK(make_rendezvous_handler(p)->backend_name() == "etcd-v3");
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
