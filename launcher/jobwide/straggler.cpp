// straggler.cpp: the straggler ranking and the window codec (straggler.h).
#include "launcher/jobwide/straggler.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "base/numbers.h"
#include "launcher/jobwide/board_json.h"

namespace ddprun::launcher {
namespace {

constexpr std::size_t kMaxStragglerHost = 300;  // a host's name, cut beyond

// One collective: (time, who) for every member, who being a rank's index or a host's.
using Collective = std::vector<std::pair<std::int64_t, std::size_t>>;

// Who arrived last at each collective, by how much before the next-latest one; the one
// that did at kLastShare of them or more, by a median margin of at least the threshold.
std::optional<std::pair<std::size_t, std::pair<int, double>>> last_one(
    const std::vector<Collective>& collectives, double threshold_s) {
  std::map<std::size_t, std::vector<double>> margins;
  for (Collective c : collectives) {
    std::sort(c.begin(), c.end());
    const auto& last = c.back();
    const auto& next = c[c.size() - 2];
    margins[last.second].push_back(static_cast<double>(last.first - next.first) / 1e9);
  }
  const auto most = std::max_element(
      margins.begin(), margins.end(),
      [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
  const int last = static_cast<int>(most->second.size());
  if (last < kLastShare * static_cast<double>(collectives.size())) return std::nullopt;
  const double m = median(most->second);
  if (m < threshold_s) return std::nullopt;
  return std::make_pair(most->first, std::make_pair(last, m));
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

}  // namespace

std::optional<Straggler> find_straggler(const std::vector<RankArrivals>& ranks,
                                        double threshold_s) {
  // group -> sequence number -> (time, rank index), one per rank
  std::map<int, std::map<std::int64_t, Collective>> groups;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    for (const Arrival& a : ranks[i].arrivals) {
      Collective& c = groups[a.pg][a.seq];
      if (std::none_of(c.begin(), c.end(), [&](const auto& e) { return e.second == i; })) {
        c.emplace_back(a.t_ns, i);
      }
    }
  }
  std::optional<Straggler> best;
  for (const auto& [pg, seqs] : groups) {
    std::set<std::size_t> members;
    for (const auto& [seq, c] : seqs) {
      for (const auto& e : c) members.insert(e.second);
    }
    if (members.size() < 2) continue;
    std::vector<Collective> full;  // those every member entered
    for (const auto& [seq, c] : seqs) {
      if (c.size() == members.size()) full.push_back(c);
    }
    if (full.size() < static_cast<std::size_t>(kMinCollectives)) continue;
    Straggler s;
    s.pg = pg;
    s.collectives = static_cast<int>(full.size());
    if (const auto r = last_one(full, threshold_s)) {
      s.rank = ranks[r->first].rank;
      s.host = ranks[r->first].host;
      s.last = r->second.first;
      s.median_margin_s = r->second.second;
    } else {
      // Each host's latest rank against the other hosts'.
      std::map<std::string, std::size_t> host_index;
      for (std::size_t i : members) host_index.emplace(ranks[i].host, host_index.size());
      if (host_index.size() < 2) continue;
      std::vector<Collective> by_host;
      for (const Collective& c : full) {
        std::map<std::size_t, std::int64_t> latest;
        for (const auto& [t, i] : c) {
          std::int64_t& l = latest.try_emplace(host_index[ranks[i].host], t).first->second;
          l = std::max(l, t);
        }
        Collective h;
        for (const auto& [host, t] : latest) h.emplace_back(t, host);
        by_host.push_back(std::move(h));
      }
      const auto h = last_one(by_host, threshold_s);
      if (!h) continue;
      s.host_wide = true;
      for (std::size_t i : members) {
        if (host_index[ranks[i].host] != h->first) continue;
        s.host = ranks[i].host;
        s.ranks.push_back(ranks[i].rank);
      }
      std::sort(s.ranks.begin(), s.ranks.end());
      s.rank = s.ranks.front();
      s.last = h->second.first;
      s.median_margin_s = h->second.second;
    }
    if (!best || s.last * best->collectives > best->last * s.collectives) best = s;
  }
  return best;
}

JoinedWindow join_window(const std::vector<RankArrivals>& carry,
                         const std::vector<RankArrivals>& window) {
  JoinedWindow out;
  std::map<int, std::size_t> index;  // rank -> its place in out.ranks
  auto add = [&](const RankArrivals& r) {
    const auto [it, added] = index.try_emplace(r.rank, out.ranks.size());
    if (added) out.ranks.push_back({r.rank, r.host, {}});
    auto& arrivals = out.ranks[it->second].arrivals;
    arrivals.insert(arrivals.end(), r.arrivals.begin(), r.arrivals.end());
  };
  for (const RankArrivals& r : carry) add(r);
  for (const RankArrivals& r : window) add(r);
  // group -> its members; (group, sequence number) -> the ranks that entered it
  std::map<int, std::set<int>> members;
  std::map<std::pair<int, std::int64_t>, std::set<int>> entered;
  for (const RankArrivals& r : out.ranks) {
    for (const Arrival& a : r.arrivals) {
      members[a.pg].insert(r.rank);
      entered[{a.pg, a.seq}].insert(r.rank);
    }
  }
  for (const RankArrivals& r : window) {
    RankArrivals kept{r.rank, r.host, {}};
    for (const Arrival& a : r.arrivals) {
      if (entered[{a.pg, a.seq}].size() < members[a.pg].size()) kept.arrivals.push_back(a);
    }
    if (!kept.arrivals.empty()) out.carry.push_back(std::move(kept));
  }
  return out;
}

std::string straggler_line(const Straggler& s, std::chrono::milliseconds window,
                           double threshold_s) {
  const std::string who = s.host_wide
                              ? fmt::format("host {} (ranks {})", s.host, rank_list(s.ranks))
                              : fmt::format("rank {} on {}", s.rank, s.host);
  return fmt::format(
      "straggler: {} arrived last at {} of {} collectives of group {} in the last {} s, by a "
      "median of {} s (threshold {} s)",
      who, s.last, s.collectives, s.pg, seconds_text(static_cast<double>(window.count()) / 1000, 3),
      seconds_text(s.median_margin_s, 3), seconds_text(threshold_s, 3));
}

std::vector<Arrival> sample_arrivals(const std::vector<Arrival>& arrivals) {
  std::map<int, std::vector<Arrival>> groups;
  for (const Arrival& a : arrivals) groups[a.pg].push_back(a);
  std::vector<Arrival> out;
  for (const auto& entry : groups) {
    const std::vector<Arrival>& group = entry.second;
    std::int64_t stride = 1;
    auto kept = [&group, &stride] {
      return static_cast<std::size_t>(std::count_if(
          group.begin(), group.end(), [stride](const Arrival& a) { return a.seq % stride == 0; }));
    };
    while (kept() > kArrivalsPerWindow) stride *= 2;
    for (const Arrival& a : group) {
      if (a.seq % stride == 0) out.push_back(a);
    }
  }
  return out;
}

std::string encode_window(std::int64_t window, const std::vector<RankArrivals>& ranks) {
  nlohmann::json rs = nlohmann::json::array();
  for (const RankArrivals& r : ranks) {
    nlohmann::json a = nlohmann::json::array();
    for (const Arrival& x : r.arrivals) a.push_back({x.pg, x.seq, x.t_ns});
    rs.push_back(
        {{"rank", r.rank}, {"host", r.host.substr(0, kMaxStragglerHost)}, {"arrivals", a}});
  }
  const nlohmann::json j = {{"version", 1}, {"window", window}, {"ranks", rs}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

std::pair<std::int64_t, std::vector<RankArrivals>> read_window(const nlohmann::json& j) {
  std::vector<RankArrivals> ranks;
  for (const nlohmann::json& r : j.at("ranks")) {
    RankArrivals ra;
    ra.rank = r.at("rank").get<int>();
    ra.host = r.at("host").get<std::string>().substr(0, kMaxStragglerHost);
    for (const nlohmann::json& a : r.at("arrivals")) {
      ra.arrivals.push_back(
          {a.at(0).get<int>(), a.at(1).get<std::int64_t>(), a.at(2).get<std::int64_t>()});
    }
    ranks.push_back(std::move(ra));
  }
  return std::make_pair(j.at("window").get<std::int64_t>(), std::move(ranks));
}

}  // namespace

std::optional<std::pair<std::int64_t, std::vector<RankArrivals>>> decode_window(
    const std::string& text, std::string& error) {
  return decode_board_json(text, "straggler window", kMaxWindowBytes, 1, error, read_window);
}

}  // namespace ddprun::launcher
