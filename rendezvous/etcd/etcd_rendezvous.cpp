// etcd_rendezvous.cpp: EtcdRendezvous's life cycle and its API while in a round: waits,
// the new-round verdict (kept by EtcdSession), closing, the exit barrier, shutdown.
// Forming a round (next_rendezvous's join) is etcd_rendezvous_join.cpp.
#include "rendezvous/etcd/etcd_rendezvous.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "rendezvous/etcd/etcd_round.h"
#include "rendezvous/round_member.h"

namespace ddprun::rdzv {
namespace {

using Clock = EtcdRendezvous::Clock;
using Ms = EtcdRendezvous::Ms;

// The clock, and the silent-member bound derived from the lease unless one is given.
EtcdRendezvous::Config with_defaults(EtcdRendezvous::Config config) {
  config.round = RoundHandlerBase::with_default_clock(std::move(config.round));
  if (config.etcd.silent_member_timeout.count() == 0) {
    config.etcd.silent_member_timeout = EtcdSession::silent_member_bound(
        config.round.keep_alive_interval, config.round.keep_alive_max_attempt);
  }
  return config;
}

}  // namespace

EtcdRendezvous::EtcdRendezvous(Config config)
    : config_(with_defaults(std::move(config))),
      keys_{config_.prefix + "/" + config_.round.run_id + "/"},
      client_(options_with(&interrupted_flag())),
      board_client_(board_options()),
      watch_(options_with(&interrupted_flag()), keys_.key("state")),
      session_(
          EtcdSession::Settings{config_.etcd, keys_, where(), config_.round.keep_alive_interval,
                                config_.round.keep_alive_max_attempt, config_.recheck_interval}) {}

EtcdOptions EtcdRendezvous::options_with(const std::atomic<bool>* cancel) const {
  EtcdOptions o = config_.etcd;
  o.cancel = cancel;
  return o;
}

EtcdOptions EtcdRendezvous::board_options() const {
  EtcdOptions o = options_with(&interrupted_flag());
  const Ms ttl = EtcdSession::lease_ttl(config_.round.keep_alive_interval,
                                        config_.round.keep_alive_max_attempt);
  const Ms bound = std::max(EtcdSession::fence(ttl) - config_.round.keep_alive_interval, Ms(500));
  o.failover_timeout = std::min(o.failover_timeout, bound);
  o.request_timeout = std::min(o.request_timeout, bound);
  return o;
}

EtcdRendezvous::~EtcdRendezvous() { shutdown(); }

std::string EtcdRendezvous::where() const {
  return rendezvous_where(config_.round.run_id, "etcd-v3, " + client_.where());
}

void EtcdRendezvous::wait_for_change(std::int64_t revision, Clock::time_point until, bool burst) {
  // The safety net: re-read at least every recheck_interval even without an event. The
  // watch waits real time: `until` (on the injected clock) becomes a real deadline.
  until = std::min(until, now() + config_.recheck_interval);
  const auto real_until = Clock::now() + (until - now());
  try {
    if (watch_.wait(revision, real_until).changed() && burst) {
      settle(interrupted_flag(), real_until, session_.nodes_seen());
    }
  } catch (const RendezvousInterruptedError&) {
    throw_if_stopped();
    throw;
  }
}

void EtcdRendezvous::wake() {
  watch_.cancel();  // wakes a blocked wait_for_change()
}

void EtcdRendezvous::check_closed() {
  if (closed_seen() || client_.get(keys_.key("closed"))) throw_closed();
}

int EtcdRendezvous::num_nodes_waiting() { return session_.waiting(); }

bool EtcdRendezvous::needs_new_round() {
  session_.check_fence();
  return session_.needs_new_round();
}

std::string EtcdRendezvous::cut_off() {
  const std::string why = session_.check_fence();
  return why.empty() ? why : where() + ": " + why;
}

std::string EtcdRendezvous::new_round_reason() { return session_.reason(); }

bool EtcdRendezvous::needs_new_round_now() {
  if (!session_.check_fence().empty()) return true;  // etcd is out of reach: do not ask it
  const std::optional<EtcdSession::Round> r = session_.current_round();
  if (!r) return false;
  if (!session_.reason().empty()) return true;
  EtcdLook l;
  try {
    l = look_at_round(client_, keys_, r->round, r->members);
  } catch (const std::exception& e) {
    l.reason = e.what();
  }
  return session_.add_reason(l.reason);
}

bool EtcdRendezvous::is_closed() { return closed_seen(); }

void EtcdRendezvous::set_closed() {
  if (!session_.is_cut_off()) client_.put(keys_.key("closed"), "1");
  mark_closed();
}

bool EtcdRendezvous::exit_barrier(std::chrono::milliseconds timeout) {
  board_.reset();
  if (session_.is_cut_off()) return false;
  const std::optional<EtcdSession::Round> r = session_.current_round();
  if (!r) return true;
  const int round = r->round;
  const std::vector<std::string>& members = r->members;
  const auto deadline = now() + timeout;
  session_.finish_round();
  client_.put(keys_.done_key(round, me_), "1");
  // Every member counts the done keys once. The one whose key completes the count (the
  // newest key: of the nodes that see the count complete, it alone) writes alldone/r<R>;
  // the others watch that one key (one event each, not one per member), and look at
  // every key only when the safety net wakes them (a member that died never writes its
  // done key).
  const std::string all_done = keys_.all_done_key(round);
  std::int64_t count = 0;
  const auto newest = client_.newest(keys_.done_prefix(round), &count);
  if (count >= static_cast<std::int64_t>(members.size())) {
    if (newest && key_leaf(newest->key) == me_) client_.put(all_done, "1");
    return true;
  }
  watch_.set_prefix(all_done);
  for (bool look = false;; look = true) {
    std::int64_t revision = 0;
    if (client_.get(all_done, &revision)) return true;
    if (look) {
      std::set<std::string> live, done;
      for (const auto& n : client_.get_prefix(keys_.key("node/"), true)) {
        live.insert(key_leaf(n.key));
      }
      for (const auto& n : client_.get_prefix(keys_.done_prefix(round), true)) {
        done.insert(key_leaf(n.key));
      }
      if (std::all_of(members.begin(), members.end(),
                      [&](const auto& m) { return done.count(m) || !live.count(m); })) {
        client_.put(all_done, "1");
        return true;
      }
    }
    if (now() >= deadline || stop_requested()) return false;
    try {
      wait_for_change(revision, deadline, /*burst=*/false);
    } catch (const RendezvousInterruptedError&) {
      return false;
    }
  }
}

void EtcdRendezvous::shutdown() {
  board_.reset();
  session_.shutdown();  // revokes the lease: the descriptor and join key go now
  workers_store_.stop();
}

}  // namespace ddprun::rdzv
