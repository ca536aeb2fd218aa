// etcd_rendezvous_join.cpp: how EtcdRendezvous forms a round (next_rendezvous()): the
// job check, the lease and descriptor, the join loop acting on next_join_step()
// (etcd_round.h), the progress line, and a formed round's ranks and workers' store.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "rendezvous/etcd/etcd_rendezvous.h"
#include "rendezvous/etcd/etcd_round.h"
#include "rendezvous/progress.h"
#include "rendezvous/round_layout.h"
#include "rendezvous/round_member.h"
#include "store/store.h"

namespace ddprun::rdzv {
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

void EtcdRendezvous::ensure_lease() {
  // A new lease gets this node's descriptor; so does a new restart count, which every
  // node reads from the descriptors when the round forms (layout_round takes the most).
  const bool fresh = session_.ensure_lease(client_);
  if (!fresh && described_restarts_ == restarts_spent()) return;
  described_restarts_ = restarts_spent();
  me_ = session_.id();
  client_.put(keys_.key("node/" + me_),
              encode_node_desc(this_node_desc(config_.round, /*rdzv_host=*/false,
                                              /*node_rank_defaulted=*/false, restarts_spent())),
              session_.lease());
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

void EtcdRendezvous::close_round(const EtcdRoundState& next, std::int64_t state_revision) {
  // The closing node reads the members' descriptors once and writes them, in member
  // order, with the final state: each member then reads one key (r<R>/members), not N.
  std::vector<EtcdKv> nodes = client_.get_prefix(keys_.key("node/"));
  nlohmann::json descs = nlohmann::json::array();
  for (const auto& m : next.members) {
    auto it = std::find_if(nodes.begin(), nodes.end(),
                           [&](const EtcdKv& kv) { return key_leaf(kv.key) == m; });
    if (it == nodes.end()) return;  // gone meanwhile: the next look sees its join key gone
    descs.push_back(it->value);
  }
  // etcd refuses a request over --max-request-bytes (1.5 MiB by default): past 1 MiB of
  // descriptors (some 3000 nodes) the members read node/ as before ("node/" in the key).
  std::string value = descs.dump();
  if (value.size() > (1u << 20)) value = "\"node/\"";
  client_.txn({{keys_.key("state"), EtcdCompare::Target::kMod, state_revision, {}}},
              {{keys_.key("state"), encode_round_state(next), 0},
               {keys_.rkey(next.round, "members"), value, 0}});
}

RendezvousInfo EtcdRendezvous::next_rendezvous() {
  throw_if_stopped();
  JoinView v;
  v.min_nodes = config_.round.min_nodes;
  v.max_nodes = config_.round.max_nodes;
  v.last_call_timeout = config_.round.last_call_timeout;
  v.left_round = session_.leave_round();
  if (v.left_round >= 0 && !me_.empty()) {
    // Leaving a round: this node's join key of it goes, which the other members' sessions
    // watch (they leave it too, as the next look here opens the next round).
    client_.del(keys_.rkey(v.left_round, "join/" + me_));
  }
  const auto deadline = now() + config_.round.join_timeout;
  check_closed();
  check_same_job();
  ensure_lease();
  auto next_log = now() + config_.round.progress_interval;
  std::int64_t newest_join = -1;  // the newest join key's create revision last seen
  v.changed_at = now();           // when it was seen first
  int waiting_in = -1;            // the round this node registered as a late joiner of
  int joined_round = -1;          // the round whose join key this node wrote, with lease
  std::string joined_as;          // the lease it joined with
  for (;;) {
    throw_if_stopped();
    session_.check_alive();
    ensure_lease();  // again when it expired
    if (now() >= deadline) throw join_timeout_error(v.state ? v.state->round : 0, std::nullopt);
    std::int64_t revision = 0;  // the store revision of this look: wait for changes after it
    auto kv = client_.get(keys_.key("state"), &revision);
    v.state.reset();
    v.live.clear();
    v.joins.clear();
    v.joined = v.first = false;
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
        v.live = live_members(*v.state);
        session_.set_nodes_seen(static_cast<int>(v.state->members.size()));
      } else if (joined_round == v.state->round && joined_as == me_) {
        // One answer of one key: is this node's join key the oldest? Only the oldest reads
        // them all (and watches them).
        const std::string prefix = keys_.rkey(v.state->round, "join/");
        std::int64_t count = 0;
        auto oldest = client_.oldest(prefix, &count);
        v.joined = true;
        v.first = oldest && key_leaf(oldest->key) == me_;
        session_.set_nodes_seen(static_cast<int>(count));
        if (v.first) {
          std::vector<EtcdKv> joins = client_.get_prefix(prefix, /*keys_only=*/true, &revision);
          std::sort(joins.begin(), joins.end(), [](const EtcdKv& a, const EtcdKv& b) {
            return a.create_revision < b.create_revision;
          });
          for (const auto& j : joins) v.joins.push_back(key_leaf(j.key));
          if (!joins.empty() && joins.back().create_revision != newest_join) {
            newest_join = joins.back().create_revision;
            v.changed_at = now();
          }
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
        client_.put(keys_.rkey(v.state->round, "join/" + me_), "", session_.lease());
        joined_round = v.state->round;
        joined_as = me_;
        newest_join = -1;
        v.changed_at = now();
        continue;
      case JoinStep::kClose:
        close_round(step.next, kv->mod_revision);
        continue;
      case JoinStep::kOpenNext:
        cas(step.next);
        continue;
      case JoinStep::kFormed:
        if (auto info = formed(*v.state, deadline)) return *info;
        continue;
      case JoinStep::kWaitUnder:
        if (waiting_in != v.state->round) {
          client_.put(keys_.rkey(v.state->round, "waiting/" + me_), "1", session_.lease());
          // A joiner beyond MAX: its join key goes, so that the round's join keys are its
          // members' (whose count tells them all live).
          if (joined_round == v.state->round) {
            client_.del(keys_.rkey(v.state->round, "join/" + me_));
          }
          waiting_in = v.state->round;
        }
        check_closed();
        break;
      case JoinStep::kWait:
        break;
    }
    if (now() >= next_log) {
      EtcdRoundState shown = *v.state;  // for the progress line: a joining round's joiners
      if (!shown.final) {
        shown.members = v.joins;
        if (!v.first) {
          for (auto& j : client_.get_prefix(keys_.rkey(v.state->round, "join/"), true)) {
            shown.members.push_back(key_leaf(j.key));
          }
        }
      }
      log_progress(shown, deadline);
      next_log = now() + config_.round.progress_interval;
    }
    // The oldest joiner watches the join keys; everyone else the state key alone (one event
    // a round, not one per node).
    watch_.set_prefix(step.watch_joins ? keys_.rkey(v.state->round, "join/") : keys_.key("state"));
    wait_for_change(revision, std::min({deadline, next_log, step.until}),
                    /*burst=*/step.watch_joins);
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
  const std::string members_key = keys_.rkey(s.round, "members");
  const auto kv = client_.get(members_key);
  auto list =
      kv ? nlohmann::json::parse(kv->value, nullptr, /*allow_exceptions=*/false) : nlohmann::json();
  if (list == "node/") {  // too many for one key: every descriptor from node/
    list = nlohmann::json::array();
    const std::vector<EtcdKv> nodes = client_.get_prefix(keys_.key("node/"));
    for (const auto& m : s.members) {
      auto it = std::find_if(nodes.begin(), nodes.end(),
                             [&](const EtcdKv& n) { return key_leaf(n.key) == m; });
      if (it == nodes.end()) return std::nullopt;  // gone meanwhile: the loop sees it
      list.push_back(it->value);
    }
  }
  if (!list.is_array() || list.size() != s.members.size()) {
    throw RendezvousStateError(where() + ": corrupt or missing member descriptors at " +
                               members_key);
  }
  std::vector<NodeDesc> descs;
  int slot = -1;
  for (std::size_t i = 0; i < s.members.size(); ++i) {
    std::optional<NodeDesc> d =
        list[i].is_string() ? decode_node_desc(list[i].get<std::string>(), static_cast<int>(i))
                            : std::nullopt;
    if (!d) {
      throw RendezvousStateError(where() + ": corrupt node descriptor " + std::to_string(i) +
                                 " at " + members_key);
    }
    if (s.members[i] == me_) slot = static_cast<int>(i);
    descs.push_back(std::move(*d));
  }
  // The same layout, refusals and gloo hint as c10d's round leader computes.
  const RoundLayout layout =
      layout_round(descs, s.round, config_.round, /*static_ranks=*/false, /*master_host=*/"");
  if (!layout.refused.empty()) throw RendezvousStateError(where() + ": " + layout.refused);
  if (slot < 0) return std::nullopt;  // not a member after all: the loop looks again
  const SlotLayout& mine = layout.slots[static_cast<std::size_t>(slot)];
  if (mine.note) warn_node_rank_ignored(layout.note);
  RendezvousInfo info = slot_info(mine);
  info.round = s.round;
  info.use_agent_store = config_.round.agent_store;
  const std::string master_key = keys_.rkey(s.round, "master");
  watch_.set_prefix(master_key);  // one event; the safety net looks at the state
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
  info.gloo_socket_ifname = gloo_socket_ifname(mine);
  session_.enter_round(s.round, s.members);  // its thread starts watching the round
  log_round_formed(info);
  return info;
}

}  // namespace ddprun::rdzv
