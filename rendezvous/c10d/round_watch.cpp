// round_watch.cpp: RoundWatch (round_watch.h): the heartbeat thread, its looks at the
// round and the next round's joiners, and the verdict it keeps.
#include "rendezvous/c10d/round_watch.h"

#include <spdlog/spdlog.h>

#include "rendezvous/c10d/keys.h"
#include "store/store.h"

namespace ddprun::rdzv {

RoundWatch::Ms RoundWatch::tick(Ms keep_alive_interval) {
  return std::min<Ms>(keep_alive_interval, Ms(1000));
}

RoundWatch::RoundWatch(Settings settings)
    : settings_(std::move(settings)),
      // Looks come every tick (at most 1 s) plus a few store round trips: time beyond
      // two ticks between two looks is time the observer was blind.
      liveness_(settings_.keep_alive_interval * settings_.keep_alive_max_attempt,
                2 * tick(settings_.keep_alive_interval)) {}

RoundWatch::~RoundWatch() { stop(); }

void RoundWatch::start(std::shared_ptr<store::Store> store, int round, int slot,
                       std::vector<NodeDesc> members) {
  stop();
  store_ = std::move(store);
  round_ = round;
  slot_ = slot;
  members_ = std::move(members);
  {
    std::lock_guard lock(mu_);
    stop_ = false;
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

void RoundWatch::look_now(store::Store& store) { look(store); }

std::string RoundWatch::look(store::Store& s) {
  const int n = static_cast<int>(members_.size());
  const auto asked = settings_.now();
  auto values = s.multi_get(keys::heartbeats(round_, n));
  int waiting = static_cast<int>(s.add(keys::joined(round_ + 1), 0));
  std::string reason;
  std::lock_guard lock(mu_);
  auto members = liveness_.observe(round_, values, asked);
  for (int i = 0; i < n && reason.empty(); ++i) {
    if (i == slot_) continue;
    const auto& d = members_[static_cast<std::size_t>(i)];
    if (members[static_cast<std::size_t>(i)] == Member::kLeft) {
      reason = "node " + d.label() + " left round " + std::to_string(round_);
    } else if (members[static_cast<std::size_t>(i)] == Member::kDead) {
      reason =
          "node " + d.label() + " missed its heartbeats for " +
          std::to_string(static_cast<double>(liveness_.threshold().count()) / 1000.0).substr(0, 5) +
          " s";
    }
  }
  // A waiting node only forces a new round when the round has room for it.
  int admissible = (n < settings_.max_nodes || !reason.empty()) ? waiting : 0;
  waiting_.store(admissible);
  if (reason.empty() && admissible > 0) {
    reason = std::to_string(waiting) + " node(s) waiting to join";
  }
  if (!reason.empty()) {
    if (reason_.empty()) reason_ = reason;
    needs_new_round_.store(true);
  }
  return reason;
}

void RoundWatch::run() {
  const Ms tick_interval = tick(settings_.keep_alive_interval);
  auto next_beat = settings_.now();
  bool reported = false;
  for (;;) {
    try {
      auto now = settings_.now();
      if (now >= next_beat) {
        store_->add(keys::heartbeat(round_, slot_), 1);
        next_beat = now + settings_.keep_alive_interval;
      }
      std::string reason = look(*store_);
      if (!reason.empty() && !reported) {
        reported = true;
        spdlog::warn("{}: round {}: {}; a new round is needed", settings_.where, round_, reason);
      }
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
