// host_port: the one parser and formatter of "host:port" text (store/core/host_port.h), table
// by table. rendezvous/endpoint's tests cover the default ports and error wording on top.
#include "store/core/host_port.h"

#include <catch2/catch.hpp>
#include <string>
#include <string_view>

using namespace ddprun::store;

namespace {

struct Split {
  std::string error;
  std::string host;
  std::string port;
};

Split split(std::string_view text) {
  Split s;
  std::string_view port;
  s.error = split_host_port(text, s.host, port);
  s.port = std::string(port);
  return s;
}

}  // namespace

TEST_CASE("split_host_port: names, IPv4, bracketed and bare IPv6", "[host_port]") {
  const struct {
    const char* text;
    const char* host;
    const char* port;
  } ok[] = {
      {"node1", "node1", ""},
      {"node1:29500", "node1", "29500"},
      {"10.0.0.1:1", "10.0.0.1", "1"},
      {"[::1]", "::1", ""},
      {"[::1]:29500", "::1", "29500"},
      {"::1", "::1", ""},
      {"fe80::1:29500", "fe80::1:29500", ""},  // bare IPv6: the last group is not a port
      {"h:x", "h", "x"},                       // the port's text is parse_port's to judge
  };
  for (const auto& c : ok) {
    INFO(c.text);
    const Split s = split(c.text);
    CHECK(s.error.empty());
    CHECK(s.host == c.host);
    CHECK(s.port == c.port);
  }
  const struct {
    const char* text;
    const char* error;
  } bad[] = {
      {"", "empty host"},
      {":29500", "empty host"},
      {"h:", "empty port"},
      {"[::1", "missing ']'"},
      {"[::1]x", "unexpected text after ']'"},
      {"[::1]:", "empty port"},
      {"[]:1", "empty host"},
  };
  for (const auto& c : bad) {
    INFO(c.text);
    CHECK(split(c.text).error == c.error);
  }
}

TEST_CASE("parse_port: decimal 0..65535 only", "[host_port]") {
  CHECK(parse_port("0") == 0);
  CHECK(parse_port("29500") == 29500);
  CHECK(parse_port("65535") == 65535);
  for (const char* text : {"", "65536", "-1", "+1", "1x", " 1", "0x10", "99999999999"}) {
    INFO(text);
    CHECK_FALSE(parse_port(text).has_value());
  }
}

TEST_CASE("format_host_port: brackets around IPv6, no port when negative", "[host_port]") {
  CHECK(format_host_port("node1", 29500) == "node1:29500");
  CHECK(format_host_port("127.0.0.1", 0) == "127.0.0.1:0");
  CHECK(format_host_port("::1", 29500) == "[::1]:29500");
  CHECK(format_host_port("::1", -1) == "[::1]");
  CHECK(format_host_port("node1", -1) == "node1");
  // What format writes, split reads back.
  for (const char* host : {"node1", "10.0.0.1", "::1", "fe80::1"}) {
    const Split s = split(format_host_port(host, 7));
    CHECK(s.error.empty());
    CHECK(s.host == host);
    CHECK(s.port == "7");
  }
}
