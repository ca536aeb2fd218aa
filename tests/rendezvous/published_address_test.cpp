// Table tests of published_address.h: the address an agent without --local-addr publishes
// (the route's source address, or the endpoint's name on a machine where that name is
// loopback), and the refusal to give remote workers a loopback MASTER_ADDR.
#include "rendezvous/published_address.h"

#include <catch2/catch.hpp>

using namespace ddprun::rdzv;

TEST_CASE("published address: the route's source, never the host name", "[address]") {
  struct Row {
    const char* what;
    std::string endpoint_host;
    bool this_machine;
    std::string routed;
    std::string want;
  };
  const std::vector<Row> rows{
      {"a peer: its source address towards the endpoint", "10.0.0.1", false, "10.0.0.2",
       "10.0.0.2"},
      {"the endpoint's machine, endpoint given as its address", "10.0.0.1", true, "10.0.0.1",
       "10.0.0.1"},
      {"the endpoint's machine, its name resolves to a real address", "n1", true, "10.0.0.1",
       "10.0.0.1"},
      {"Debian's 127.0.1.1 <hostname> on the endpoint's machine: the name the peers dial", "n1",
       true, "127.0.0.1", "n1"},
      {"same with the route's source 127.0.1.1", "n1.example", true, "127.0.1.1", "n1.example"},
      {"a name that is loopback on another machine: refused later if it matters", "n1", false,
       "127.0.0.1", "127.0.0.1"},
      {"one machine: the endpoint is localhost", "localhost", true, "127.0.0.1", "127.0.0.1"},
      {"one machine: the endpoint is a loopback literal", "127.0.0.1", true, "127.0.0.1",
       "127.0.0.1"},
      {"one machine, IPv6 loopback", "::1", true, "::1", "::1"},
      {"the endpoint does not resolve yet: unknown", "n1", false, "", ""},
  };
  for (const auto& row : rows) {
    INFO(row.what);
    CHECK(choose_published_address(row.endpoint_host, row.this_machine, row.routed) == row.want);
  }
}

TEST_CASE("published address: a real route on loopback", "[address]") {
  CHECK(find_published_address({"127.0.0.1", 29400}, true, "fallback") == "127.0.0.1");
  // The kernel's source address, not the destination: 127.0.0.3 is reached from 127.0.0.1.
  CHECK(find_published_address({"127.0.0.3", 29400}, false, "fallback") == "127.0.0.1");
  CHECK(interface_of("127.0.0.1") == "lo");
  CHECK(interface_of("192.0.2.1").empty());  // TEST-NET-1: no interface here has it
  CHECK(interface_of("not an address").empty());
}

namespace {

NodeDesc member(int slot, const std::string& addr, const std::string& host = "") {
  NodeDesc d;
  d.slot = slot;
  d.addr = addr;
  d.host = host;
  d.pid = 100 + slot;
  return d;
}

}  // namespace

TEST_CASE("loopback MASTER_ADDR: refused when a member is elsewhere", "[address]") {
  const std::vector<NodeDesc> mixed{member(0, "10.0.0.2", "n2"), member(1, "127.0.1.1", "n1"),
                                    member(2, "10.0.0.3", "n3")};
  const std::vector<int> ranks{1, 0, 2};
  CHECK(loopback_master_error("127.0.1.1", mixed, ranks) ==
        "group rank 0 (127.0.1.1 (n1) pid 101) would give the workers the loopback address "
        "127.0.1.1 as MASTER_ADDR, which node 10.0.0.2 (n2) pid 100 cannot reach; start ddprun "
        "on n1 with --local-addr set to its address on the other nodes' network (its host name "
        "resolves to loopback there, or it was given a loopback --local-addr)");
  // The same members in another join (slot) order name the same node: the one elsewhere
  // with the lowest group rank (every node must print the same line).
  const std::vector<NodeDesc> reordered{member(0, "10.0.0.3", "n3"), member(1, "127.0.1.1", "n1"),
                                        member(2, "10.0.0.2", "n2")};
  CHECK_THAT(loopback_master_error("127.0.1.1", reordered, {2, 0, 1}),
             Catch::Contains("which node 10.0.0.2 (n2) pid 102 cannot reach"));
  CHECK_THAT(loopback_master_error("localhost", mixed, ranks), Catch::Contains("--local-addr"));
  CHECK_THAT(loopback_master_error("::1", mixed, ranks), Catch::Contains("--local-addr"));
  // Reachable addresses, names included (the peers resolve those themselves).
  CHECK(loopback_master_error("10.0.0.2", mixed, ranks).empty());
  CHECK(loopback_master_error("n1", mixed, ranks).empty());
  // Agents of one machine on 127.0.0.x (tests/multinode): nothing to refuse.
  const std::vector<NodeDesc> local{member(0, "127.0.0.1"), member(1, "127.0.0.2"),
                                    member(2, "127.0.0.3")};
  CHECK(loopback_master_error("127.0.0.1", local, {0, 1, 2}).empty());
}

TEST_CASE("gloo's interface: only where gloo would bind to loopback", "[address]") {
  const std::vector<NodeDesc> machines{member(0, "10.0.0.1"), member(1, "10.0.0.2")};
  const std::vector<NodeDesc> one_machine{member(0, "127.0.0.1"), member(1, "127.0.0.2")};
  const std::vector<std::string> local{"127.0.0.1", "10.0.0.1"};
  struct Row {
    const char* what;
    std::vector<std::string> hostname_addrs;
    const std::vector<NodeDesc>* descs;
    bool needed;
  };
  const std::vector<Row> rows{
      {"the host name resolves nowhere", {}, &machines, true},
      {"Debian's 127.0.1.1 <hostname>", {"127.0.1.1"}, &machines, true},
      {"it resolves to this machine's address", {"10.0.0.1"}, &machines, false},
      {"loopback first, then this machine's address", {"127.0.1.1", "10.0.0.1"}, &machines, false},
      {"it resolves to another machine's address (stale DNS)", {"10.0.0.9"}, &machines, true},
      {"one machine: loopback is right", {}, &one_machine, false},
  };
  for (const auto& row : rows) {
    INFO(row.what);
    CHECK(gloo_needs_interface(row.hostname_addrs, local, *row.descs) == row.needed);
  }
}
