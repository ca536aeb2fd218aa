// etcd_round.h: the pure parts of EtcdRendezvous: the round state kept in
// <prefix>/<run id>/state and its JSON, the members list of r<R>/members and its JSON,
// the key layout under the run, and the join decision (next_join_step: what a joining
// node does after one look at the keys). Every byte layout etcd-v3 stores is here.
// Table tests in tests/rendezvous/etcd/etcd_round_test.cpp. Thread-safety: pure.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ddprun::rdzv {

// The round state kept in <prefix>/<run id>/state.
struct EtcdRoundState {
  int round = 0;
  bool final = false;
  std::vector<std::string> members;  // final: lease ids (hex), in join order; joining: none
  bool operator==(const EtcdRoundState&) const = default;
};
std::string encode_round_state(const EtcdRoundState& s);
std::optional<EtcdRoundState> decode_round_state(const std::string& json);

// r<R>/members: the members' descriptors (their node/<lease> values) in member order,
// one JSON array of strings, written with the final state so that each member reads one
// key, not N. etcd refuses a request over --max-request-bytes (1.5 MiB by default): past
// 1 MiB of descriptors (some 3000 nodes) the value is the JSON string "node/" instead,
// and the members read the descriptors there.
struct MembersList {
  bool in_node_keys = false;       // "node/": read each member's node/<lease>
  std::vector<std::string> descs;  // otherwise: the descriptors, in member order
  bool operator==(const MembersList&) const = default;
};
std::string encode_members(const std::vector<std::string>& descs);
// nullopt unless `json` is an array of strings or the string "node/".
std::optional<MembersList> decode_members(const std::string& json);

// The keys of one run under <prefix>/<run id>/ (docs/multinode.md, "etcd"):
//   state, job, closed, node/<lease>           the run's
//   r<R>/join/<lease>, r<R>/waiting/<lease>,   round R's (join and waiting keys live
//   r<R>/master, r<R>/members                  with their agent's lease)
//   done/r<R>/<lease>, alldone/r<R>            round R's exit barrier (apart from r<R>/,
//                                              which the members watch while it runs)
struct EtcdKeys {
  std::string base;  // "<prefix>/<run id>/"
  std::string key(const std::string& rel) const { return base + rel; }
  std::string rkey(int r, const std::string& rel) const {
    return base + "r" + std::to_string(r) + "/" + rel;
  }
  std::string done_prefix(int r) const { return base + "done/r" + std::to_string(r) + "/"; }
  std::string done_key(int r, const std::string& lease) const { return done_prefix(r) + lease; }
  std::string all_done_key(int r) const { return base + "alldone/r" + std::to_string(r); }
};
// A lease id as the keys name it (lower-case hex).
std::string lease_hex(std::int64_t id);
// The last path component of a key ("…/node/1a2b" -> "1a2b").
std::string key_leaf(const std::string& key);

// What a joining node saw in one look at the run's keys. A joining round costs each node
// a constant number of requests: a node joins (one put), then reads which join key is the
// oldest (one answer of one key, `first`) and otherwise waits for the state key to change;
// only the oldest joiner reads every join key and closes the round (one CAS).
struct JoinView {
  using Clock = std::chrono::steady_clock;
  std::optional<EtcdRoundState> state;  // nullopt: no state key yet
  std::vector<std::string> live;        // final state: leases with a descriptor
  bool joined = false;                  // joining state: this node's r<R>/join/ key is there
  bool first = false;                   // joined, and its join key is the oldest one there
  std::vector<std::string> joins;       // first: every r<R>/join/ lease, oldest first
  std::string me;                       // this node's lease
  int left_round = -1;                  // the round this node just left (-1: none)
  int min_nodes = 1;
  int max_nodes = 1;
  Clock::time_point now;
  Clock::time_point changed_at;  // when the newest join key was first seen
  std::chrono::milliseconds last_call_timeout{30'000};
};

struct JoinStep {
  enum Kind {
    kCreateState,  // no state yet: create round 0, joining (CAS on "absent")
    kAddJoin,      // joining round, this node not in it: add r<R>/join/<me>
    kClose,        // the oldest joiner: MAX joined, or MIN for last_call_timeout: CAS `next`
    kOpenNext,     // the final round is over for someone: CAS `next` (R + 1, joining)
    kWaitUnder,    // a running round without this node: wait under it (r<R>/waiting/<me>)
    kFormed,       // this node is a member of the final round: take part
    kWait,         // nothing to do: wait for a change, or until `until`
    // (kWait with `watch_joins`: the oldest joiner waits for joins, the others for the state)
  };
  Kind kind = kWait;
  EtcdRoundState next;  // kCreateState, kClose, kOpenNext
  JoinView::Clock::time_point until = JoinView::Clock::time_point::max();  // kWait
  bool watch_joins = false;  // kWait: for the join keys (the oldest joiner), not the state
};

JoinStep next_join_step(const JoinView& v);

}  // namespace ddprun::rdzv
