#include "rendezvous/etcd/etcd_rendezvous.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "rendezvous/etcd/etcd_round.h"
#include "rendezvous/progress.h"
#include "rendezvous/rank_assignment.h"
#include "rendezvous/round_member.h"
#include "store/store.h"

namespace ddprun::rdzv {
namespace {

using Clock = EtcdRendezvous::Clock;
using Ms = EtcdRendezvous::Ms;

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

EtcdRendezvous::Config with_clock(EtcdRendezvous::Config config) {
  if (!config.round.now) config.round.now = [] { return Clock::now(); };
  return config;
}

}  // namespace

EtcdRendezvous::EtcdRendezvous(Config config)
    : config_(with_clock(std::move(config))),
      keys_{config_.prefix + "/" + config_.round.run_id + "/"},
      client_(options_with(&interrupted_)),
      watch_(options_with(&interrupted_), keys_.base),
      bg_watch_(options_with(&stop_), keys_.base) {}

EtcdOptions EtcdRendezvous::options_with(const std::atomic<bool>* cancel) const {
  EtcdOptions o = config_.etcd;
  o.cancel = cancel;
  return o;
}

EtcdRendezvous::~EtcdRendezvous() { shutdown(); }

std::string EtcdRendezvous::where() const {
  return rendezvous_where(config_.round.run_id, "etcd-v3, " + client_.where());
}

void EtcdRendezvous::throw_if_stopped() {
  if (interrupted_.load()) {
    throw RendezvousInterruptedError(where() + ": interrupted while waiting for the other nodes");
  }
}

void EtcdRendezvous::wait_for_change(std::int64_t revision, Clock::time_point until) {
  // The safety net: re-read at least every recheck_interval even without an event. The
  // watch waits real time: `until` (on the injected clock) becomes a real deadline.
  until = std::min(until, now() + config_.recheck_interval);
  const auto real_until = Clock::now() + (until - now());
  try {
    if (watch_.wait(revision, real_until).changed()) settle(interrupted_, real_until);
  } catch (const RendezvousInterruptedError&) {
    throw_if_stopped();
    throw;
  }
}

void EtcdRendezvous::settle(const std::atomic<bool>& stop, Clock::time_point until) const {
  // One change of a round of N nodes is usually one of a burst (N joins, N descriptors, N
  // exit-barrier keys) that wakes all N agents: each reading at every change would be N²
  // reads of N keys. Waiting 1 ms per node seen (at most kMaxSettle) lets a burst end
  // first; a 4-node round waits 4 ms.
  constexpr Ms kMaxSettle{200};
  const auto end = std::min(until, Clock::now() + std::min(kMaxSettle, Ms(nodes_seen_.load())));
  while (!stop.load() && Clock::now() < end) {
    std::this_thread::sleep_for(std::min<Clock::duration>(Ms(10), end - Clock::now()));
  }
}

void EtcdRendezvous::interrupt() {
  interrupted_.store(true);
  watch_.cancel();  // wakes a blocked wait_for_change()
}

void EtcdRendezvous::check_closed() {
  if (closed_.load() || client_.get(keys_.key("closed"))) {
    closed_.store(true);
    throw RendezvousClosedError(where() + " is closed: the job has ended");
  }
}

void EtcdRendezvous::check_same_job() {
  if (!config_.round.job_check) return;
  const std::string mine = job_fingerprint(config_.round.job_command);
  if (client_.txn({{keys_.key("job"), EtcdCompare::Target::kCreate, 0, {}}},
                  {{keys_.key("job"), mine, 0}})) {
    return;
  }
  auto kv = client_.get(keys_.key("job"));
  if (kv && kv->value != mine) {
    throw RendezvousStateError(another_job_error(where(), config_.round, kv->value));
  }
}

void EtcdRendezvous::ensure_lease() {
  {
    std::lock_guard lock(mu_);
    if (lease_.load() != 0 && !lease_lost_) return;
  }
  using namespace std::chrono;
  const auto ttl_ms = config_.round.heartbeat_threshold();
  const std::int64_t ttl = std::max<std::int64_t>(2, (ttl_ms.count() + 999) / 1000);
  const std::int64_t id = client_.lease_grant(ttl);
  const NodeDesc d = this_node_desc(config_.round, /*rdzv_host=*/false);
  {
    std::lock_guard lock(mu_);
    me_ = lease_hex(id);
    lease_.store(id);
    lease_lost_ = false;
  }
  client_.put(keys_.key("node/" + me_), encode_node_desc(d), id);
  spdlog::debug("{}: lease {} ({} s)", where(), me_, ttl);
  if (!thread_.joinable()) {
    bg_client_ = std::make_unique<EtcdClient>(options_with(&stop_));
    thread_ = std::thread([this] { background(); });
  }
}

std::vector<std::string> EtcdRendezvous::live_members() {
  std::vector<std::string> out;
  for (const auto& kv : client_.get_prefix(keys_.key("node/"), /*keys_only=*/true)) {
    out.push_back(key_leaf(kv.key));
  }
  return out;
}

RendezvousInfo EtcdRendezvous::next_rendezvous() {
  throw_if_stopped();
  JoinView v;
  v.min_nodes = config_.round.min_nodes;
  v.max_nodes = config_.round.max_nodes;
  v.last_call_timeout = config_.round.last_call_timeout;
  {
    std::lock_guard lock(mu_);
    if (!fatal_.empty()) throw RendezvousConnectionError(fatal_);
    if (in_round_) v.left_round = round_;
    in_round_ = false;
    reason_.clear();
    waiting_ = 0;
  }
  const auto deadline = now() + config_.round.join_timeout;
  check_closed();
  check_same_job();
  ensure_lease();
  auto next_log = now() + config_.round.progress_interval;
  std::int64_t newest_join = -1;  // the newest join key's create revision last seen
  v.changed_at = now();           // when it was seen first
  int waiting_in = -1;            // the round this node registered as a late joiner of
  for (;;) {
    throw_if_stopped();
    {
      std::lock_guard lock(mu_);
      if (!fatal_.empty()) throw RendezvousConnectionError(fatal_);
    }
    ensure_lease();  // again when it expired
    if (now() >= deadline) {
      throw RendezvousTimeoutError(where() + ": no round formed within join_timeout (" +
                                   std::to_string(config_.round.join_timeout.count() / 1000) +
                                   " s; min " + std::to_string(config_.round.min_nodes) +
                                   " nodes)");
    }
    std::int64_t revision = 0;  // the store revision of this look: wait for changes after it
    auto kv = client_.get(keys_.key("state"), &revision);
    v.state.reset();
    v.live.clear();
    v.joins.clear();
    v.me = me_;
    if (kv) {
      v.state = decode_round_state(kv->value);
      if (!v.state) {
        // Another program's key (a wrong etcd_prefix?) or a damaged one: one line.
        throw RendezvousStateError(where() + ": " + keys_.key("state") +
                                   " is not a ddprun round state ('" +
                                   store::escape_bytes(kv->value.substr(0, 80)) +
                                   "'): another program's keys under etcd_prefix '" +
                                   config_.prefix + "'? choose another --rdzv-conf etcd_prefix");
      }
      if (v.state->final) {
        v.live = live_members();
        nodes_seen_.store(static_cast<int>(v.live.size()));
      } else {
        std::vector<EtcdKv> joins =
            client_.get_prefix(keys_.rkey(v.state->round, "join/"), /*keys_only=*/true);
        std::sort(joins.begin(), joins.end(), [](const EtcdKv& a, const EtcdKv& b) {
          return a.create_revision < b.create_revision;
        });
        for (const auto& j : joins) v.joins.push_back(key_leaf(j.key));
        nodes_seen_.store(static_cast<int>(joins.size()));
        if (!joins.empty() && joins.back().create_revision != newest_join) {
          newest_join = joins.back().create_revision;
          v.changed_at = now();
        }
      }
    }
    v.now = now();
    const JoinStep step = next_join_step(v);
    const auto cas = [&](const EtcdRoundState& next) {
      client_.txn({{keys_.key("state"), EtcdCompare::Target::kMod, kv->mod_revision, {}}},
                  {{keys_.key("state"), encode_round_state(next), 0}});
    };
    switch (step.kind) {
      case JoinStep::kCreateState:
        client_.txn({{keys_.key("state"), EtcdCompare::Target::kCreate, 0, {}}},
                    {{keys_.key("state"), encode_round_state(step.next), 0}});
        continue;
      case JoinStep::kAddJoin:
        client_.put(keys_.rkey(v.state->round, "join/" + me_), "", lease_.load());
        continue;
      case JoinStep::kClose:
      case JoinStep::kOpenNext:
        cas(step.next);
        continue;
      case JoinStep::kFormed:
        if (auto info = formed(*v.state, deadline)) return *info;
        continue;
      case JoinStep::kWaitUnder:
        if (waiting_in != v.state->round) {
          client_.put(keys_.rkey(v.state->round, "waiting/" + me_), "1", lease_.load());
          waiting_in = v.state->round;
        }
        check_closed();
        break;
      case JoinStep::kWait:
        break;
    }
    if (now() >= next_log) {
      EtcdRoundState shown = *v.state;  // for the progress line: a joining round's joiners
      if (!shown.final) shown.members = v.joins;
      log_progress(shown, deadline);
      next_log = now() + config_.round.progress_interval;
    }
    wait_for_change(revision, std::min({deadline, next_log, step.until}));
  }
}

void EtcdRendezvous::log_progress(const EtcdRoundState& s, Clock::time_point deadline) {
  std::vector<EtcdKv> nodes = client_.get_prefix(keys_.key("node/"));
  std::size_t described = 0;
  std::vector<NodeDesc> descs;
  for (std::size_t i = 0; i < s.members.size(); ++i) {
    for (const auto& kv : nodes) {
      if (key_leaf(kv.key) != s.members[i]) continue;
      ++described;
      if (auto d = decode_node_desc(kv.value, static_cast<int>(i))) descs.push_back(*d);
    }
  }
  const ProgressInput in =
      progress_input(config_.round, s.round, static_cast<std::int64_t>(s.members.size()), described,
                     std::move(descs), /*retired=*/!s.final,
                     /*static_ranks=*/false, deadline);
  std::string line = describe_progress(in).line;
  if (s.final) line += " (round " + std::to_string(s.round) + " runs without this node; waiting)";
  spdlog::warn("{}: {}", where(), line);
}

std::optional<RendezvousInfo> EtcdRendezvous::formed(const EtcdRoundState& s,
                                                     Clock::time_point deadline) {
  const std::vector<EtcdKv> nodes = client_.get_prefix(keys_.key("node/"));
  std::vector<NodeDesc> descs;
  int slot = -1;
  for (std::size_t i = 0; i < s.members.size(); ++i) {
    auto it = std::find_if(nodes.begin(), nodes.end(),
                           [&](const EtcdKv& kv) { return key_leaf(kv.key) == s.members[i]; });
    if (it == nodes.end()) return std::nullopt;  // gone meanwhile: the loop sees it
    std::optional<NodeDesc> d = decode_node_desc(it->value, static_cast<int>(i));
    if (!d) {
      throw RendezvousStateError(where() + ": corrupt node descriptor at " + it->key);
    }
    if (s.members[i] == me_) slot = static_cast<int>(i);
    descs.push_back(std::move(*d));
  }
  check_member_jobs(descs, s.round, config_.round, where());
  const std::vector<int> ranks = group_ranks_or_throw(
      descs, /*static_ranks=*/false, config_.round.max_nodes, where(), node_rank_warned_);
  RendezvousInfo info = round_layout(descs, ranks, slot);
  info.round = s.round;
  info.use_agent_store = config_.round.agent_store;
  const std::string master_key = keys_.rkey(s.round, "master");
  if (info.group_rank == 0) {
    const std::uint16_t port = workers_store_port(config_.round, workers_store_,
                                                  /*shared_store_port=*/0, {}, where());
    client_.put(master_key, encode_workers_store(config_.round.advertise_addr, port));
  } else {
    workers_store_.stop();
  }
  for (;;) {
    std::int64_t revision = 0;
    if (auto kv = client_.get(master_key, &revision)) {
      std::optional<Endpoint> ep = decode_workers_store(kv->value);
      if (!ep) throw RendezvousStateError(where() + ": corrupt workers' store at " + master_key);
      info.master_addr = ep->host;
      info.master_port = static_cast<std::uint16_t>(ep->port);
      break;
    }
    // Group rank 0 may be gone: the round state then moves on.
    auto state = client_.get(keys_.key("state"));
    auto now_s = state ? decode_round_state(state->value) : std::nullopt;
    if (!now_s || now_s->round != s.round || !now_s->final) return std::nullopt;
    const auto live = live_members();
    for (const auto& m : s.members) {
      if (!contains(live, m)) return std::nullopt;
    }
    throw_if_stopped();
    if (now() >= deadline) {
      throw RendezvousTimeoutError(where() + ": group rank 0 did not publish the workers' store");
    }
    wait_for_change(revision, deadline);
  }
  {
    std::lock_guard lock(mu_);
    in_round_ = true;
    round_ = s.round;
    members_ = s.members;
    reason_.clear();
    waiting_ = 0;
    cv_.notify_all();  // the background thread starts watching the round
  }
  spdlog::info("{}: round {} formed: {} node(s), this node is group rank {}", where(), s.round,
               info.group_world_size, info.group_rank);
  return info;
}

EtcdRendezvous::Look EtcdRendezvous::look(EtcdClient& c, int round,
                                          const std::vector<std::string>& members) {
  Look out;
  auto kv = c.get(keys_.key("state"), &out.revision);
  auto s = kv ? decode_round_state(kv->value) : std::nullopt;
  if (!s || s->round != round) {
    out.reason = "round " + std::to_string(round) + " was superseded by round " +
                 (s ? std::to_string(s->round) : std::string("?"));
    return out;
  }
  std::set<std::string> live, done;
  for (const auto& n : c.get_prefix(keys_.key("node/"), true)) live.insert(key_leaf(n.key));
  const std::string waiting_prefix = keys_.rkey(round, "waiting/");
  for (const auto& n : c.get_prefix(keys_.rkey(round, ""), true)) {
    if (n.key.rfind(waiting_prefix, 0) == 0) ++out.waiting;
    if (n.key.rfind(keys_.rkey(round, "done/"), 0) == 0) done.insert(key_leaf(n.key));
  }
  for (const auto& m : members) {
    if (!live.count(m) && !done.count(m)) {
      out.reason = "a node of round " + std::to_string(round) + " (lease " + m +
                   ") left or its lease expired";
      return out;
    }
  }
  if (out.waiting > 0) {
    out.reason = std::to_string(out.waiting) + " node(s) waiting to join";
  }
  return out;
}

void EtcdRendezvous::background() {
  auto next_keepalive = Clock::now();
  while (!stop_.load()) {
    try {
      if (Clock::now() >= next_keepalive) {
        next_keepalive = Clock::now() + config_.round.keep_alive_interval;
        const std::int64_t lease = lease_.load();
        if (bg_client_->lease_keepalive(lease) == 0) {
          std::lock_guard lock(mu_);
          if (lease == lease_.load() && !lease_lost_) {
            lease_lost_ = true;
            if (reason_.empty()) reason_ = "this node's lease " + me_ + " expired";
          }
        }
      }
      bool in_round = false;
      int round = 0;
      std::vector<std::string> members;
      {
        std::lock_guard lock(mu_);
        in_round = in_round_ && reason_.empty();
        round = round_;
        members = members_;
      }
      std::int64_t revision = -1;
      if (in_round) {
        Look l = look(*bg_client_, round, members);
        std::lock_guard lock(mu_);
        if (in_round_ && round_ == round) {
          waiting_ = l.waiting;
          if (reason_.empty()) reason_ = l.reason;
          if (reason_.empty()) revision = l.revision;
        }
      }
      const auto until = std::min(next_keepalive, Clock::now() + config_.recheck_interval);
      if (revision >= 0) {
        // Look again as soon as any key of the run changes (a late joiner's waiting key,
        // a member's descriptor gone with its lease, the state), or the safety net.
        if (bg_watch_.wait(revision, until).changed()) settle(stop_, until);
      } else {
        // No round to watch: until the keepalive is due or a round forms.
        std::unique_lock lock(mu_);
        cv_.wait_until(lock, until, [&] { return stop_.load() || (in_round_ && reason_.empty()); });
      }
    } catch (const RendezvousInterruptedError&) {
      return;  // stop_
    } catch (const std::exception& e) {
      std::lock_guard lock(mu_);
      fatal_ = where() + ": lost etcd: " + e.what();
      if (reason_.empty()) reason_ = fatal_;
      spdlog::error("{}", fatal_);
      return;
    }
  }
}

int EtcdRendezvous::num_nodes_waiting() {
  std::lock_guard lock(mu_);
  return waiting_;
}

bool EtcdRendezvous::needs_new_round() {
  std::lock_guard lock(mu_);
  return in_round_ && !reason_.empty();
}

std::string EtcdRendezvous::new_round_reason() {
  std::lock_guard lock(mu_);
  return reason_;
}

bool EtcdRendezvous::needs_new_round_now() {
  int round = 0;
  std::vector<std::string> members;
  {
    std::lock_guard lock(mu_);
    if (!in_round_) return false;
    if (!reason_.empty()) return true;
    round = round_;
    members = members_;
  }
  Look l;
  try {
    l = look(client_, round, members);
  } catch (const std::exception& e) {
    l.reason = e.what();
  }
  std::lock_guard lock(mu_);
  if (reason_.empty()) reason_ = l.reason;
  return !reason_.empty();
}

bool EtcdRendezvous::is_closed() { return closed_.load(); }

void EtcdRendezvous::set_closed() {
  client_.put(keys_.key("closed"), "1");
  closed_.store(true);
}

bool EtcdRendezvous::exit_barrier(std::chrono::milliseconds timeout) {
  int round = 0;
  std::vector<std::string> members;
  {
    std::lock_guard lock(mu_);
    if (!in_round_) return true;
    round = round_;
    members = members_;
  }
  const auto deadline = now() + timeout;
  client_.put(keys_.rkey(round, "done/" + me_), "1");
  for (;;) {
    std::set<std::string> live, done;
    std::int64_t revision = 0;
    for (const auto& n : client_.get_prefix(keys_.key("node/"), true, &revision)) {
      live.insert(key_leaf(n.key));
    }
    for (const auto& n : client_.get_prefix(keys_.rkey(round, "done/"), true))
      done.insert(key_leaf(n.key));
    if (std::all_of(members.begin(), members.end(),
                    [&](const auto& m) { return done.count(m) || !live.count(m); })) {
      return true;
    }
    if (now() >= deadline || interrupted_.load()) return false;
    try {
      wait_for_change(revision, deadline);
    } catch (const RendezvousInterruptedError&) {
      return false;
    }
  }
}

void EtcdRendezvous::shutdown() {
  {
    std::lock_guard lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    stop_.store(true);
    cv_.notify_all();
  }
  bg_watch_.cancel();  // wakes the background thread's watch
  if (thread_.joinable()) thread_.join();
  std::string fatal;
  {
    std::lock_guard lock(mu_);
    fatal = fatal_;
  }
  if (lease_.load() != 0 && fatal.empty()) {
    try {
      // The descriptor and join key go now, not at the TTL; also after interrupt(), which
      // cancels client_'s calls: a client of its own, bounded by one request_timeout.
      EtcdOptions o = options_with(nullptr);
      o.failover_timeout = o.request_timeout;
      EtcdClient(o).lease_revoke(lease_.load());
    } catch (const std::exception& e) {
      spdlog::debug("{}: revoking lease {}: {}", where(), me_, e.what());
    }
  }
  workers_store_.stop();
}

}  // namespace ddprun::rdzv
