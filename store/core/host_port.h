// host_port.h: "host:port" text, parsed and formatted in one place. An IPv6 literal takes
// brackets ("[::1]:29500"); a bare IPv6 literal ("::1": more than one ':') has no port.
// Part of ddprun_store_core (pure). Used by the store client and server (messages),
// ddprun-store's --addr, ddprun-loadgen's --addr, and rendezvous/endpoint, which adds
// default ports and its own error wording. Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ddprun::store {

// Splits "host", "host:port", "[v6]", "[v6]:port" or a bare IPv6 literal into `host`
// (without brackets) and `port` (the text after the ':', empty when none was given; a
// view into `text`). Returns "" on success, else the reason: "missing ']'", "unexpected
// text after ']'", "empty port" or "empty host".
std::string split_host_port(std::string_view text, std::string& host, std::string_view& port);

// The port number `text` spells (decimal digits only) when it lies in 0..65535.
std::optional<int> parse_port(std::string_view text);

// "host:port", with brackets around a host that contains ':' (IPv6); without a port
// (just the host, bracketed if IPv6) when `port` < 0.
std::string format_host_port(std::string_view host, int port);

}  // namespace ddprun::store
