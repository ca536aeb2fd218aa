// endpoint.cpp: host[:port] parsing, "is this host me?", name resolution, the routed
// source address, bind hosts and free ports (endpoint.h).
#include "rendezvous/endpoint.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "base/sys_error.h"
#include "rendezvous/rendezvous.h"
#include "store/core/host_port.h"

namespace ddprun::rdzv {
namespace {

std::string numeric_name(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  } else if (sa->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  }
  return buf;
}

// Canonical numeric form, so "::0001" and "::1" compare equal; "" if not numeric.
std::string canonical(const std::string& host) {
  in_addr a4{};
  in6_addr a6{};
  char buf[INET6_ADDRSTRLEN] = {};
  if (inet_pton(AF_INET, host.c_str(), &a4) == 1) {
    inet_ntop(AF_INET, &a4, buf, sizeof buf);
    return buf;
  }
  std::string h = host.substr(0, host.find('%'));  // drop an IPv6 scope id
  if (inet_pton(AF_INET6, h.c_str(), &a6) == 1) {
    inet_ntop(AF_INET6, &a6, buf, sizeof buf);
    return buf;
  }
  return {};
}

std::vector<std::string> resolve(const std::string& host) {
  std::vector<std::string> out;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return out;
  for (addrinfo* p = res; p != nullptr; p = p->ai_next) out.push_back(numeric_name(p->ai_addr));
  freeaddrinfo(res);
  return out;
}

}  // namespace

std::string Endpoint::to_string() const { return store::format_host_port(host, port); }

Endpoint parse_endpoint(std::string_view text, int default_port, std::string_view what) {
  auto fail = [&](std::string_view why) -> Endpoint {
    throw RendezvousError(std::string(what) + " '" + std::string(text) + "' is invalid: " +
                          std::string(why) + " (expected host[:port] or [ipv6]:port)");
  };
  Endpoint ep;
  std::string_view port_text;
  if (const std::string why = store::split_host_port(text, ep.host, port_text); !why.empty()) {
    return fail(why);
  }
  if (std::count(text.begin(), text.end(), ':') > 1 && text.front() != '[' &&
      !is_ip_literal(ep.host)) {
    return fail("neither host:port nor an IPv6 address");
  }
  if (ep.host.find_first_of(" \t\r\n/[]") != std::string::npos) {
    return fail("the host contains a character no host name or address has");
  }
  ep.port = default_port;
  if (!port_text.empty()) {
    const auto port = store::parse_port(port_text);
    if (!port) return fail("port '" + std::string(port_text) + "' is not a number in 0..65535");
    ep.port = *port;
  }
  return ep;
}

bool is_ip_literal(const std::string& host) { return !canonical(host).empty(); }

std::string resolution_error(const std::string& host) {
  if (is_ip_literal(host)) return {};
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc == 0) {
    freeaddrinfo(res);
    return {};
  }
  return gai_strerror(rc);
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost") return true;
  std::string c = canonical(host);
  return c == "::1" || c.rfind("127.", 0) == 0;
}

std::vector<std::string> local_interface_addresses() {
  std::vector<std::string> out;
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return out;
  for (ifaddrs* p = ifs; p != nullptr; p = p->ifa_next) {
    if (p->ifa_addr == nullptr) continue;
    if (p->ifa_addr->sa_family != AF_INET && p->ifa_addr->sa_family != AF_INET6) continue;
    out.push_back(numeric_name(p->ifa_addr));
  }
  freeifaddrs(ifs);
  return out;
}

std::vector<std::string> resolve_addresses(const std::string& host) {
  return is_ip_literal(host) ? std::vector<std::string>{canonical(host)} : resolve(host);
}

std::string interface_of(const std::string& addr) {
  const std::string want = canonical(addr);
  std::string out;
  ifaddrs* ifs = nullptr;
  if (want.empty() || getifaddrs(&ifs) != 0) return out;
  for (ifaddrs* p = ifs; p != nullptr && out.empty(); p = p->ifa_next) {
    if (p->ifa_addr == nullptr || p->ifa_name == nullptr) continue;
    if (p->ifa_addr->sa_family != AF_INET && p->ifa_addr->sa_family != AF_INET6) continue;
    if (numeric_name(p->ifa_addr) == want) out = p->ifa_name;
  }
  freeifaddrs(ifs);
  return out;
}

std::string local_hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return {};
  return buf;
}

std::string host_fqdn() {
  // Python's socket.getfqdn(): resolve the host name to an address, reverse-resolve that
  // (gethostbyaddr), and take the first of the canonical name and its aliases that holds
  // a '.', else the canonical name; the plain host name if a lookup fails.
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  addrinfo* res = nullptr;
  if (::getaddrinfo(name, nullptr, &hints, &res) != 0 || res == nullptr) return name;
  std::string out = name;
  hostent he{};
  hostent* result = nullptr;
  char buf[8192];
  int err = 0;
  const void* addr = nullptr;
  socklen_t len = 0;
  if (res->ai_family == AF_INET) {
    addr = &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
    len = sizeof(in_addr);
  } else if (res->ai_family == AF_INET6) {
    addr = &reinterpret_cast<sockaddr_in6*>(res->ai_addr)->sin6_addr;
    len = sizeof(in6_addr);
  }
  if (addr &&
      ::gethostbyaddr_r(addr, len, res->ai_family, &he, buf, sizeof buf, &result, &err) == 0 &&
      result && result->h_name) {
    out = result->h_name;
    std::vector<std::string> names = {result->h_name};
    for (char** a = result->h_aliases; a && *a; ++a) names.emplace_back(*a);
    for (const auto& n : names) {
      if (n.find('.') != std::string::npos) {
        out = n;
        break;
      }
    }
  }
  ::freeaddrinfo(res);
  return out;
}

bool is_this_host(const std::string& host, const std::string& local_addr) {
  if (!local_addr.empty()) {
    if (host == local_addr) return true;
    auto want = resolve_addresses(local_addr);
    auto have = resolve_addresses(host);
    for (const auto& a : have) {
      if (std::find(want.begin(), want.end(), a) != want.end()) return true;
    }
    return false;
  }
  // As torchrun: every loopback address is this machine (lo holds all of 127.0.0.0/8,
  // but getifaddrs lists only 127.0.0.1).
  if (is_loopback_host(host)) return true;
  std::string hn = local_hostname();
  if (!hn.empty() && (host == hn || host.rfind(hn + ".", 0) == 0)) return true;
  auto mine = local_interface_addresses();
  auto have = resolve_addresses(host);
  for (const auto& a : have) {
    if (std::find(mine.begin(), mine.end(), a) != mine.end()) return true;
  }
  return false;
}

std::string routed_local_address(const Endpoint& ep) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port = std::to_string(ep.port > 0 ? ep.port : 9);
  if (getaddrinfo(ep.host.c_str(), port.c_str(), &hints, &res) != 0) return {};
  std::string out;
  for (addrinfo* p = res; p != nullptr && out.empty(); p = p->ai_next) {
    int fd = socket(p->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    // A UDP connect only picks a route and a source address; nothing goes on the wire.
    if (connect(fd, p->ai_addr, p->ai_addrlen) == 0) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
        out = numeric_name(reinterpret_cast<sockaddr*>(&ss));
      }
    }
    close(fd);
  }
  freeaddrinfo(res);
  return out;
}

std::string bind_host_for(const std::string& host) {
  return is_ip_literal(host) ? host : std::string();
}

std::uint16_t free_tcp_port(const std::string& bind_host) {
  // Every interface: IPv6 dual-stack when the host has IPv6, else IPv4.
  sockaddr_storage ss{};
  socklen_t len = sizeof(sockaddr_in);
  int fd = -1;
  if (bind_host.empty() || bind_host.find(':') != std::string::npos) {
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
    a6->sin6_family = AF_INET6;
    a6->sin6_addr = in6addr_any;
    if (!bind_host.empty() && inet_pton(AF_INET6, bind_host.c_str(), &a6->sin6_addr) != 1) {
      throw RendezvousError("cannot pick a free port: bad address '" + bind_host + "'");
    }
    len = sizeof(sockaddr_in6);
    fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 && !bind_host.empty()) {
      throw RendezvousError("cannot pick a free port on " + bind_host + ": no IPv6");
    }
  }
  if (fd < 0) {
    ss = {};
    auto* a4 = reinterpret_cast<sockaddr_in*>(&ss);
    a4->sin_family = AF_INET;
    a4->sin_addr.s_addr = htonl(INADDR_ANY);
    if (!bind_host.empty() && inet_pton(AF_INET, bind_host.c_str(), &a4->sin_addr) != 1) {
      throw RendezvousError("cannot pick a free port: bad address '" + bind_host + "'");
    }
    len = sizeof(sockaddr_in);
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  }
  if (fd < 0) throw RendezvousError("cannot pick a free port: " + errno_text(errno));
  std::uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
    port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  }
  const int err = errno;
  ::close(fd);
  if (port == 0) {
    throw RendezvousError("cannot pick a free port on " +
                          (bind_host.empty() ? std::string("*") : bind_host) + ": " +
                          errno_text(err));
  }
  return port;
}

}  // namespace ddprun::rdzv
