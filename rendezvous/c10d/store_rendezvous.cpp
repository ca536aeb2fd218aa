// store_rendezvous.cpp: StoreRendezvous's life cycle and its API while in a round:
// connecting, the new-round verdict (from RoundWatch), closing, the exit barrier,
// shutdown. Forming a round (next_rendezvous's join) is store_rendezvous_join.cpp.
#include "rendezvous/c10d/store_rendezvous.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "rendezvous/c10d/keys.h"
#include "rendezvous/round_member.h"
#include "store/store.h"

namespace ddprun::rdzv {
namespace {

using Clock = StoreRendezvous::Clock;
using Ms = StoreRendezvous::Ms;

StoreRendezvous::Config with_clock(StoreRendezvous::Config config) {
  config.round = RoundHandlerBase::with_default_clock(std::move(config.round));
  // Large clusters wait in longer slices (up to 2 s from 1024 nodes) and log their
  // progress less often (every 20 s from 1024): 1024 agents polling every 250 ms ask a
  // store host, starved on a loaded machine, more than it can answer.
  const int scale = std::clamp(config.round.max_nodes / 128, 1, 8);
  config.poll_slice =
      std::max(config.poll_slice, std::min<Ms>(config.poll_slice * scale, Ms(2000)));
  config.round.progress_interval *= std::clamp(config.round.max_nodes / 256, 1, 4);
  return config;
}

}  // namespace

StoreRendezvous::StoreRendezvous(Config config, Connect connect, std::function<void()> on_shutdown,
                                 std::function<bool()> hosts_store,
                                 std::function<void()> clear_worker_keys)
    : config_(with_clock(std::move(config))),
      connect_(std::move(connect)),
      on_shutdown_(std::move(on_shutdown)),
      hosts_store_(std::move(hosts_store)),
      clear_worker_keys_(std::move(clear_worker_keys)),
      watch_(RoundWatch::Settings{where(), config_.round.max_nodes,
                                  config_.round.keep_alive_interval,
                                  config_.round.keep_alive_max_attempt, config_.round.now}) {}

StoreRendezvous::~StoreRendezvous() { shutdown(); }

std::string StoreRendezvous::where() const {
  return rendezvous_where(config_.round.run_id, config_.backend + " at " + config_.endpoint);
}

bool StoreRendezvous::sleep_slice(Ms d) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, d, [&] { return stop_requested(); });
  return !stop_requested();
}

void StoreRendezvous::wake() {
  std::lock_guard lock(mu_);
  cv_.notify_all();
}

std::string StoreRendezvous::automatic_order() const {
  return "the rendezvous store's host first, then address, host, pid";
}

void StoreRendezvous::check_closed() {
  if (closed_seen() || store_->check({keys::kClosed})) {
    const std::string value = closed_seen() ? "1" : store_->get(keys::kClosed);
    if (value != "1") {  // the store's host gave up forming a round: its reason, once
      mark_closed();
      store_->add(keys::kClosedSeen, 1);
      throw RendezvousStateError(where() +
                                 ": the agent hosting the rendezvous store gave up: " + value);
    }
    throw_closed();
  }
}

void StoreRendezvous::give_up_as_host(const std::string& why) {
  const std::string prefix = where() + ": ";
  const std::string reason = why.rfind(prefix, 0) == 0 ? why.substr(prefix.size()) : why;
  try {
    if (!store_ || store_->check({keys::kClosed})) return;
    store_->set(keys::kClosed, reason);
    mark_closed();
    // The waiters look at `closed` once per tick, between slices.
    const auto until = now() + watch_tick() + config_.poll_slice + Ms(2000);
    const std::int64_t others =
        joining_round_ < 0 ? 0 : store_->add(keys::joined(joining_round_), 0) - 1;
    while (now() < until && store_->add(keys::kClosedSeen, 0) < others && sleep_slice(Ms(100))) {
    }
  } catch (const std::exception& e) {
    spdlog::debug("{}: could not tell the others why: {}", where(), e.what());
  }
}

void StoreRendezvous::ensure_connected(Clock::time_point deadline) {
  if (store_) return;
  auto main = connect_(deadline, interrupted_flag());
  auto hb = connect_(deadline, interrupted_flag());
  store_ = main;
  hb_store_ = hb;
  if (config_.find_address) config_.round.advertise_addr = config_.find_address();
}

RendezvousInfo StoreRendezvous::next_rendezvous() {
  watch_.stop();
  throw_if_stopped();
  auto deadline = now() + config_.round.join_timeout;
  try {
    try {
      ensure_connected(deadline);
      return join(deadline);
    } catch (const store::StoreSilentError& e) {
      // Silence, not a close: the store's host did not end the job, it is out of reach.
      throw RendezvousConnectionError(where() + ": cut off from the rendezvous store: " + e.what());
    } catch (const store::StoreClosedError& e) {
      throw RendezvousStoreClosedError(where(), e.what());
    } catch (const store::StoreConnectionError& e) {
      throw RendezvousConnectionError(where() + ": lost the rendezvous store: " + e.what());
    } catch (const store::StoreTimeoutError& e) {
      throw RendezvousConnectionError(where() + ": the rendezvous store did not answer in time (" +
                                      e.what() + ")");
    } catch (const store::StoreError& e) {
      throw RendezvousStateError(where() + ": rendezvous store error: " + e.what());
    }
  } catch (const RendezvousInterruptedError&) {
    throw;
  } catch (const RendezvousClosedError&) {
    throw;
  } catch (const RendezvousError& e) {
    if (hosts_store()) give_up_as_host(e.what());
    throw;
  }
}

int StoreRendezvous::num_nodes_waiting() { return watch_.waiting(); }

bool StoreRendezvous::needs_new_round() {
  if (!watch_.needs_new_round()) return false;
  if (in_round_ && !exited_ && !announced_ && !watch_.is_cut_off()) {
    announced_ = true;
    // The watch thread ADDs to our key; stop it before the key stops being a number.
    watch_.stop();
    try {
      leave_slot(round_, slot_);
    } catch (const std::exception& e) {
      spdlog::debug("{}: could not announce leaving round {}: {}", where(), round_, e.what());
    }
  }
  return true;
}

bool StoreRendezvous::needs_new_round_now() {
  if (watch_.needs_new_round()) return needs_new_round();
  if (!in_round_ || exited_) return false;
  try {
    watch_.look_now(*store_);
  } catch (const store::StoreSilentError& e) {
    watch_.cut_off(e.what());
  } catch (const std::exception& e) {
    watch_.fail(e.what());
  }
  return needs_new_round();
}

std::chrono::milliseconds StoreRendezvous::peer_loss_bound() {
  if (nodes_ <= 1) return Ms(0);
  return config_.round.keep_alive_interval * config_.round.keep_alive_max_attempt +
         2 * RoundWatch::tick(config_.round.keep_alive_interval, config_.round.max_nodes);
}

std::string StoreRendezvous::cut_off() {
  return watch_.is_cut_off() ? where() + ": " + watch_.reason() : std::string();
}

std::string StoreRendezvous::new_round_reason() { return watch_.reason(); }

bool StoreRendezvous::is_closed() {
  if (closed_seen()) return true;
  try {
    if (store_ && !watch_.is_cut_off() && store_->check({keys::kClosed})) mark_closed();
  } catch (const std::exception&) {
  }
  return closed_seen();
}

void StoreRendezvous::set_closed() {
  mark_closed();
  try {
    if (store_ && !watch_.is_cut_off()) store_->set(keys::kClosed, "1");
  } catch (const std::exception& e) {
    spdlog::debug("{}: could not mark the rendezvous closed: {}", where(), e.what());
  }
}

JobBoard* StoreRendezvous::job_board() {
  return in_round_ && !exited_ && !shut_down_ && !watch_.is_cut_off() ? board_.get() : nullptr;
}

bool StoreRendezvous::exit_barrier(std::chrono::milliseconds timeout) {
  if (!in_round_ || exited_) return true;
  if (watch_.is_cut_off()) return false;
  watch_.stop();
  exited_ = true;
  const auto deadline = now() + timeout;
  // Constant per node: one ADD to arrive, then waits on r<r>/exit (set by whoever
  // arrives last), and once a tick one look (the round's reason, the successor past
  // those done: a dead one ends the wait). Only the store's host reads every heartbeat,
  // for its log line and to know whether anyone still runs.
  try {
    // Arrive before counting out: whoever sees every node out (the host) must also see
    // every node's arrival in `done`, or it would take a finished peer for a dead one.
    const bool last = store_->add(keys::done(round_), 1) >= nodes_;
    store_->set(keys::heartbeat(round_, slot_), keys::kDone);
    RoundWatch::count_out(*store_, round_, slot_);
    if (last) store_->set(keys::exit_all(round_), "1");
    const Ms tick = RoundWatch::tick(config_.round.keep_alive_interval, config_.round.max_nodes);
    auto next_look = now() + tick;
    auto next_log = now() + config_.round.progress_interval;
    bool broken = false;
    for (;;) {
      if (store_->wait_for({keys::exit_all(round_)}, std::min<Ms>(config_.poll_slice, tick))) {
        acknowledge_exit();
        return true;
      }
      if (stop_requested()) return false;
      const auto t = now();
      if (t < next_look && t < deadline) continue;
      next_look = t + tick;
      if (store_->add(keys::done(round_), 0) >= nodes_) {
        store_->set(keys::exit_all(round_), "1");  // the last one died before it said so
        continue;
      }
      if (!broken) {
        watch_.look_now(*store_, false);  // a member left or died: nobody else will come
        broken = watch_.needs_new_round();
        if (broken) spdlog::warn("{}: exit barrier: {}", where(), watch_.reason());
      }
      const bool past = t >= deadline;
      if ((broken || past) && !hosts_store()) {
        if (past && !broken) {
          spdlog::warn("{}: exit barrier timed out: {} of {} nodes done", where(),
                       store_->add(keys::done(round_), 0), nodes_);
        }
        return false;
      }
      if (!broken && !past && t < next_log) continue;
      if (!hosts_store()) {  // only the host reads every heartbeat
        spdlog::warn("{}: waiting at the exit barrier: {} of {} nodes done; {} s left", where(),
                     store_->add(keys::done(round_), 0), nodes_, secs_left(t, deadline));
        next_log = t + config_.round.progress_interval;
        continue;
      }
      // The host keeps the rendezvous store up while a member still runs (leaving now
      // would fail them: their heartbeats would lose the store), and names them.
      std::string pending;
      int alive = 0;
      if (store_->add(keys::out(round_), 0) < nodes_) {
        const auto asked = now();
        const std::vector<Member> members =
            watch_.observe(round_, store_->multi_get(keys::heartbeats(round_, nodes_)), asked);
        for (int s = 0; s < nodes_; ++s) {
          if (members[static_cast<std::size_t>(s)] != Member::kAlive) continue;
          if (++alive <= 8) {
            pending += (pending.empty() ? "" : ", ") + RoundWatch::member_label(*store_, round_, s);
          }
        }
        if (alive > 8) pending += ", ... (" + std::to_string(alive) + " in all)";
      }
      if (alive == 0 && (broken || past)) {
        // Nobody runs: either all arrived (a peer's `done` landed after this look's first
        // read) or the rest left or died.
        if (store_->add(keys::done(round_), 0) < nodes_) return false;
        store_->set(keys::exit_all(round_), "1");
        continue;
      }
      if (t >= next_log) {
        if (past) {
          spdlog::warn("{}: keeping the rendezvous store up for the nodes still running: [{}]",
                       where(), pending);
          next_log = t + std::max<Ms>(config_.round.progress_interval, Ms(30'000));
        } else {
          spdlog::warn("{}: waiting at the exit barrier for [{}]; {} s left", where(), pending,
                       secs_left(t, deadline));
          next_log = t + config_.round.progress_interval;
        }
      }
    }
  } catch (const store::StoreConnectionError& e) {
    // The store host left: it leaves only once no peer is running (or it died, and
    // then nobody is left to wait for either).
    spdlog::debug("{}: exit barrier: the rendezvous store went away: {}", where(), e.what());
    return true;
  } catch (const std::exception& e) {
    spdlog::warn("{}: exit barrier: {}", where(), e.what());
    return false;
  }
}

void StoreRendezvous::acknowledge_exit() {
  // Everyone is done. Non-hosts acknowledge; the host waits (briefly) for the acks, so
  // it does not close the store under a peer that has not seen this yet.
  try {
    std::int64_t seen = store_->add(keys::exit_seen(round_), 1);
    if (hosts_store()) {
      auto ack_deadline = now() + std::max<Ms>(config_.round.keep_alive_interval, Ms(5000));
      while (seen < nodes_ && now() < ack_deadline && sleep_slice(Ms(20))) {
        seen = store_->add(keys::exit_seen(round_), 0);
      }
    }
  } catch (const store::StoreError& e) {
    spdlog::debug("{}: exit barrier acknowledgement: {}", where(), e.what());
  }
}

void StoreRendezvous::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  watch_.stop();
  if (in_round_ && !exited_ && store_ && !watch_.is_cut_off()) {
    try {
      // Peers notice at once, not after a heartbeat threshold.
      leave_slot(round_, slot_);
    } catch (const std::exception&) {
    }
  }
  workers_store_.stop();
  hb_store_.reset();
  board_.reset();  // it shares store_
  store_.reset();
  if (on_shutdown_) on_shutdown_();
}

}  // namespace ddprun::rdzv
