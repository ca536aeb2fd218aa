// startup_timeline.cpp: the start-up timeline's report and codec (startup_timeline.h).
#include "launcher/jobwide/startup_timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "base/numbers.h"
#include "launcher/jobwide/board_json.h"

namespace ddprun::launcher {
namespace {

constexpr std::size_t kMaxHostChars = 300;  // a host's name, cut beyond
constexpr std::size_t kWarningsPerPhase = 5;

std::string rounded_seconds(double s) { return seconds_text(s, 1); }

// The hook samples every 20 ms: a later phase may be seen a little before an earlier one
// (the first collective inside init_process_group): 0 then.
std::optional<double> between(std::int64_t from, std::int64_t to) {
  if (from <= 0 || to <= 0) return std::nullopt;
  return static_cast<double>(std::max<std::int64_t>(to - from, 0)) / 1e9;
}

}  // namespace

const char* const kStartupPhases[4] = {"start the interpreter", "import torch",
                                       "form the process group", "reach the first collective"};

StartupReport startup_report(const std::vector<RankStartup>& ranks) {
  StartupReport report;
  for (const RankStartup& r : ranks) {
    const StartupTimes& t = r.times;
    report.ranks.push_back({r.rank,
                            r.host,
                            {between(t.spawned, t.up), between(t.up, t.torch),
                             between(t.torch, t.group), between(t.group, t.first_collective)}});
  }
  std::sort(report.ranks.begin(), report.ranks.end(),
            [](const RankPhases& a, const RankPhases& b) { return a.rank < b.rank; });
  for (int p = 0; p < 4; ++p) {
    std::vector<const RankPhases*> known;
    for (const RankPhases& r : report.ranks) {
      if (r.phase[p]) known.push_back(&r);
    }
    if (known.size() < 2) continue;
    std::vector<double> d;
    for (const RankPhases* r : known) d.push_back(*r->phase[p]);
    const double median = ddprun::median(std::move(d));
    const RankPhases* slowest = *std::max_element(
        known.begin(), known.end(),
        [p](const RankPhases* a, const RankPhases* b) { return *a->phase[p] < *b->phase[p]; });
    report.summary.push_back(
        fmt::format("start-up: {}: median {} s over {} ranks, slowest rank {} on {} {} s",
                    kStartupPhases[p], rounded_seconds(median), known.size(), slowest->rank,
                    slowest->host, rounded_seconds(*slowest->phase[p])));
    // Those that stand out, by host: a host all of whose ranks do is named once.
    std::map<std::string, std::pair<std::vector<const RankPhases*>, std::size_t>> by_host;
    for (const RankPhases* r : known) {
      auto& [out, all] = by_host[r->host];
      ++all;
      const double x = *r->phase[p];
      if (x >= kStandOutFactor * median && x >= median + kStandOutSeconds) out.push_back(r);
    }
    std::vector<NamedLine> lines;
    for (const auto& [host, entry] : by_host) {
      const auto& [out, all] = entry;
      if (out.empty()) continue;
      if (out.size() == all && all > 1 && by_host.size() > 1) {
        std::string rs;
        std::vector<int> named;
        double lo = 1e300, hi = 0;
        for (const RankPhases* r : out) {
          rs += (rs.empty() ? "" : ",") + std::to_string(r->rank);
          named.push_back(r->rank);
          lo = std::min(lo, *r->phase[p]);
          hi = std::max(hi, *r->phase[p]);
        }
        lines.push_back(
            {fmt::format(
                 "start-up: host {} (ranks {}) took {}-{} s to {} (median of {} ranks {} s)", host,
                 rs, rounded_seconds(lo), rounded_seconds(hi), kStartupPhases[p], known.size(),
                 rounded_seconds(median)),
             std::move(named)});
        continue;
      }
      for (const RankPhases* r : out) {
        lines.push_back(
            {fmt::format("start-up: rank {} on {} took {} s to {} (median of {} ranks {} s)",
                         r->rank, host, rounded_seconds(*r->phase[p]), kStartupPhases[p],
                         known.size(), rounded_seconds(median)),
             {r->rank}});
      }
    }
    if (lines.size() > kWarningsPerPhase) {
      const std::size_t more = lines.size() - kWarningsPerPhase;
      std::vector<int> rest;  // the ranks of the lines left out
      for (std::size_t i = kWarningsPerPhase; i < lines.size(); ++i) {
        rest.insert(rest.end(), lines[i].ranks.begin(), lines[i].ranks.end());
      }
      lines.resize(kWarningsPerPhase);
      lines.push_back(
          {fmt::format("start-up: and {} more that took long to {}", more, kStartupPhases[p]),
           std::move(rest)});
    }
    report.warnings.insert(report.warnings.end(), lines.begin(), lines.end());
  }
  return report;
}

std::string encode_startup(const std::vector<RankStartup>& ranks) {
  nlohmann::json rs = nlohmann::json::array();
  for (const RankStartup& r : ranks) {
    const StartupTimes& t = r.times;
    rs.push_back({{"rank", r.rank},
                  {"host", r.host.substr(0, kMaxHostChars)},
                  {"t", {t.spawned, t.up, t.torch, t.group, t.first_collective}}});
  }
  const nlohmann::json j = {{"version", 1}, {"ranks", rs}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

std::vector<RankStartup> read_startup(const nlohmann::json& j) {
  std::vector<RankStartup> ranks;
  for (const nlohmann::json& r : j.at("ranks")) {
    RankStartup rs;
    rs.rank = r.at("rank").get<int>();
    rs.host = r.at("host").get<std::string>().substr(0, kMaxHostChars);
    const nlohmann::json& t = r.at("t");
    rs.times = {t.at(0).get<std::int64_t>(), t.at(1).get<std::int64_t>(),
                t.at(2).get<std::int64_t>(), t.at(3).get<std::int64_t>(),
                t.at(4).get<std::int64_t>()};
    ranks.push_back(std::move(rs));
  }
  return ranks;
}

}  // namespace

std::optional<std::vector<RankStartup>> decode_startup(const std::string& text,
                                                       std::string& error) {
  return decode_board_json(text, "start-up timeline", kMaxStartupBytes, 1, error, read_startup);
}

}  // namespace ddprun::launcher
