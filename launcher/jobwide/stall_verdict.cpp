// stall_verdict.cpp: the snapshot codec and the job-wide stall verdict (stall_verdict.h).
#include "launcher/jobwide/stall_verdict.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "base/numbers.h"
#include "base/text.h"
#include "launcher/jobwide/board_json.h"

namespace ddprun::launcher {
namespace {

constexpr std::size_t kMaxText = 300;  // a frame's text, cut beyond
constexpr std::size_t kGroupsInHeadline = 3;
constexpr std::size_t kNamedPerGroup = 4;  // ranks of a group named one by one

std::string cut(std::string s) {
  if (s.size() > kMaxText) s = s.substr(0, kMaxText) + "...";
  return s;
}

// Where a rank is, as the verdict says it.
std::string place(const RankSnapshot& r) {
  std::string s;
  if (r.state == 'T' || r.state == 't') s = fmt::format("stopped (state {}) ", r.state);
  if (!r.sampled) return s + "without a Python stack (not sampled)";
  if (r.where.empty()) return s + "at an unknown place";
  if (!r.user_where.empty()) return s + "at " + r.user_where + " (inside " + r.where + ")";
  return s + "at " + r.where;
}

bool in_torch_distributed(const RankSnapshot& r) {
  return r.where.find("/torch/distributed/") != std::string::npos;
}

struct Member {
  const RankSnapshot* rank;
  const std::string* host;
};

struct Group {
  std::string place;
  bool waits = false;  // inside torch.distributed: most likely waiting for the others
  Standing standing;   // against the collectives the others entered (flight recorder)
  std::vector<Member> members;
};

std::string who(const Group& g) {
  if (g.members.size() <= kNamedPerGroup) {
    std::string s;
    for (const Member& m : g.members) {
      s += fmt::format("{}rank {} on {} (pid {})", s.empty() ? "" : ", ", m.rank->rank, *m.host,
                       m.rank->pid);
    }
    return s;
  }
  std::vector<int> ranks;
  std::set<std::string> hosts;
  for (const Member& m : g.members) {
    ranks.push_back(m.rank->rank);
    hosts.insert(*m.host);
  }
  std::string on;
  std::size_t named = 0;
  for (const std::string& h : hosts) {
    if (named++ == kNamedPerGroup) {
      on += fmt::format(" and {} more hosts", hosts.size() - kNamedPerGroup);
      break;
    }
    on += (on.empty() ? "" : ", ") + h;
  }
  return fmt::format("{} ranks ({}) on {}", ranks.size(), number_ranges(ranks), on);
}

// "<who> never entered all_reduce #12 of group 0: it is at ...", "<who> waits in
// all_reduce #12 of group 0 at ...", "<who> is at ...".
std::string say(const Group& g, const std::string& who) {
  const bool one = g.members.size() == 1;
  if (g.standing.behind) {
    return fmt::format("{} {}: {} {}", who, g.standing.text, one ? "it is" : "they are", g.place);
  }
  const char* verb = g.waits ? (one ? "waits" : "wait") : (one ? "is" : "are");
  if (!g.standing.text.empty())
    return fmt::format("{} {} {} {}", who, verb, g.standing.text, g.place);
  return fmt::format("{} {} {}", who, verb, g.place);
}

std::string seconds(std::chrono::milliseconds ms) {
  return seconds_text(static_cast<double>(ms.count()) / 1000, 1);
}

}  // namespace

std::string encode_snapshot(const NodeSnapshot& snapshot) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankSnapshot& r : snapshot.ranks) {
    ranks.push_back({{"rank", r.rank},
                     {"pid", r.pid},
                     {"sampled", r.sampled},
                     {"where", cut(r.where)},
                     {"user_where", cut(r.user_where)},
                     {"state", std::string(1, r.state)},
                     {"idle_s", r.idle_s}});
    nlohmann::json& c = ranks.back()["collectives"] = nlohmann::json::array();
    for (const CollectiveState& g : r.collectives) {
      c.push_back({g.pg, g.entered, g.completed, cut(g.op)});
    }
  }
  nlohmann::json j = {
      {"version", 1}, {"node", snapshot.node}, {"host", cut(snapshot.host)}, {"ranks", ranks}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

NodeSnapshot read_snapshot(const nlohmann::json& j) {
  NodeSnapshot s;
  s.node = j.at("node").get<int>();
  s.host = cut(j.at("host").get<std::string>());
  for (const nlohmann::json& r : j.at("ranks")) {
    RankSnapshot rs;
    rs.rank = r.at("rank").get<int>();
    rs.pid = r.at("pid").get<pid_t>();
    rs.sampled = r.at("sampled").get<bool>();
    rs.where = cut(r.at("where").get<std::string>());
    rs.user_where = cut(r.at("user_where").get<std::string>());
    const std::string state = r.at("state").get<std::string>();
    rs.state = state.size() == 1 ? state[0] : '?';
    rs.idle_s = r.at("idle_s").get<double>();
    if (const auto c = r.find("collectives"); c != r.end()) {
      for (const nlohmann::json& g : *c) {
        rs.collectives.push_back({g.at(0).get<int>(), g.at(1).get<std::int64_t>(),
                                  g.at(2).get<std::int64_t>(), cut(g.at(3).get<std::string>())});
      }
    }
    s.ranks.push_back(std::move(rs));
  }
  return s;
}

}  // namespace

std::optional<NodeSnapshot> decode_snapshot(const std::string& text, std::string& error) {
  return decode_board_json(text, "stall snapshot", kMaxSnapshotBytes, 1, error, read_snapshot);
}

std::vector<std::string> stall_verdict(const std::vector<NodeSnapshot>& snapshots,
                                       const std::vector<std::string>& missing,
                                       std::chrono::milliseconds timeout) {
  // The flight recorder's view first: the furthest collective of each group.
  std::vector<const RankSnapshot*> flat;
  std::vector<std::vector<CollectiveState>> recorded;
  for (const NodeSnapshot& n : snapshots) {
    for (const RankSnapshot& r : n.ranks) {
      flat.push_back(&r);
      recorded.push_back(r.collectives);
    }
  }
  const CollectiveFronts fronts = collective_fronts(recorded);
  std::map<std::string, Group> by_place;
  std::size_t ranks = 0;
  for (const NodeSnapshot& n : snapshots) {
    for (const RankSnapshot& r : n.ranks) {
      Standing standing = collective_standing(r.collectives, fronts);
      Group& g = by_place[(standing.behind ? "b" : "w") + standing.text + "\t" + place(r)];
      g.place = place(r);
      g.waits = in_torch_distributed(r);
      g.standing = std::move(standing);
      g.members.push_back({&r, &n.host});
      ++ranks;
    }
  }
  std::vector<Group> groups;
  for (auto& [p, g] : by_place) {
    std::sort(g.members.begin(), g.members.end(),
              [](const Member& a, const Member& b) { return a.rank->rank < b.rank->rank; });
    groups.push_back(std::move(g));
  }
  // The odd ones first: outside torch.distributed before inside it (those wait for the
  // rest), then the smaller groups, then by lowest rank.
  std::sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) {
    if (a.standing.behind != b.standing.behind) return a.standing.behind;
    if (a.waits != b.waits) return !a.waits;
    if (a.members.size() != b.members.size()) return a.members.size() < b.members.size();
    return a.members.front().rank->rank < b.members.front().rank->rank;
  });
  std::string head =
      fmt::format("{}no rank of the job made progress for {} s", kVerdictPrefix, seconds(timeout));
  if (groups.size() == 1) {
    // One rank (the others' snapshots missing): named as any other.
    head += "; " + say(groups[0], ranks == 1 ? who(groups[0]) : fmt::format("all {} ranks", ranks));
  } else {
    for (std::size_t i = 0; i < groups.size(); ++i) {
      const Group& g = groups[i];
      if (i == kGroupsInHeadline && i + 1 < groups.size()) {
        head += fmt::format("; {} more groups, below", groups.size() - i);
        break;
      }
      head += "; " + say(g, who(g));
    }
  }
  // Ranks that entered different collectives as the same one of a group (flight
  // recorder), or, without a recorder, wait inside torch.distributed in different
  // functions: a collective called on some ranks and not on others (or another one in
  // its place).
  for (const auto& [pg, front] : fronts) {
    if (front.ops.size() < 2) continue;
    std::string which;
    for (const auto& [op, at] : front.ops) {
      std::vector<int> rs;
      for (int i : at) rs.push_back(flat[static_cast<std::size_t>(i)]->rank);
      which += fmt::format("{}{} ({} {})", which.empty() ? "" : ", ", op_name(op),
                           rs.size() == 1 ? "rank" : "ranks", number_ranges(rs));
    }
    head += fmt::format(
        "; ranks entered different collectives as #{} of group {}: {}: a collective called on "
        "some ranks and not on others",
        front.seq, pg, which);
  }
  std::map<std::string, std::vector<int>> collectives;
  for (const Group& g : groups) {
    if (!fronts.empty()) break;
    if (!g.waits) continue;
    const std::string& w = g.members.front().rank->where;
    const std::size_t in = w.rfind(" in ");
    std::vector<int>& ranks_in = collectives[in == std::string::npos ? w : w.substr(in + 4)];
    for (const Member& m : g.members) ranks_in.push_back(m.rank->rank);
  }
  if (collectives.size() > 1) {
    std::string which;
    for (const auto& [fn, rs] : collectives) {
      which += fmt::format("{}{} ({} {})", which.empty() ? "" : ", ", fn,
                           rs.size() == 1 ? "rank" : "ranks", number_ranges(rs));
    }
    head += "; ranks wait in different collectives: " + which +
            ": a collective called on some ranks and not on others";
  }
  if (!missing.empty()) {
    std::string m;
    for (const std::string& s : missing) m += (m.empty() ? "" : ", ") + s;
    head += "; no snapshot from " + m;
  }
  std::vector<std::string> lines{head};
  // Then every group with all its ranks (the headline abbreviates).
  for (const Group& g : groups) {
    std::vector<int> rs;
    for (const Member& m : g.members) rs.push_back(m.rank->rank);
    lines.push_back(
        "  " + say(g, fmt::format("{} {}", rs.size() == 1 ? "rank" : "ranks", number_ranges(rs))));
  }
  return lines;
}

}  // namespace ddprun::launcher
