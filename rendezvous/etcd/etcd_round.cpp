// etcd_round.cpp: the round state's and the members list's JSON, the key helpers and the
// join decision of the etcd-v3 backend (etcd_round.h).
#include "rendezvous/etcd/etcd_round.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace ddprun::rdzv {
namespace {

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

std::string encode_members(const std::vector<std::string>& descs) {
  std::string value = nlohmann::json(descs).dump();
  return value.size() > (1u << 20) ? "\"node/\"" : value;
}

std::optional<MembersList> decode_members(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  MembersList out;
  if (j.is_string() && j.get<std::string>() == "node/") {
    out.in_node_keys = true;
    return out;
  }
  if (!j.is_array()) return std::nullopt;
  for (const auto& d : j) {
    if (!d.is_string()) return std::nullopt;
    out.descs.push_back(d.get<std::string>());
  }
  return out;
}

std::string lease_hex(std::int64_t id) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(id));
  return buf;
}

std::string key_leaf(const std::string& key) { return key.substr(key.rfind('/') + 1); }

JoinStep next_join_step(const JoinView& v) {
  JoinStep out;
  if (!v.state) {
    out.kind = JoinStep::kCreateState;
    out.next = {0, false, {}};
    return out;
  }
  const EtcdRoundState& s = *v.state;
  if (s.final) {
    const bool all_live = std::all_of(s.members.begin(), s.members.end(),
                                      [&](const auto& m) { return contains(v.live, m); });
    if (contains(s.members, v.me) && s.round != v.left_round && all_live) {
      out.kind = JoinStep::kFormed;
    } else if (s.round == v.left_round || !all_live) {
      // The round is over for someone (a member left, died or wants a new round): open
      // the next one (this node joins it at the next look).
      out.kind = JoinStep::kOpenNext;
      out.next = {s.round + 1, false, {}};
    } else {
      // A running round without this node: wait under it, so its members start a new
      // round (num_nodes_waiting() > 0 on their side).
      out.kind = JoinStep::kWaitUnder;
    }
    return out;
  }
  // A joining round: its joiners are the r<R>/join/<lease> keys, in the order they were
  // created; each lives with its agent's lease, so one gone is gone from here.
  if (!v.joined) {
    out.kind = JoinStep::kAddJoin;
    return out;
  }
  // Only the oldest joiner decides; the others wait for the state it writes (when it
  // goes, the next oldest takes over at its next look).
  if (!v.first) return out;
  out.watch_joins = true;
  const int n = static_cast<int>(v.joins.size());
  // The first MAX joiners are the round; a later one waits for the next round.
  if (n >= v.min_nodes) {
    if (n >= v.max_nodes || v.now - v.changed_at >= v.last_call_timeout) {
      out.kind = JoinStep::kClose;
      out.next = {s.round, true, {}};
      for (int i = 0; i < std::min(n, v.max_nodes); ++i) {
        out.next.members.push_back(v.joins[static_cast<std::size_t>(i)]);
      }
      return out;
    }
    out.until = v.changed_at + v.last_call_timeout;  // unless another node joins first
  }
  return out;
}

}  // namespace ddprun::rdzv
