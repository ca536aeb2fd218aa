// etcd_session.cpp: EtcdSession (etcd_session.h): the lease, its keepalive and the
// background look at the running round, and the revocation at shutdown.
#include "rendezvous/etcd/etcd_session.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

namespace ddprun::rdzv {
namespace {

using Clock = EtcdSession::Clock;
using Ms = EtcdSession::Ms;

EtcdOptions with_cancel(EtcdOptions o, const std::atomic<bool>* cancel) {
  o.cancel = cancel;
  return o;
}

// The background thread's options: its calls (keepalives, the round's reads) keep the
// lease, so a member that holds one unanswered longer than the silent-member bound is
// left for the next: a member cut into a minority keeps a read it took as leader until
// etcd's request timeout (7 s; it steps down without failing it), past the fence.
EtcdOptions background_options(const EtcdSession::Settings& s, const std::atomic<bool>* cancel) {
  EtcdOptions o = with_cancel(s.etcd, cancel);
  o.request_timeout =
      std::min(o.request_timeout,
               EtcdSession::silent_member_bound(s.keep_alive_interval, s.keep_alive_max_attempt));
  return o;
}

}  // namespace

EtcdLook look_at_round(EtcdClient& c, const EtcdKeys& keys, int round,
                       const std::vector<std::string>& members) {
  EtcdLook out;
  auto kv = c.get(keys.key("state"), &out.revision);
  auto s = kv ? decode_round_state(kv->value) : std::nullopt;
  if (!s || s->round != round) {
    out.reason = "round " + std::to_string(round) + " was superseded by round " +
                 (s ? std::to_string(s->round) : std::string("?"));
    return out;
  }
  // Under r<R>/: the members' join keys (each lives with its agent's lease, and a member
  // that leaves the round deletes its own), late joiners' waiting keys. Counts (no key in
  // the answers); the join keys themselves only when fewer than the members are there.
  out.waiting = static_cast<int>(c.count(keys.rkey(round, "waiting/")));
  const std::string join_prefix = keys.rkey(round, "join/");
  if (c.count(join_prefix) < static_cast<std::int64_t>(members.size())) {
    std::set<std::string> joined;
    for (const auto& n : c.get_prefix(join_prefix, true)) joined.insert(key_leaf(n.key));
    for (const auto& m : members) {
      if (!joined.count(m) && !c.get(keys.done_key(round, m))) {
        out.reason = "a node of round " + std::to_string(round) + " (lease " + m +
                     ") left or its lease expired";
        return out;
      }
    }
  }
  if (out.waiting > 0) {
    out.reason = std::to_string(out.waiting) + " node(s) waiting to join";
  }
  return out;
}

void settle(const std::atomic<bool>& stop, Clock::time_point until, int nodes_seen) {
  // One change of a round of N nodes is usually one of a burst (N joins, N descriptors, N
  // exit-barrier keys) that wakes all N agents: each reading at every change would be N²
  // reads of N keys. Waiting 1 ms per node seen (at most kMaxSettle) lets a burst end
  // first; a 4-node round waits 4 ms.
  constexpr Ms kMaxSettle{200};
  const auto end = std::min(until, Clock::now() + std::min(kMaxSettle, Ms(nodes_seen)));
  while (!stop.load() && Clock::now() < end) {
    std::this_thread::sleep_for(std::min<Clock::duration>(Ms(10), end - Clock::now()));
  }
}

EtcdSession::EtcdSession(Settings settings)
    : s_(std::move(settings)), watch_(background_options(s_, &stop_), s_.keys.base) {}

EtcdSession::~EtcdSession() { shutdown(); }

std::string EtcdSession::id() const {
  std::lock_guard lock(mu_);
  return me_;
}

bool EtcdSession::ensure_lease(EtcdClient& client) {
  {
    std::lock_guard lock(mu_);
    if (lease_.load() != 0 && !lease_lost_) return false;
  }
  const std::int64_t ttl =
      lease_ttl(s_.keep_alive_interval, s_.keep_alive_max_attempt).count() / 1000;
  const auto sent = Clock::now();
  const std::int64_t id = client.lease_grant(ttl);
  kept_at_.store(sent.time_since_epoch().count());
  ttl_ms_.store(ttl * 1000);
  {
    std::lock_guard lock(mu_);
    me_ = lease_hex(id);
    lease_.store(id);
    lease_lost_ = false;
  }
  spdlog::debug("{}: lease {} ({} s)", s_.where, lease_hex(id), ttl);
  if (!thread_.joinable()) {
    client_ = std::make_unique<EtcdClient>(background_options(s_, &stop_));
    thread_ = std::thread([this] { background(); });
  }
  return true;
}

void EtcdSession::lease_gone(std::int64_t id) {
  std::lock_guard lock(mu_);
  if (id != lease_.load() || lease_lost_) return;
  lease_lost_ = true;
  if (reason_.empty()) reason_ = "this node's lease " + me_ + " expired";
}

void EtcdSession::enter_round(int round, std::vector<std::string> members) {
  std::lock_guard lock(mu_);
  in_round_ = true;
  finishing_ = false;
  round_ = round;
  members_ = std::move(members);
  reason_.clear();
  waiting_ = 0;
  cv_.notify_all();  // the background thread starts watching the round
}

void EtcdSession::finish_round() {
  std::lock_guard lock(mu_);
  finishing_ = true;
}

int EtcdSession::leave_round() {
  std::lock_guard lock(mu_);
  if (!fatal_.empty()) throw RendezvousConnectionError(fatal_);
  const int left = in_round_ ? round_ : -1;
  in_round_ = false;
  reason_.clear();
  waiting_ = 0;
  return left;
}

void EtcdSession::check_alive() {
  std::lock_guard lock(mu_);
  if (!fatal_.empty()) throw RendezvousConnectionError(fatal_);
}

std::optional<EtcdSession::Round> EtcdSession::current_round() {
  std::lock_guard lock(mu_);
  if (!in_round_) return std::nullopt;
  return Round{round_, members_};
}

int EtcdSession::waiting() {
  std::lock_guard lock(mu_);
  return waiting_;
}

bool EtcdSession::needs_new_round() {
  std::lock_guard lock(mu_);
  return in_round_ && !reason_.empty();
}

std::string EtcdSession::reason() {
  std::lock_guard lock(mu_);
  return reason_;
}

bool EtcdSession::add_reason(const std::string& reason) {
  std::lock_guard lock(mu_);
  if (reason_.empty()) reason_ = reason;
  return !reason_.empty();
}

void EtcdSession::background() {
  auto next_keepalive = Clock::now();
  while (!stop_.load()) {
    try {
      if (Clock::now() >= next_keepalive) {
        next_keepalive = Clock::now() + s_.keep_alive_interval;
        const std::int64_t lease = lease_.load();
        const auto sent = Clock::now();
        const std::int64_t kept = client_->lease_keepalive(lease);
        if (kept != 0 && lease == lease_.load()) kept_at_.store(sent.time_since_epoch().count());
        if (kept == 0) lease_gone(lease);
      }
      bool in_round = false;
      int round = 0;
      std::vector<std::string> members;
      {
        std::lock_guard lock(mu_);
        in_round = in_round_ && reason_.empty() && !finishing_;
        round = round_;
        members = members_;
      }
      std::int64_t revision = -1;
      if (in_round) {
        EtcdLook l = look_at_round(*client_, s_.keys, round, members);
        std::lock_guard lock(mu_);
        if (in_round_ && round_ == round && !finishing_) {
          waiting_ = l.waiting;
          if (reason_.empty()) reason_ = l.reason;
          if (reason_.empty()) revision = l.revision;
        }
      }
      const auto until = std::min(next_keepalive, Clock::now() + s_.recheck_interval);
      if (revision >= 0) {
        // Look again as soon as a key of the round changes (a late joiner's waiting key, a
        // member's join key gone with its lease or deleted as it left), or the safety net
        // (which also reads the state). Not the run's other keys: exit-barrier keys and
        // descriptors change once per node, and would wake every node N times.
        watch_.set_prefix(s_.keys.rkey(round, ""));
        if (watch_.wait(revision, until).changed()) settle(stop_, until, nodes_seen_.load());
      } else {
        // No round to watch: until the keepalive is due or a round forms.
        std::unique_lock lock(mu_);
        cv_.wait_until(lock, until, [&] {
          return stop_.load() || (in_round_ && reason_.empty() && !finishing_);
        });
      }
    } catch (const RendezvousInterruptedError&) {
      return;  // stop_
    } catch (const std::exception& e) {
      std::lock_guard lock(mu_);
      fatal_ = s_.where + ": lost etcd: " + e.what();
      if (reason_.empty()) reason_ = fatal_;
      spdlog::error("{}", fatal_);
      return;
    }
  }
}

EtcdSession::Ms EtcdSession::fence(Ms ttl) { return std::max<Ms>(ttl - Ms(1500), Ms(500)); }

EtcdSession::Ms EtcdSession::lease_ttl(Ms keep_alive_interval, int keep_alive_max_attempt) {
  const auto ms = keep_alive_interval * keep_alive_max_attempt;
  return Ms(1000 * std::max<std::int64_t>(2, (ms.count() + 999) / 1000));
}

EtcdSession::Ms EtcdSession::silent_member_bound(Ms keep_alive_interval,
                                                 int keep_alive_max_attempt) {
  const Ms fenced = fence(lease_ttl(keep_alive_interval, keep_alive_max_attempt));
  return std::max<Ms>((fenced - keep_alive_interval) / 2, Ms(500));
}

std::string EtcdSession::check_fence() {
  std::lock_guard lock(mu_);
  if (cut_off_.load()) return reason_;
  if (!in_round_ || finishing_ || lease_lost_ || lease_.load() == 0) return {};
  const Ms ttl(ttl_ms_.load());
  const auto kept = Clock::time_point(Clock::duration(kept_at_.load()));
  const auto silent = std::chrono::duration_cast<Ms>(Clock::now() - kept);
  if (silent <= fence(ttl)) return {};
  cut_off_.store(true);
  reason_ = "cut off from etcd: no keepalive of lease " + me_ + " answered for " +
            std::to_string(silent.count() / 1000.0).substr(0, 5) + " s (its TTL is " +
            std::to_string(ttl.count() / 1000) + " s, after which the others count this node gone)";
  return reason_;
}

void EtcdSession::shutdown() {
  {
    std::lock_guard lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    stop_.store(true);
    cv_.notify_all();
  }
  watch_.cancel();  // wakes the background thread's watch
  if (thread_.joinable()) thread_.join();
  std::string fatal;
  {
    std::lock_guard lock(mu_);
    fatal = fatal_;
  }
  // Cut off: etcd is out of reach (a revoke would wait out request_timeout for nothing).
  if (lease_.load() != 0 && fatal.empty() && !cut_off_.load()) {
    try {
      // The descriptor and join key go now, not at the TTL; also after interrupt(), which
      // cancels the agent thread's calls: a client of its own, bounded by one
      // request_timeout.
      EtcdOptions o = with_cancel(s_.etcd, nullptr);
      o.failover_timeout = o.request_timeout;
      EtcdClient(o).lease_revoke(lease_.load());
    } catch (const std::exception& e) {
      spdlog::debug("{}: revoking lease {}: {}", s_.where, lease_hex(lease_.load()), e.what());
    }
  }
}

}  // namespace ddprun::rdzv
