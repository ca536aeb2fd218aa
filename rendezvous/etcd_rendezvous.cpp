#include "rendezvous/etcd_rendezvous.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "rendezvous/progress.h"
#include "rendezvous/rank_assignment.h"
#include "store/store.h"

namespace ddprun::rdzv {
namespace {

using Clock = EtcdRendezvous::Clock;
using Ms = EtcdRendezvous::Ms;

std::string hex(std::int64_t id) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(id));
  return buf;
}

// The last path component of an etcd key ("…/node/1a2b" -> "1a2b").
std::string leaf(const std::string& key) { return key.substr(key.rfind('/') + 1); }

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

std::string encode_round_state(const EtcdRoundState& s) {
  return nlohmann::json{
      {"round", s.round}, {"status", s.final ? "final" : "joining"}, {"members", s.members}}
      .dump();
}

std::optional<EtcdRoundState> decode_round_state(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("round") || !j["round"].is_number_integer() ||
      !j.contains("status") || !j["status"].is_string() || !j.contains("members") ||
      !j["members"].is_array()) {
    return std::nullopt;
  }
  EtcdRoundState s;
  s.round = j["round"].get<int>();
  const std::string status = j["status"].get<std::string>();
  if (s.round < 0 || (status != "final" && status != "joining")) return std::nullopt;
  s.final = status == "final";
  for (const auto& m : j["members"]) {
    if (!m.is_string()) return std::nullopt;
    s.members.push_back(m.get<std::string>());
  }
  return s;
}

EtcdRendezvous::EtcdRendezvous(Config config)
    : config_(std::move(config)),
      base_(config_.prefix + "/" + config_.run_id + "/"),
      client_(options_with(&interrupted_)),
      watch_(options_with(&interrupted_), base_),
      bg_watch_(options_with(&stop_), base_) {}

EtcdOptions EtcdRendezvous::options_with(const std::atomic<bool>* cancel) const {
  EtcdOptions o = config_.etcd;
  o.cancel = cancel;
  return o;
}

EtcdRendezvous::~EtcdRendezvous() { shutdown(); }

std::string EtcdRendezvous::where() const {
  return "rendezvous '" + config_.run_id + "' (etcd-v3, " + client_.where() + ")";
}

void EtcdRendezvous::throw_if_stopped() {
  if (interrupted_.load()) {
    throw RendezvousInterruptedError(where() + ": interrupted while waiting for the other nodes");
  }
}

void EtcdRendezvous::wait_for_change(std::int64_t revision, Clock::time_point until) {
  // The safety net: re-read at least every recheck_interval even without an event.
  until = std::min(until, Clock::now() + config_.recheck_interval);
  try {
    if (watch_.wait(revision, until).changed()) settle(interrupted_, until);
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
  if (closed_.load() || client_.get(key("closed"))) {
    closed_.store(true);
    throw RendezvousClosedError(where() + " is closed: the job has ended");
  }
}

void EtcdRendezvous::check_same_job() {
  if (!config_.job_check) return;
  const std::string mine = job_fingerprint(config_.job_command);
  if (client_.txn({{key("job"), EtcdCompare::Target::kCreate, 0, {}}}, {{key("job"), mine, 0}})) {
    return;
  }
  auto kv = client_.get(key("job"));
  if (kv && kv->value != mine) {
    throw RendezvousStateError(where() + ": run id '" + config_.run_id +
                               "' belongs to another job (" + kv->value + "); this node runs `" +
                               command_line(config_.job_command) +
                               "` (use another --rdzv-id, or --rdzv-conf job_check=0)");
  }
}

void EtcdRendezvous::ensure_lease() {
  {
    std::lock_guard lock(mu_);
    if (lease_.load() != 0 && !lease_lost_) return;
  }
  using namespace std::chrono;
  const auto ttl_ms = config_.keep_alive_interval * config_.keep_alive_max_attempt;
  const std::int64_t ttl = std::max<std::int64_t>(2, (ttl_ms.count() + 999) / 1000);
  const std::int64_t id = client_.lease_grant(ttl);
  NodeDesc d;
  d.addr = config_.advertise_addr;
  d.host = config_.hostname;
  d.pid = static_cast<long>(::getpid());
  d.node_rank = config_.node_rank;
  d.nproc = config_.local_world_size;
  d.restarts = restarts_spent_;
  if (config_.job_check) d.job = job_fingerprint(config_.job_command);
  {
    std::lock_guard lock(mu_);
    me_ = hex(id);
    lease_.store(id);
    lease_lost_ = false;
  }
  client_.put(key("node/" + me_), encode_node_desc(d), id);
  spdlog::debug("{}: lease {} ({} s)", where(), me_, ttl);
  if (!thread_.joinable()) {
    bg_client_ = std::make_unique<EtcdClient>(options_with(&stop_));
    thread_ = std::thread([this] { background(); });
  }
}

std::vector<std::string> EtcdRendezvous::live_members() {
  std::vector<std::string> out;
  for (const auto& kv : client_.get_prefix(key("node/"), /*keys_only=*/true)) {
    out.push_back(leaf(kv.key));
  }
  return out;
}

RendezvousInfo EtcdRendezvous::next_rendezvous() {
  throw_if_stopped();
  int left_round = -1;
  {
    std::lock_guard lock(mu_);
    if (!fatal_.empty()) throw RendezvousConnectionError(fatal_);
    if (in_round_) left_round = round_;
    in_round_ = false;
    reason_.clear();
    waiting_ = 0;
  }
  const auto deadline = Clock::now() + config_.join_timeout;
  check_closed();
  check_same_job();
  ensure_lease();
  auto next_log = Clock::now() + config_.progress_interval;
  std::int64_t newest_join = -1;   // the newest join key's create revision last seen
  auto changed_at = Clock::now();  // when it was seen first
  int waiting_in = -1;             // the round this node registered as a late joiner of
  for (;;) {
    throw_if_stopped();
    {
      std::lock_guard lock(mu_);
      if (!fatal_.empty()) throw RendezvousConnectionError(fatal_);
    }
    ensure_lease();  // again when it expired
    if (Clock::now() >= deadline) {
      throw RendezvousTimeoutError(where() + ": no round formed within join_timeout (" +
                                   std::to_string(config_.join_timeout.count() / 1000) +
                                   " s; min " + std::to_string(config_.min_nodes) + " nodes)");
    }
    std::int64_t revision = 0;  // the store revision of this look: wait for changes after it
    auto kv = client_.get(key("state"), &revision);
    if (!kv) {
      client_.txn({{key("state"), EtcdCompare::Target::kCreate, 0, {}}},
                  {{key("state"), encode_round_state({0, false, {}}), 0}});
      continue;
    }
    std::optional<EtcdRoundState> s = decode_round_state(kv->value);
    if (!s) {
      // Another program's key (a wrong etcd_prefix?) or a damaged one: one line.
      throw RendezvousStateError(where() + ": " + key("state") + " is not a ddprun round state ('" +
                                 store::escape_bytes(kv->value.substr(0, 80)) +
                                 "'): another program's keys under etcd_prefix '" + config_.prefix +
                                 "'? choose another --rdzv-conf etcd_prefix");
    }
    EtcdRoundState shown = *s;  // for the progress line: a joining round's joiners
    auto last_call = Clock::time_point::max();
    auto cas = [&](const EtcdRoundState& next) {
      return client_.txn({{key("state"), EtcdCompare::Target::kMod, kv->mod_revision, {}}},
                         {{key("state"), encode_round_state(next), 0}});
    };
    if (s->final) {
      const std::vector<std::string> live = live_members();
      const bool all_live = std::all_of(s->members.begin(), s->members.end(),
                                        [&](const auto& m) { return contains(live, m); });
      const bool mine = contains(s->members, me_);
      nodes_seen_.store(static_cast<int>(live.size()));
      if (mine && s->round != left_round && all_live) {
        if (auto info = formed(*s, deadline)) return *info;
        continue;
      }
      if (s->round == left_round || !all_live) {
        // The round is over for someone (a member left, died or wants a new round):
        // open the next one (this node joins it at the next look).
        cas({s->round + 1, false, {}});
        continue;
      }
      // A running round without this node: wait under it, so its members start a new
      // round (num_nodes_waiting() > 0 on their side).
      if (waiting_in != s->round) {
        client_.put(rkey(s->round, "waiting/" + me_), "1", lease_.load());
        waiting_in = s->round;
      }
      check_closed();
    } else {
      // A joining round: its joiners are the r<R>/join/<lease> keys, in the order they
      // were created; each lives with its agent's lease, so one gone is gone from here.
      std::vector<EtcdKv> joins = client_.get_prefix(rkey(s->round, "join/"), /*keys_only=*/true);
      std::sort(joins.begin(), joins.end(), [](const EtcdKv& a, const EtcdKv& b) {
        return a.create_revision < b.create_revision;
      });
      const auto at = std::find_if(joins.begin(), joins.end(),
                                   [&](const EtcdKv& j) { return leaf(j.key) == me_; });
      if (at == joins.end()) {
        client_.put(rkey(s->round, "join/" + me_), "", lease_.load());
        continue;
      }
      const int n = static_cast<int>(joins.size());
      nodes_seen_.store(n);
      for (const auto& j : joins) shown.members.push_back(leaf(j.key));
      if (joins.back().create_revision != newest_join) {
        newest_join = joins.back().create_revision;
        changed_at = Clock::now();
      }
      // The first MAX joiners are the round; a later one waits for the next round.
      if (at - joins.begin() < config_.max_nodes && n >= config_.min_nodes) {
        if (n >= config_.max_nodes || Clock::now() - changed_at >= config_.last_call_timeout) {
          EtcdRoundState next{s->round, true, {}};
          for (int i = 0; i < std::min(n, config_.max_nodes); ++i) {
            next.members.push_back(leaf(joins[static_cast<std::size_t>(i)].key));
          }
          cas(next);
          continue;
        }
        last_call = changed_at + config_.last_call_timeout;  // unless another node joins first
      }
    }
    if (Clock::now() >= next_log) {
      log_progress(shown, deadline);
      next_log = Clock::now() + config_.progress_interval;
    }
    wait_for_change(revision, std::min({deadline, next_log, last_call}));
  }
}

void EtcdRendezvous::log_progress(const EtcdRoundState& s, Clock::time_point deadline) {
  ProgressInput in;
  in.round = s.round;
  in.joined = static_cast<std::int64_t>(s.members.size());
  std::vector<EtcdKv> nodes = client_.get_prefix(key("node/"));
  for (std::size_t i = 0; i < s.members.size(); ++i) {
    for (const auto& kv : nodes) {
      if (leaf(kv.key) != s.members[i]) continue;
      ++in.described;
      if (auto d = decode_node_desc(kv.value, static_cast<int>(i))) in.descs.push_back(*d);
    }
  }
  in.retired = !s.final;
  in.min_nodes = config_.min_nodes;
  in.max_nodes = config_.max_nodes;
  in.secs_left = std::max<long long>(
      0, std::chrono::duration_cast<std::chrono::seconds>(deadline - Clock::now()).count());
  std::string line = describe_progress(in).line;
  if (s.final) line += " (round " + std::to_string(s.round) + " runs without this node; waiting)";
  spdlog::warn("{}: {}", where(), line);
}

std::optional<RendezvousInfo> EtcdRendezvous::formed(const EtcdRoundState& s,
                                                     Clock::time_point deadline) {
  const std::vector<EtcdKv> nodes = client_.get_prefix(key("node/"));
  const std::string job = job_fingerprint(config_.job_command);
  std::vector<NodeDesc> descs;
  int slot = -1;
  for (std::size_t i = 0; i < s.members.size(); ++i) {
    auto it = std::find_if(nodes.begin(), nodes.end(),
                           [&](const EtcdKv& kv) { return leaf(kv.key) == s.members[i]; });
    if (it == nodes.end()) return std::nullopt;  // gone meanwhile: the loop sees it
    std::optional<NodeDesc> d = decode_node_desc(it->value, static_cast<int>(i));
    if (!d) {
      throw RendezvousStateError(where() + ": corrupt node descriptor at " + it->key);
    }
    if (config_.job_check && d->job && *d->job != job) {
      throw RendezvousStateError(where() + ": node " + d->label() + " runs another job (" +
                                 *d->job + "), this node `" + command_line(config_.job_command) +
                                 "`");
    }
    if (s.members[i] == me_) slot = static_cast<int>(i);
    descs.push_back(std::move(*d));
  }
  const std::vector<int> ranks = group_ranks_or_throw(
      descs, /*static_ranks=*/false, config_.max_nodes, where(), node_rank_warned_);
  RendezvousInfo info = round_layout(descs, ranks, slot);
  info.round = s.round;
  info.use_agent_store = config_.agent_store;
  const std::string master_key = rkey(s.round, "master");
  if (info.group_rank == 0) {
    std::uint16_t port = 0;
    if (!config_.agent_store) {
      port = WorkersStore::port_for_worker_rank0(config_.workers_port, config_.bind_addr);
    } else {
      port = workers_store_.open_attempt(config_.bind_addr,
                                         static_cast<std::uint16_t>(config_.workers_port));
    }
    client_.put(master_key, encode_workers_store(config_.advertise_addr, port));
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
    auto state = client_.get(key("state"));
    auto now_s = state ? decode_round_state(state->value) : std::nullopt;
    if (!now_s || now_s->round != s.round || !now_s->final) return std::nullopt;
    const auto live = live_members();
    for (const auto& m : s.members) {
      if (!contains(live, m)) return std::nullopt;
    }
    throw_if_stopped();
    if (Clock::now() >= deadline) {
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
  auto kv = c.get(key("state"), &out.revision);
  auto s = kv ? decode_round_state(kv->value) : std::nullopt;
  if (!s || s->round != round) {
    out.reason = "round " + std::to_string(round) + " was superseded by round " +
                 (s ? std::to_string(s->round) : std::string("?"));
    return out;
  }
  std::set<std::string> live, done;
  for (const auto& n : c.get_prefix(key("node/"), true)) live.insert(leaf(n.key));
  const std::string waiting_prefix = rkey(round, "waiting/");
  for (const auto& n : c.get_prefix(rkey(round, ""), true)) {
    if (n.key.rfind(waiting_prefix, 0) == 0) ++out.waiting;
    if (n.key.rfind(rkey(round, "done/"), 0) == 0) done.insert(leaf(n.key));
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
        next_keepalive = Clock::now() + config_.keep_alive_interval;
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
  client_.put(key("closed"), "1");
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
  const auto deadline = Clock::now() + timeout;
  client_.put(rkey(round, "done/" + me_), "1");
  for (;;) {
    std::set<std::string> live, done;
    std::int64_t revision = 0;
    for (const auto& n : client_.get_prefix(key("node/"), true, &revision)) {
      live.insert(leaf(n.key));
    }
    for (const auto& n : client_.get_prefix(rkey(round, "done/"), true)) done.insert(leaf(n.key));
    if (std::all_of(members.begin(), members.end(),
                    [&](const auto& m) { return done.count(m) || !live.count(m); })) {
      return true;
    }
    if (Clock::now() >= deadline || interrupted_.load()) return false;
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
