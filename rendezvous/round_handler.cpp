// round_handler.cpp: RoundHandlerBase, the flags, messages and log lines every
// multi-node handler shares (round_handler.h).
#include "rendezvous/round_handler.h"

#include <spdlog/spdlog.h>

#include "rendezvous/endpoint.h"
#include "rendezvous/published_address.h"

namespace ddprun::rdzv {

void RoundHandlerBase::interrupt() {
  interrupted_.store(true);
  wake();
}

RoundConfig RoundHandlerBase::with_default_clock(RoundConfig c) {
  if (!c.now) c.now = [] { return RoundConfig::Clock::now(); };
  return c;
}

void RoundHandlerBase::throw_if_stopped() const {
  if (stop_requested()) {
    throw RendezvousInterruptedError(where() + ": interrupted while waiting for the other nodes");
  }
}

void RoundHandlerBase::throw_closed() {
  mark_closed();
  throw RendezvousClosedError(where() + " is closed: the job has ended");
}

RendezvousTimeoutError RoundHandlerBase::join_timeout_error(int round,
                                                            std::optional<std::int64_t> joined,
                                                            const std::string& why) const {
  const RoundConfig& c = round_config();
  std::string text = where() + ": timed out after join_timeout " +
                     std::to_string(c.join_timeout.count() / 1000) + " s in round " +
                     std::to_string(round);
  if (joined) {
    text += " with " + std::to_string(*joined) + " of min " + std::to_string(c.min_nodes) +
            " / max " + std::to_string(c.max_nodes) + " nodes";
  }
  if (!why.empty()) text += " (" + why + ")";
  return RendezvousTimeoutError(text);
}

void RoundHandlerBase::warn_node_rank_ignored(const std::string& note) {
  // c10d and etcd-v3, as torchrun (which ignores --node-rank there): say so once per agent.
  if (node_rank_warned_) return;
  node_rank_warned_ = true;
  spdlog::warn("{}: --node-rank ignored: {}; group ranks follow the automatic order instead ({})",
               where(), note, automatic_order());
}

std::string RoundHandlerBase::gloo_socket_ifname(const SlotLayout& slot) {
  std::string why;
  std::string ifname = gloo_interface(slot.elsewhere, why);
  if (!ifname.empty() && !gloo_warned_) {
    gloo_warned_ = true;
    spdlog::warn("{}: {}: the workers get GLOO_SOCKET_IFNAME={} (set it to choose another)",
                 where(), why, ifname);
  }
  return ifname;
}

void RoundHandlerBase::log_round_formed(const RendezvousInfo& info) const {
  spdlog::info(
      "{}: round {} formed: {} nodes, this node is group rank {} of {} (ranks {}..{} of {}); "
      "workers' store at {}",
      where(), info.round, info.group_world_size, info.group_rank, info.group_world_size,
      info.rank_base, info.rank_base + round_config().local_world_size - 1, info.world_size,
      Endpoint{info.master_addr, info.master_port}.to_string());
}

}  // namespace ddprun::rdzv
