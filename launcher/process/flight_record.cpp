// flight_record.cpp: how a collective is named in ddprun's lines (flight_record.h).
#include "launcher/process/flight_record.h"

#include <fmt/format.h>

#include <algorithm>

namespace ddprun::launcher {

std::string_view op_name(std::string_view op) {
  // The backend is the same for every collective of a group.
  const std::size_t colon = op.find(':');
  if (colon != std::string_view::npos) op.remove_prefix(colon + 1);
  return op.empty() ? "a collective" : op;
}

std::string collective_name(std::string_view op, std::int64_t seq, int pg) {
  return fmt::format("{} #{} of group {}", op_name(op), seq, pg);
}

CollectiveFronts collective_fronts(const std::vector<std::vector<CollectiveState>>& ranks) {
  CollectiveFronts fronts;
  for (const auto& groups : ranks) {
    for (const CollectiveState& c : groups) {
      GroupFront& f = fronts[c.pg];
      if (c.entered > f.seq) f = GroupFront{c.entered, {}};
    }
  }
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    for (const CollectiveState& c : ranks[i]) {
      GroupFront& f = fronts[c.pg];
      if (c.entered == f.seq && f.seq >= 0) f.ops[c.op].push_back(static_cast<int>(i));
    }
  }
  return fronts;
}

Standing collective_standing(const std::vector<CollectiveState>& rank,
                             const CollectiveFronts& fronts) {
  for (const CollectiveState& c : rank) {  // in group order
    const auto f = fronts.find(c.pg);
    if (f == fronts.end() || c.entered >= f->second.seq || f->second.ops.empty()) continue;
    // The op most ranks entered at the front names it.
    const auto most = std::max_element(
        f->second.ops.begin(), f->second.ops.end(),
        [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
    return {true, "never entered " + collective_name(most->first, f->second.seq, c.pg)};
  }
  for (const CollectiveState& c : rank) {
    if (c.entered >= 0 && c.completed < c.entered) {
      return {false, "in " + collective_name(c.op, c.entered, c.pg)};
    }
  }
  return {};
}

}  // namespace ddprun::launcher
