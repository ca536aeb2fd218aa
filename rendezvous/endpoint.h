// endpoint.h: `host[:port]` parsing (IPv6 as `[v6]:port`) and "is this host me?" checks
// for the rendezvous backends. Addresses are used exactly as given: only host_fqdn()
// does reverse DNS. Used by the handlers and the registry. Thread-safety: pure functions
// (the interface queries read the OS each call).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::rdzv {

struct Endpoint {
  std::string host;  // without brackets
  int port = -1;     // -1 = none given

  // "host:port", with brackets around an IPv6 literal; "host" when port < 0.
  std::string to_string() const;
};

// Parses "host", "host:port", "[v6]", "[v6]:port" or a bare IPv6 literal (no port then).
// A missing port becomes `default_port`. Throws RendezvousError naming `what` and the
// text on an empty host, a bad bracket, a port outside 0..65535, several colons that
// are not an IPv6 address (":::::"), or a host with blanks, '/' or brackets.
Endpoint parse_endpoint(std::string_view text, int default_port, std::string_view what);

// True for a numeric IPv4 or IPv6 address (no name resolution).
bool is_ip_literal(const std::string& host);

// "" when `host` is an IP literal or a name that resolves now; else why it does not
// (getaddrinfo's message). Names may start resolving later (DNS of a starting cluster).
std::string resolution_error(const std::string& host);

// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback_host(const std::string& host);

// Addresses of this machine's interfaces (getifaddrs), numeric.
std::vector<std::string> local_interface_addresses();

// The numeric addresses `host` resolves to now (itself, canonical, when numeric); empty
// when it does not resolve.
std::vector<std::string> resolve_addresses(const std::string& host);

// The name of the local interface that holds the numeric address `addr` ("" when none).
std::string interface_of(const std::string& addr);

// This machine's host name (gethostname), "" on failure.
std::string local_hostname();

// socket.getfqdn() of this machine, computed the way Python does (torchrun's host name
// in failure reports and, for c10d and etcd, its workers' MASTER_ADDR): the host name
// resolved, that address reverse-resolved (gethostbyaddr), the first of the canonical
// name and its aliases that holds a '.', else the canonical name; the plain host name
// when a lookup fails.
std::string host_fqdn();

// Whether `host` names this node. When `local_addr` is non-empty only it counts (so that
// several agents on one machine with distinct --local-addr disagree correctly);
// otherwise the host name, every loopback address (is_loopback_host, as torchrun), and
// numeric or resolved addresses that belong to a local interface count.
bool is_this_host(const std::string& host, const std::string& local_addr);

// The local address the kernel would use to reach `ep` (a connected UDP socket's name;
// no packet is sent), or "" when it cannot be determined.
std::string routed_local_address(const Endpoint& ep);

// Address a server advertised as `host` should bind: the literal itself when `host` is
// numeric, else "" (all interfaces), since a name may resolve to ::1 and 127.0.0.1 alike.
std::string bind_host_for(const std::string& host);

// A TCP port that is free right now on `bind_host` ("" = every interface): bound to port
// 0, read back, closed. For a store that another process (worker rank 0) will host; the
// port could be taken in between, as with torchrun up to 2.2. Throws RendezvousError.
std::uint16_t free_tcp_port(const std::string& bind_host);

}  // namespace ddprun::rdzv
