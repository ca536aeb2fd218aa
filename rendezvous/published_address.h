// published_address.h: which address a multi-node agent publishes to its peers (its node
// descriptor; MASTER_ADDR when it becomes group rank 0), and the refusal to hand remote
// workers a loopback MASTER_ADDR. Nothing here depends on this machine's own host name
// resolving. Used by the registry (the choice), layout_round() (the refusal) and both
// multi-node handlers (gloo's interface); table tests in
// tests/rendezvous/published_address_test.cpp. Thread-safety: pure functions,
// except find_published_address(), which asks the kernel for a route (reentrant).
#pragma once

#include <string>
#include <vector>

#include "rendezvous/endpoint.h"
#include "rendezvous/round_codec.h"

namespace ddprun::rdzv {

// The address to publish without --local-addr, from `routed`: the source address of this
// machine's route towards the endpoint ("" = unknown: the endpoint does not resolve yet).
// That is the address the peers' packets come back to, whatever the host name says. One
// exception: on the endpoint's own machine (`endpoint_is_this_machine`) a route to a
// host *name* that resolves to loopback here (Debian's `127.0.1.1 <hostname>` entry)
// yields loopback; the peers reach this machine by that very name, so the name is
// published (they resolve it as they did to reach the rendezvous). "" when `routed` is.
std::string choose_published_address(const std::string& endpoint_host,
                                     bool endpoint_is_this_machine, const std::string& routed);

// choose_published_address() with the kernel's route towards `ep` (a connected UDP
// socket's name; no packet is sent). Called once the endpoint resolves; should the route
// still be unknown, the host name `fallback` is returned with a warning.
std::string find_published_address(const Endpoint& ep, bool endpoint_is_this_machine,
                                   const std::string& fallback);

// Why the round must not start: `master_addr` (what group rank 0 gives the workers as
// MASTER_ADDR) is a loopback address while a member of the round (`descs`, by slot, with
// `group_rank` by slot) published a non-loopback one, so its workers would dial their
// own machine. One line naming group rank 0, a remote member and the fix
// (--local-addr); "" when the round may start (all loopback: one machine).
std::string loopback_master_error(const std::string& master_addr,
                                  const std::vector<NodeDesc>& descs,
                                  const std::vector<int>& group_rank);

// Whether the workers need GLOO_SOCKET_IFNAME. PyTorch's gloo binds to an address its
// machine's host name resolves to, and to loopback when none is usable: for the other
// machines unreachable unless `hostname_addrs` (what the host name resolves to) holds a
// non-loopback address of this machine (`local_addrs`). Only matters when a member of the
// round (`descs`) is on another machine (a non-loopback address).
bool gloo_needs_interface(const std::vector<std::string>& hostname_addrs,
                          const std::vector<std::string>& local_addrs,
                          const std::vector<NodeDesc>& descs);

// GLOO_SOCKET_IFNAME for this node's workers, from the addresses `remote` of the round's
// members elsewhere (the gloo hint, SlotLayout::elsewhere in round_layout.h): when
// gloo_needs_interface() for this machine's host name, the interface of the route's
// source address towards one of them (`why` says why, for the log); "" when gloo finds a
// reachable address itself, the user set GLOO_SOCKET_IFNAME, or no interface can be found.
std::string gloo_interface(const std::vector<std::string>& remote, std::string& why);

}  // namespace ddprun::rdzv
