// round_watch.cpp: RoundWatch (round_watch.h): the heartbeat thread, its looks at the
// successor, the round's broken key and the next round's joiners, and the verdict.
#include "rendezvous/c10d/round_watch.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "rendezvous/c10d/keys.h"
#include "store/store.h"

namespace ddprun::rdzv {

RoundWatch::Ms RoundWatch::tick(Ms keep_alive_interval, int max_nodes) {
  // 1 s up to 256 nodes, then longer (4 s from 1024 on): what the members ask the store
  // per second stays within what one store host serves, however loaded.
  const int scale = std::clamp(max_nodes / 256, 1, 4);
  return std::min<Ms>(keep_alive_interval, Ms(1000) * scale);
}

Liveness RoundWatch::judge(Ms keep_alive_interval, int keep_alive_max_attempt, int max_nodes) {
  return Liveness(keep_alive_interval * keep_alive_max_attempt,
                  2 * tick(keep_alive_interval, max_nodes));
}

RoundWatch::RoundWatch(Settings settings)
    : settings_(std::move(settings)), liveness_(judge()), watched_(judge()) {}

Liveness RoundWatch::judge() const {
  return judge(settings_.keep_alive_interval, settings_.keep_alive_max_attempt,
               settings_.max_nodes);
}

RoundWatch::~RoundWatch() { stop(); }

void RoundWatch::start(std::shared_ptr<store::Store> store, int round, int slot, int nodes) {
  stop();
  store_ = std::move(store);
  round_ = round;
  slot_ = slot;
  nodes_ = nodes;
  successor_ = nodes > 0 ? (slot + 1) % nodes : slot;
  {
    std::lock_guard lock(mu_);
    stop_ = false;
    watched_ = judge();
  }
  thread_ = std::thread([this] { run(); });
}

void RoundWatch::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  store_.reset();
}

void RoundWatch::clear() {
  std::lock_guard lock(mu_);
  reason_.clear();
  needs_new_round_.store(false);
  cut_off_.store(false);
  waiting_.store(0);
}

void RoundWatch::fail(const std::string& why) {
  std::lock_guard lock(mu_);
  reason_ = "lost the rendezvous store: " + why;
  needs_new_round_.store(true);
}

std::string RoundWatch::reason() const {
  std::lock_guard lock(mu_);
  return reason_;
}

std::vector<Member> RoundWatch::observe(int round, const std::vector<std::string>& values,
                                        Clock::time_point asked) {
  std::lock_guard lock(mu_);
  return liveness_.observe(round, values, asked);
}

std::string RoundWatch::member_label(store::Store& s, int round, int slot) {
  const std::string key = keys::node(round, slot);
  if (s.check({key})) {
    if (std::optional<NodeDesc> d = decode_node_desc(s.get(key), slot)) return d->label();
  }
  return "in slot " + std::to_string(slot);
}

void RoundWatch::count_out(store::Store& s, int round, int slot) {
  if (s.add(keys::gone(round, slot), 1) == 1) s.add(keys::out(round), 1);
}

std::string RoundWatch::break_round(store::Store& s, int round, const std::string& why) {
  return s.compare_set(keys::broken(round), "", why);
}

void RoundWatch::look_now(store::Store& store, bool count_waiting) { look(store, count_waiting); }

std::string RoundWatch::look_at_successors(store::Store& s) {
  // The successors from successor_ on, this node excluded: the first that is not done
  // is the one watched; "left" or a silent heartbeat is the reason.
  for (;;) {
    if (successor_ == slot_) return {};  // everyone else is done
    std::vector<int> slots;
    for (int i = successor_; static_cast<int>(slots.size()) < kLookAhead && i != slot_;
         i = (i + 1) % nodes_) {
      slots.push_back(i);
    }
    std::vector<std::string> ks;
    for (int i : slots) ks.push_back(keys::heartbeat(round_, i));
    const auto asked = settings_.now();
    const std::vector<std::string> values = s.multi_get(ks);
    for (std::size_t k = 0; k < slots.size(); ++k) {
      const int watched = slots[k];
      if (values[k] == keys::kDone) {
        successor_ = (watched + 1) % nodes_;
        continue;
      }
      Member m = Member::kAlive;
      {
        std::lock_guard lock(mu_);
        m = watched_.observe(watched, {values[k]}, asked).front();
      }
      if (m == Member::kLeft) {
        return "node " + member_label(s, round_, watched) + " left round " + std::to_string(round_);
      }
      if (m == Member::kDead) {
        count_out(s, round_, watched);
        const double secs = static_cast<double>(judge().threshold().count()) / 1000.0;
        return "node " + member_label(s, round_, watched) + " missed its heartbeats for " +
               std::to_string(secs).substr(0, 5) + " s";
      }
      return {};
    }
    // kLookAhead members done: look further at once (each is skipped only once).
  }
}

std::string RoundWatch::look(store::Store& s, bool count_waiting) {
  std::lock_guard looking(look_mu_);  // the thread's and the owner's looks, one at a time
  std::string reason;
  if (s.check({keys::broken(round_)})) reason = s.get(keys::broken(round_));
  const bool known = !reason.empty();
  if (!known) reason = look_at_successors(s);
  const int waiting = static_cast<int>(s.add(keys::joined(round_ + 1), 0));
  // A waiting node only forces a new round when the round has room for it.
  const int admissible = (nodes_ < settings_.max_nodes || !reason.empty()) ? waiting : 0;
  waiting_.store(count_waiting ? admissible : 0);
  if (reason.empty() && count_waiting && admissible > 0) {
    reason = std::to_string(waiting) + " node(s) waiting to join";
  }
  if (reason.empty()) return reason;
  // Every member reads the one round-level reason: the first writer's.
  if (!known) reason = break_round(s, round_, reason);
  std::lock_guard lock(mu_);
  if (reason_.empty()) {
    reason_ = reason;
    // Once per round on every node, whichever look finds it first (this thread's, or the
    // agent's when a worker failed): each node's log says why its round ended. The exit
    // barrier's look (not counting waiters) says it in its own words.
    if (count_waiting) {
      spdlog::warn("{}: round {}: {}; a new round is needed", settings_.where, round_, reason);
    }
  }
  needs_new_round_.store(true);
  return reason;
}

RoundWatch::Ms RoundWatch::fence(Ms keep_alive_interval, int keep_alive_max_attempt,
                                 int max_nodes) {
  // The peers judge from this node's last beat that reached the store, at most one
  // interval before the link went silent, and wait the whole budget: (attempts - 1)
  // intervals after the silence at the least. This node's first unacknowledged request
  // leaves up to a tick after the silence began, and its agent looks once a second.
  const Ms fence = keep_alive_interval * (keep_alive_max_attempt - 1) -
                   tick(keep_alive_interval, max_nodes) - Ms(1000);
  return std::max<Ms>(fence, Ms(1000));
}

void RoundWatch::cut_off(const std::string& why) {
  std::lock_guard lock(mu_);
  if (cut_off_.load()) return;
  reason_ = "cut off from the rendezvous store: " + why;
  cut_off_.store(true);
  needs_new_round_.store(true);
}

void RoundWatch::run() {
  const Ms tick_interval = tick(settings_.keep_alive_interval, settings_.max_nodes);
  auto next_beat = settings_.now();
  if (nodes_ > 64) {
    // A large round's members enter it at the same moment: spread their first looks
    // over one tick (by slot), not all at once on the store host busy starting the
    // workers. Each beat during the join, so no one is late.
    std::unique_lock lock(mu_);
    if (cv_.wait_for(lock, tick_interval * (slot_ % 16) / 16, [&] { return stop_; })) return;
  }
  for (;;) {
    try {
      auto now = settings_.now();
      if (now >= next_beat) {
        store_->add(keys::heartbeat(round_, slot_), 1);
        next_beat = now + settings_.keep_alive_interval;
      }
      look(*store_, true);
    } catch (const store::StoreSilentError& e) {
      cut_off(e.what());  // the agent says it, as it stops its workers
      return;
    } catch (const std::exception& e) {
      fail(e.what());
      spdlog::error("{}: {}", settings_.where, reason());
      return;
    }
    std::unique_lock lock(mu_);
    if (cv_.wait_for(lock, tick_interval, [&] { return stop_; })) return;
  }
}

}  // namespace ddprun::rdzv
