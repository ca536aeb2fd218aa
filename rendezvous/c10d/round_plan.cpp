// round_plan.cpp: the round leader's per-slot record (round_plan.h).
#include "rendezvous/c10d/round_plan.h"

#include <nlohmann/json.hpp>

namespace ddprun::rdzv {

std::string encode_slot_plan(const SlotPlan& p) {
  nlohmann::json j{{"g", p.group_rank}, {"n", p.group_world_size}, {"b", p.rank_base},
                   {"w", p.world_size}, {"rc", p.restart_count},   {"g0", p.rank0_slot}};
  if (p.note) j["note"] = 1;
  if (!p.elsewhere.empty()) j["x"] = p.elsewhere;
  return j.dump();
}

std::optional<SlotPlan> decode_slot_plan(std::string_view json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  SlotPlan p;
  for (auto [key, field] : {std::pair{"g", &p.group_rank}, std::pair{"n", &p.group_world_size},
                            std::pair{"b", &p.rank_base}, std::pair{"w", &p.world_size},
                            std::pair{"rc", &p.restart_count}, std::pair{"g0", &p.rank0_slot}}) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) return std::nullopt;
    *field = it->get<int>();
  }
  p.note = j.contains("note");
  if (auto it = j.find("x"); it != j.end()) {
    if (!it->is_array()) return std::nullopt;
    for (const auto& a : *it) {
      if (!a.is_string()) return std::nullopt;
      p.elsewhere.push_back(a.get<std::string>());
    }
  }
  return p;
}

}  // namespace ddprun::rdzv
