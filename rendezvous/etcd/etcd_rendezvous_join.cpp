// etcd_rendezvous_join.cpp: how EtcdRendezvous forms a round (next_rendezvous()): the
// job check, the lease and descriptor, then the join loop as steps: look (one look at
// the keys, into a JoinView), decide (next_join_step(), etcd_round.h), act, log the
// progress, wait for a change; a formed round's members, ranks and workers' store.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "rendezvous/etcd/etcd_rendezvous.h"
#include "rendezvous/etcd/etcd_round.h"
#include "rendezvous/progress.h"
#include "rendezvous/round_layout.h"
#include "rendezvous/round_member.h"
#include "store/store.h"

namespace ddprun::rdzv {
void EtcdRendezvous::refuse_if_left_out() {
  // As c10d's (store_rendezvous_join.cpp): a node --preflight left out, started again.
  if (left_out_checked_) return;
  const std::string& addr = config_.round.advertise_addr;
  if (auto kv = addr.empty() ? std::nullopt : client_.get(keys_.key("left_out/" + addr))) {
    throw RendezvousStateError(where() + ": this node (" + addr +
                               ") was left out of this job by the pre-flight check (" + kv->value +
                               "); it does not rejoin it (--blocklist keeps it out of later jobs)");
  }
  left_out_checked_ = true;
}

void EtcdRendezvous::leave_out(const std::string& address, const std::string& why) {
  if (!address.empty()) client_.put(keys_.key("left_out/" + address), why);
}

void EtcdRendezvous::check_same_job() {
  if (!config_.round.job_check) return;
  const std::string mine = job_fingerprint(config_.round.job_command);
  // A read first: the first agent writes the key, every other one only reads it (a txn
  // with a put is a raft write even when its compare fails).
  auto kv = client_.get(keys_.key("job"));
  if (!kv && client_.txn({{keys_.key("job"), EtcdCompare::Target::kCreate, 0, {}}},
                         {{keys_.key("job"), mine, 0}})) {
    return;
  }
  if (!kv) kv = client_.get(keys_.key("job"));
  if (kv && kv->value != mine) {
    throw RendezvousStateError(another_job_error(where(), config_.round, kv->value));
  }
}

bool EtcdRendezvous::ensure_lease() {
  // A new lease gets this node's descriptor; so does a new restart count, which every
  // node reads from the descriptors when the round forms (layout_round takes the most).
  const bool fresh = session_.ensure_lease(client_);
  if (!fresh && described_restarts_ == restarts_spent()) return false;
  described_restarts_ = restarts_spent();
  me_ = session_.id();
  client_.put(keys_.key("node/" + me_),
              encode_node_desc(this_node_desc(config_.round, /*rdzv_host=*/false,
                                              /*node_rank_defaulted=*/false, restarts_spent())),
              session_.lease());
  return fresh;
}

std::vector<std::string> EtcdRendezvous::live_members(const EtcdRoundState& s) {
  // A member's join key lives with its lease (and goes when it leaves the round): as many
  // join keys as members is all of them live (a count: no key in the answer); fewer, and
  // the keys say who.
  const std::string prefix = keys_.rkey(s.round, "join/");
  if (client_.count(prefix) >= static_cast<std::int64_t>(s.members.size())) return s.members;
  std::vector<std::string> out;
  for (const auto& kv : client_.get_prefix(prefix, /*keys_only=*/true)) {
    out.push_back(key_leaf(kv.key));
  }
  return out;
}

std::optional<std::vector<std::string>> EtcdRendezvous::read_member_descs(
    const std::vector<std::string>& members) {
  const std::vector<EtcdKv> nodes = client_.get_prefix(keys_.key("node/"));
  std::vector<std::string> out;
  for (const auto& m : members) {
    auto it = std::find_if(nodes.begin(), nodes.end(),
                           [&](const EtcdKv& kv) { return key_leaf(kv.key) == m; });
    if (it == nodes.end()) return std::nullopt;  // gone meanwhile: the next look sees it
    out.push_back(it->value);
  }
  return out;
}

void EtcdRendezvous::close_round(const EtcdRoundState& next, std::int64_t state_revision) {
  // The closing node reads the members' descriptors once and writes them, in member
  // order, with the final state: each member then reads one key (r<R>/members), not N.
  const std::optional<std::vector<std::string>> descs = read_member_descs(next.members);
  if (!descs) return;  // a member gone meanwhile: the next look sees its join key gone
  client_.txn({{keys_.key("state"), EtcdCompare::Target::kMod, state_revision, {}}},
              {{keys_.key("state"), encode_round_state(next), 0},
               {keys_.rkey(next.round, "members"), encode_members(*descs), 0}});
}

RendezvousInfo EtcdRendezvous::next_rendezvous() {
  throw_if_stopped();
  JoinMemory m;
  board_.reset();
  m.left_round = session_.leave_round();
  if (m.left_round >= 0 && !me_.empty()) {
    // Leaving a round: this node's join key of it goes, which the other members' sessions
    // watch (they leave it too, as the next look here opens the next round).
    client_.del(keys_.rkey(m.left_round, "join/" + me_));
  }
  m.deadline = now() + config_.round.join_timeout;
  check_closed();
  check_same_job();
  refuse_if_left_out();
  ensure_lease();
  m.next_log = now() + config_.round.progress_interval;
  m.changed_at = now();
  for (;;) {
    throw_if_stopped();
    session_.check_alive();
    const std::string lease_was = me_;
    if (ensure_lease()) joining_again(lease_was, m);  // it expired
    if (now() >= m.deadline) throw join_timeout_error(m.round_seen, std::nullopt);
    const JoinLook l = look(m);
    const JoinStep step = next_join_step(l.view);
    std::optional<RendezvousInfo> info;
    bool wait = false;
    try {
      wait = act(step, l, m, info);
    } catch (const EtcdError& e) {
      // etcd's NOT_FOUND to a write: the lease it was written with is gone.
      if (e.grpc_code() != EtcdError::kNotFound) throw;
      session_.lease_gone(session_.lease());
      continue;  // the next turn grants a new one
    }
    if (!wait) {
      if (info) return std::move(*info);
      continue;  // look again at once
    }
    maybe_log_progress(l, m);
    // The oldest joiner watches the join keys; everyone else the state key alone (one event
    // a round, not one per node).
    watch_.set_prefix(step.watch_joins ? keys_.rkey(l.view.state->round, "join/")
                                       : keys_.key("state"));
    wait_for_change(l.revision, std::min({m.deadline, m.next_log, step.until}),
                    /*burst=*/step.watch_joins);
  }
}

EtcdRendezvous::JoinLook EtcdRendezvous::look(JoinMemory& m) {
  JoinLook l;
  JoinView& v = l.view;
  v.min_nodes = config_.round.min_nodes;
  v.max_nodes = config_.round.max_nodes;
  v.last_call_timeout = config_.round.last_call_timeout;
  v.left_round = m.left_round;
  v.me = me_;
  auto kv = client_.get(keys_.key("state"), &l.revision);
  if (kv) {
    l.state_revision = kv->mod_revision;
    v.state = decode_round_state(kv->value);
    if (!v.state) {
      // Another program's key (a wrong etcd_prefix?) or a damaged one: one line.
      throw RendezvousStateError(where() + ": " + keys_.key("state") +
                                 " is not a ddprun round state ('" +
                                 store::escape_bytes(kv->value.substr(0, 80)) +
                                 "'): another program's keys under etcd_prefix '" + config_.prefix +
                                 "'? choose another --rdzv-conf etcd_prefix");
    }
    m.round_seen = v.state->round;
    if (v.state->final) {
      v.live = live_members(*v.state);
      session_.set_nodes_seen(static_cast<int>(v.state->members.size()));
    } else if (m.joined_round == v.state->round && m.joined_as == me_) {
      look_at_joins(l, m);
    }
  }
  v.now = now();
  v.changed_at = m.changed_at;
  return l;
}

void EtcdRendezvous::look_at_joins(JoinLook& l, JoinMemory& m) {
  // One answer of one key: is this node's join key the oldest? Only the oldest reads them
  // all (and watches them).
  JoinView& v = l.view;
  const std::string prefix = keys_.rkey(v.state->round, "join/");
  std::int64_t count = 0;
  auto oldest = client_.oldest(prefix, &count);
  v.joined = true;
  v.first = oldest && key_leaf(oldest->key) == me_;
  session_.set_nodes_seen(static_cast<int>(count));
  if (!v.first) return;
  std::vector<EtcdKv> joins = client_.get_prefix(prefix, /*keys_only=*/true, &l.revision);
  std::sort(joins.begin(), joins.end(),
            [](const EtcdKv& a, const EtcdKv& b) { return a.create_revision < b.create_revision; });
  for (const auto& j : joins) v.joins.push_back(key_leaf(j.key));
  if (!joins.empty() && joins.back().create_revision != m.newest_join) {
    m.newest_join = joins.back().create_revision;
    m.changed_at = now();
  }
}

bool EtcdRendezvous::act(const JoinStep& step, const JoinLook& l, JoinMemory& m,
                         std::optional<RendezvousInfo>& info) {
  const std::string state_key = keys_.key("state");
  switch (step.kind) {
    case JoinStep::kCreateState:
      client_.txn({{state_key, EtcdCompare::Target::kCreate, 0, {}}},
                  {{state_key, encode_round_state(step.next), 0}});
      return false;
    case JoinStep::kAddJoin:
      client_.put(keys_.rkey(l.view.state->round, "join/" + me_), "", session_.lease());
      m.joined_round = l.view.state->round;
      m.joined_as = me_;
      m.newest_join = -1;
      m.changed_at = now();
      return false;
    case JoinStep::kClose:
      close_round(step.next, l.state_revision);
      return false;
    case JoinStep::kOpenNext:
      client_.txn({{state_key, EtcdCompare::Target::kMod, l.state_revision, {}}},
                  {{state_key, encode_round_state(step.next), 0}});
      return false;
    case JoinStep::kFormed:
      info = formed(*l.view.state, m.deadline);
      return false;
    case JoinStep::kWaitUnder:
      wait_under(l.view.state->round, m);
      return true;
    case JoinStep::kWait:
      return true;
  }
  return true;
}

void EtcdRendezvous::joining_again(const std::string& expired, JoinMemory& m) {
  // The agent was not heard for the lease's TTL (stalled, or starved of CPU), and etcd
  // deleted its keys: it joins again as a new node.
  spdlog::warn(
      "{}: this node's lease {} expired while it joined (no keepalive answered for "
      "its TTL, {} s); joining again as {}",
      where(), expired,
      EtcdSession::lease_ttl(config_.round.keep_alive_interval,
                             config_.round.keep_alive_max_attempt)
              .count() /
          1000,
      me_);
  m.waiting_in = -1;
  m.joined_round = -1;
  m.joined_as.clear();
}

void EtcdRendezvous::wait_under(int round, JoinMemory& m) {
  if (m.waiting_in != round) {
    client_.put(keys_.rkey(round, "waiting/" + me_), "1", session_.lease());
    // A joiner beyond MAX: its join key goes, so that the round's join keys are its
    // members' (whose count tells them all live).
    if (m.joined_round == round) client_.del(keys_.rkey(round, "join/" + me_));
    m.waiting_in = round;
  }
  check_closed();
}

void EtcdRendezvous::maybe_log_progress(const JoinLook& l, JoinMemory& m) {
  if (now() < m.next_log) return;
  EtcdRoundState shown = *l.view.state;  // for the progress line: a joining round's joiners
  if (!shown.final) {
    shown.members = l.view.joins;
    if (!l.view.first) {
      for (auto& j : client_.get_prefix(keys_.rkey(shown.round, "join/"), true)) {
        shown.members.push_back(key_leaf(j.key));
      }
    }
  }
  log_progress(shown, m.deadline, m.progress_lines++);
  m.next_log = now() + config_.round.progress_interval;
}

void EtcdRendezvous::log_progress(const EtcdRoundState& s, Clock::time_point deadline, int nth) {
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
  spdlog::log(progress_level(nth), "{}: {}", where(), line);
}

std::optional<std::vector<NodeDesc>> EtcdRendezvous::member_descs(const EtcdRoundState& s) {
  const std::string members_key = keys_.rkey(s.round, "members");
  const auto kv = client_.get(members_key);
  std::optional<MembersList> list = kv ? decode_members(kv->value) : std::nullopt;
  if (list && list->in_node_keys) {  // too many for one key: every descriptor from node/
    std::optional<std::vector<std::string>> descs = read_member_descs(s.members);
    if (!descs) return std::nullopt;  // gone meanwhile: the loop sees it
    list->descs = std::move(*descs);
  }
  if (!list || list->descs.size() != s.members.size()) {
    throw RendezvousStateError(where() + ": corrupt or missing member descriptors at " +
                               members_key);
  }
  std::vector<NodeDesc> out;
  for (std::size_t i = 0; i < list->descs.size(); ++i) {
    std::optional<NodeDesc> d = decode_node_desc(list->descs[i], static_cast<int>(i));
    if (!d) {
      throw RendezvousStateError(where() + ": corrupt node descriptor " + std::to_string(i) +
                                 " at " + members_key);
    }
    out.push_back(std::move(*d));
  }
  return out;
}

std::optional<RendezvousInfo> EtcdRendezvous::formed(const EtcdRoundState& s,
                                                     Clock::time_point deadline) {
  const std::optional<std::vector<NodeDesc>> descs = member_descs(s);
  if (!descs) return std::nullopt;
  const auto me = std::find(s.members.begin(), s.members.end(), me_);
  if (me == s.members.end()) return std::nullopt;  // not a member after all: look again
  // The same layout, refusals and gloo hint as c10d's round leader computes.
  const RoundLayout layout =
      layout_round(*descs, s.round, config_.round, /*static_ranks=*/false, /*master_host=*/"");
  if (!layout.refused.empty()) throw RendezvousStateError(where() + ": " + layout.refused);
  const SlotLayout& mine = layout.slots[static_cast<std::size_t>(me - s.members.begin())];
  if (mine.note) warn_node_rank_ignored(layout.note);
  RendezvousInfo info = slot_info(mine);
  info.round = s.round;
  info.use_agent_store = config_.round.agent_store;
  const std::optional<Endpoint> master = workers_store_of(s, info.group_rank == 0, deadline);
  if (!master) return std::nullopt;
  info.master_addr = master->host;
  info.master_port = static_cast<std::uint16_t>(master->port);
  info.gloo_socket_ifname = gloo_socket_ifname(mine);
  info.node_address = config_.round.advertise_addr;
  session_.enter_round(s.round, s.members);  // its thread starts watching the round
  board_ = std::make_unique<EtcdJobBoard>(board_client_, keys_, s.round, info.group_rank,
                                          static_cast<int>(s.members.size()));
  log_round_formed(info);
  return info;
}

std::optional<Endpoint> EtcdRendezvous::workers_store_of(const EtcdRoundState& s, bool rank0,
                                                         Clock::time_point deadline) {
  const std::string master_key = keys_.rkey(s.round, "master");
  watch_.set_prefix(master_key);  // one event; the safety net looks at the state
  if (rank0) {
    const std::uint16_t port = workers_store_port(config_.round, workers_store_,
                                                  /*shared_store_port=*/0, {}, where());
    client_.put(master_key, encode_workers_store(config_.round.advertise_addr, port));
  } else {
    workers_store_.stop();
  }
  for (;;) {
    std::int64_t revision = 0;
    if (auto stored = client_.get(master_key, &revision)) {
      std::optional<Endpoint> ep = decode_workers_store(stored->value);
      if (!ep) throw RendezvousStateError(where() + ": corrupt workers' store at " + master_key);
      return ep;
    }
    // Group rank 0 may be gone: the round state then moves on.
    auto state = client_.get(keys_.key("state"));
    auto now_s = state ? decode_round_state(state->value) : std::nullopt;
    if (!now_s || now_s->round != s.round || !now_s->final) return std::nullopt;
    const auto live = live_members(s);
    for (const auto& m : s.members) {
      if (std::find(live.begin(), live.end(), m) == live.end()) return std::nullopt;
    }
    throw_if_stopped();
    if (now() >= deadline) {
      throw join_timeout_error(s.round, std::nullopt,
                               "group rank 0 did not publish the workers' store");
    }
    wait_for_change(revision, deadline, /*burst=*/false);
  }
}

}  // namespace ddprun::rdzv
