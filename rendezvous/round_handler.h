// round_handler.h: RoundHandlerBase, what every multi-node RendezvousHandler says and
// holds whatever its storage (StoreRendezvous for c10d/static, EtcdRendezvous for
// etcd-v3): the interrupted and closed flags and their messages, the restarts spent, the
// default clock, the one join-timeout error, the "--node-rank ignored" warning, the
// GLOO_SOCKET_IFNAME choice and the "round formed" line. A backend supplies where(), its
// round settings, and wake() (how interrupt() ends its waits); it keeps only its storage
// and its waits. Thread-safety: interrupt(), stop_requested() and the closed flag from
// any thread; the rest on the agent thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "rendezvous/rendezvous.h"
#include "rendezvous/round_config.h"
#include "rendezvous/round_layout.h"

namespace ddprun::rdzv {

class RoundHandlerBase : public RendezvousHandler {
 public:
  void set_restarts_spent(int restarts) override { restarts_spent_ = restarts; }
  // Sets the sticky interrupted flag, then wake()s the backend's waits.
  void interrupt() final;

  // `c` with steady_clock as its clock unless a test injected one.
  static RoundConfig with_default_clock(RoundConfig c);

 protected:
  // "rendezvous '<id>' (<backend> at <endpoint>)": how every message names the rendezvous.
  virtual std::string where() const = 0;
  virtual const RoundConfig& round_config() const = 0;
  // Ends the backend's blocked waits promptly (called by interrupt(), from any thread).
  virtual void wake() = 0;
  // How the automatic order reads in the "--node-rank ignored" warning.
  virtual std::string automatic_order() const { return "by address, host, pid"; }

  RoundConfig::Clock::time_point now() const { return round_config().now(); }
  int restarts_spent() const { return restarts_spent_; }

  bool stop_requested() const { return interrupted_.load(); }
  void throw_if_stopped() const;  // RendezvousInterruptedError once stop_requested()
  // The flag interrupt() sets, for calls that watch it themselves (connects, etcd calls).
  const std::atomic<bool>& interrupted_flag() const { return interrupted_; }

  bool closed_seen() const { return closed_.load(); }
  void mark_closed() { closed_.store(true); }
  [[noreturn]] void throw_closed();  // marks closed; RendezvousClosedError

  // The one join-timeout error: "<where>: timed out after join_timeout <s> s in round <R>
  // [with <k> of min <M> / max <X> nodes][ (<why>)]".
  RendezvousTimeoutError join_timeout_error(int round, std::optional<std::int64_t> joined,
                                            const std::string& why = "") const;

  // Once per agent: "--node-rank ignored: <note>; group ranks follow the automatic order
  // instead (<automatic_order()>)".
  bool node_rank_warned() const { return node_rank_warned_; }
  void warn_node_rank_ignored(const std::string& note);
  // GLOO_SOCKET_IFNAME for this node's workers from its slot's gloo hint
  // (gloo_interface()), said once per agent when one is given; "" = none.
  std::string gloo_socket_ifname(const SlotLayout& slot);
  // The one "round formed" line (INFO): "round R formed: N nodes, this node is group rank
  // g of N (ranks a..b of W); workers' store at h:p".
  void log_round_formed(const RendezvousInfo& info) const;

 private:
  std::atomic<bool> interrupted_{false};
  std::atomic<bool> closed_{false};
  int restarts_spent_ = 0;  // set_restarts_spent(): in this node's next descriptor
  bool node_rank_warned_ = false;
  bool gloo_warned_ = false;
};

}  // namespace ddprun::rdzv
