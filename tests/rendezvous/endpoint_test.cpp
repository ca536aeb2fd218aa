// endpoint.h and rdzv_conf.h: host[:port] parsing and its one-line errors, the "is this
// host me?" checks, and the --rdzv-conf value parsing (seconds, integers, booleans).
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
  // Every loopback address is this machine, though lo lists only 127.0.0.1 (issue 21).
  CHECK(is_this_host("127.0.0.5", ""));
  CHECK(is_this_host("::1", ""));
  CHECK(is_this_host("127.0.0.1", "127.0.0.1"));
  CHECK_FALSE(is_this_host("127.0.0.1", "127.0.0.2"));
  CHECK(routed_local_address({"127.0.0.1", 29400}) == "127.0.0.1");
  CHECK(bind_host_for("127.0.0.2") == "127.0.0.2");
  CHECK(bind_host_for("localhost").empty());
}

TEST_CASE("rdzv-conf values: fractional seconds / ints / booleans / errors", "[conf]") {
  using std::chrono::milliseconds;
  const RdzvConf c = parse_rdzv_conf(
      " join_timeout = 0.25, keep_alive_max_attempt=3,is_host=Yes,job_check=n,wat=x=y, "
      "workers_port=0,timeout=0");
  CHECK(c.join_timeout == milliseconds(250));
  CHECK(c.timeout == milliseconds(0));
  CHECK(c.keep_alive_max_attempt == 3);
  CHECK(c.is_host == true);
  CHECK(c.job_check == false);
  CHECK(c.workers_port == 0);
  CHECK_FALSE(c.read_timeout.has_value());
  CHECK_FALSE(c.use_agent_store.has_value());
  CHECK(c.keys == std::vector<std::string>{"join_timeout", "keep_alive_max_attempt", "is_host",
                                           "job_check", "wat", "workers_port", "timeout"});
  CHECK(parse_rdzv_conf(" ").keys.empty());
  CHECK(parse_rdzv_conf("store_type=tcp").keys == std::vector<std::string>{"store_type"});

  const std::pair<const char*, const char*> bad[] = {
      {"join_timeout=soon", "join_timeout='soon' is not a non-negative number of seconds"},
      {"last_call_timeout=-1", "last_call_timeout='-1'"},
      {"read_timeout=0", "read_timeout='0' must be a positive number of seconds"},
      {"keep_alive_interval=0", "keep_alive_interval='0' must be a positive"},
      {"keep_alive_max_attempt=0", "keep_alive_max_attempt='0' is not an integer in [1, "},
      {"workers_port=65536", "workers_port='65536' is not an integer in [0, 65535]"},
      {"rank=x", "rank='x'"},
      {"is_host=maybe", "is_host='maybe' is not a boolean"},
      {"store_type=file", "store_type='file' is not supported (only tcp)"},
      {"a=1,oops", "malformed pair 'oops' in 'a=1,oops'"},
      {"=1", "malformed pair '=1'"},
      {"a=1,", "malformed pair ''"},
  };
  for (const auto& [text, message] : bad) {
    INFO(text);
    CHECK_THROWS_WITH(parse_rdzv_conf(text), Catch::Contains(message) && !Catch::Contains("\n"));
  }
}
