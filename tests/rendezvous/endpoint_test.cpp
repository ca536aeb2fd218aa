#include "rendezvous/endpoint.h"

#include <catch2/catch.hpp>

#include "rendezvous/rdzv_conf.h"
#include "rendezvous/rendezvous.h"

using namespace ddprun::rdzv;

TEST_CASE("parse_endpoint handles names / IPv4 / bracketed and bare IPv6", "[endpoint]") {
  auto e = parse_endpoint("node1:1234", 29400, "--rdzv-endpoint");
  CHECK(e.host == "node1");
  CHECK(e.port == 1234);
  CHECK(parse_endpoint("10.1.2.3", 29400, "x").port == 29400);
  e = parse_endpoint("[fe80::1%eth0]:29401", 1, "x");
  CHECK(e.host == "fe80::1%eth0");
  CHECK(e.port == 29401);
  CHECK(e.to_string() == "[fe80::1%eth0]:29401");
  e = parse_endpoint("::1", 7, "x");
  CHECK(e.host == "::1");
  CHECK(e.port == 7);
  CHECK(parse_endpoint("[::1]", 9, "x").port == 9);
}

TEST_CASE("parse_endpoint rejects bad text with a message naming it", "[endpoint]") {
  for (const char* bad : {"", ":29400", "host:", "host:abc", "host:70000", "[::1", "[::1]x",
                          ":::::", "::1:70000", "a b:1", "x/y:1"}) {
    INFO(bad);
    REQUIRE_THROWS_AS(parse_endpoint(bad, 1, "--rdzv-endpoint"), RendezvousError);
    try {
      parse_endpoint(bad, 1, "--rdzv-endpoint");
    } catch (const RendezvousError& err) {
      CHECK(std::string(err.what()).find("--rdzv-endpoint") != std::string::npos);
    }
  }
}

TEST_CASE("host checks: literals / loopback / --local-addr decides", "[endpoint]") {
  CHECK(is_ip_literal("127.0.0.1"));
  CHECK(is_ip_literal("::1"));
  CHECK_FALSE(is_ip_literal("localhost"));
  CHECK(is_loopback_host("127.0.0.3"));
  CHECK(is_loopback_host("localhost"));
  CHECK_FALSE(is_loopback_host("10.0.0.1"));
  CHECK(is_this_host("127.0.0.1", ""));
  CHECK(is_this_host("localhost", ""));
  CHECK(is_this_host("127.0.0.1", "127.0.0.1"));
  CHECK_FALSE(is_this_host("127.0.0.1", "127.0.0.2"));
  CHECK(routed_local_address({"127.0.0.1", 29400}) == "127.0.0.1");
  CHECK(bind_host_for("127.0.0.2") == "127.0.0.2");
  CHECK(bind_host_for("localhost").empty());
}

TEST_CASE("rdzv-conf values: fractional seconds / ints / booleans / errors", "[conf]") {
  ConfMap conf{{"join_timeout", "0.25"}, {"n", "3"}, {"is_host", "Yes"}, {"bad", "x"}};
  CHECK(conf_seconds(conf, "join_timeout", 600).count() == 250);
  CHECK(conf_seconds(conf, "missing", 600).count() == 600000);
  CHECK(conf_int(conf, "n", 1) == 3);
  CHECK(conf_bool(conf, "is_host") == std::optional<bool>(true));
  CHECK_FALSE(conf_bool(conf, "missing").has_value());
  CHECK_THROWS_AS(conf_seconds(conf, "bad", 1), RendezvousError);
  CHECK_THROWS_AS(conf_int(conf, "bad", 1), RendezvousError);
  CHECK_THROWS_AS(conf_bool(conf, "bad"), RendezvousError);
}
