// published_address.cpp: the address a node publishes for itself and the workers'
// GLOO_SOCKET_IFNAME choice (published_address.h).
#include "rendezvous/published_address.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>

namespace ddprun::rdzv {
namespace {

// A member with a non-loopback address: on a machine of its own, as far as we can tell.
bool elsewhere(const NodeDesc& d) { return !is_loopback_host(d.addr); }

bool spans_machines(const std::vector<NodeDesc>& descs) {
  return std::any_of(descs.begin(), descs.end(), elsewhere);
}

}  // namespace

std::string choose_published_address(const std::string& endpoint_host,
                                     bool endpoint_is_this_machine, const std::string& routed) {
  if (endpoint_is_this_machine && is_loopback_host(routed) && !is_ip_literal(endpoint_host) &&
      !is_loopback_host(endpoint_host)) {
    return endpoint_host;
  }
  return routed;
}

std::string find_published_address(const Endpoint& ep, bool endpoint_is_this_machine,
                                   const std::string& fallback) {
  std::string addr =
      choose_published_address(ep.host, endpoint_is_this_machine, routed_local_address(ep));
  if (addr.empty()) {
    spdlog::warn(
        "no route towards the rendezvous endpoint {}: publishing the host name '{}'; set "
        "--local-addr to an address the other nodes can reach",
        ep.to_string(), fallback);
    return fallback;
  }
  return addr;
}

std::string loopback_master_error(const std::string& master_addr,
                                  const std::vector<NodeDesc>& descs,
                                  const std::vector<int>& group_rank) {
  if (!is_loopback_host(master_addr)) return {};
  // The member elsewhere named is the one of the lowest group rank: every node names the
  // same one, whatever order the nodes joined in (slots follow the join order).
  const NodeDesc* remote = nullptr;
  int remote_rank = 0;
  for (std::size_t i = 0; i < descs.size() && i < group_rank.size(); ++i) {
    if (elsewhere(descs[i]) && (remote == nullptr || group_rank[i] < remote_rank)) {
      remote = &descs[i];
      remote_rank = group_rank[i];
    }
  }
  const auto first = std::find(group_rank.begin(), group_rank.end(), 0);
  if (remote == nullptr || first == group_rank.end()) return {};
  const NodeDesc& host = descs.at(static_cast<std::size_t>(first - group_rank.begin()));
  const std::string& name = host.host.empty() ? host.addr : host.host;
  return "group rank 0 (" + host.label() + ") would give the workers the loopback address " +
         master_addr + " as MASTER_ADDR, which node " + remote->label() +
         " cannot reach; start ddprun on " + name +
         " with --local-addr set to its address on the other nodes' network (its host name "
         "resolves to loopback there, or it was given a loopback --local-addr)";
}

bool gloo_needs_interface(const std::vector<std::string>& hostname_addrs,
                          const std::vector<std::string>& local_addrs,
                          const std::vector<NodeDesc>& descs) {
  const bool usable = std::any_of(hostname_addrs.begin(), hostname_addrs.end(), [&](auto& a) {
    return !is_loopback_host(a) &&
           std::find(local_addrs.begin(), local_addrs.end(), a) != local_addrs.end();
  });
  return spans_machines(descs) && !usable;
}

std::string gloo_interface(const std::vector<std::string>& remote, std::string& why) {
  if (std::getenv("GLOO_SOCKET_IFNAME") != nullptr) return {};
  std::vector<NodeDesc> descs(remote.size());
  for (std::size_t i = 0; i < remote.size(); ++i) descs[i].addr = remote[i];
  // One machine: no name look-up at all (it may wait for a DNS server).
  if (!spans_machines(descs)) return {};
  const std::string hostname = local_hostname();
  const std::vector<std::string> resolved = resolve_addresses(hostname);
  if (!gloo_needs_interface(resolved, local_interface_addresses(), descs)) return {};
  for (const NodeDesc& d : descs) {
    if (!elsewhere(d)) continue;
    const std::string source = routed_local_address({d.addr, 9});
    std::string name = is_loopback_host(source) ? "" : interface_of(source);
    if (name.empty()) continue;
    why = "this machine's host name '" + hostname + "' " +
          (resolved.empty() ? "does not resolve" : "resolves to " + resolved.front()) +
          ", so gloo would use loopback; its interface towards " + d.addr + " is " + name + " (" +
          source + ")";
    return name;
  }
  return {};
}

}  // namespace ddprun::rdzv
