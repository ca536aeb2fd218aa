// job_status.cpp: the job status value and its table (job_status.h).
#include "launcher/jobwide/job_status.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace ddprun::launcher {
namespace {

using nlohmann::json;

std::string cut(const std::string& text, std::size_t max) {
  if (text.size() <= max) return text;
  return text.substr(0, max - 3) + "...";
}

json rank_json(const RankStatus& r) {
  json j = {{"rank", r.rank}, {"local_rank", r.local_rank}, {"state", cut(r.state, 16)}};
  if (r.pid != 0) j["pid"] = r.pid;
  if (r.idle_s) j["idle_s"] = std::round(*r.idle_s * 10) / 10;
  if (!r.where.empty()) j["where"] = cut(r.where, kMaxStatusText);
  if (!r.collectives.empty()) {
    json groups = json::array();
    for (std::size_t i = 0; i < r.collectives.size() && i < kMaxCollectives; ++i) {
      const CollectiveState& c = r.collectives[i];
      groups.push_back({{"pg", c.pg},
                        {"op", cut(c.op, 64)},
                        {"entered", c.entered},
                        {"completed", c.completed}});
    }
    j["collectives"] = std::move(groups);
  }
  return j;
}

json node_json(const NodeStatus& s) {
  json ranks = json::array();
  for (const RankStatus& r : s.ranks) ranks.push_back(rank_json(r));
  json j = {{"v", kStatusVersion},
            {"node", s.node},
            {"host", cut(s.host, kMaxStatusText)},
            {"agent_pid", s.agent_pid},
            {"state", cut(s.state, 16)},
            {"attempt", s.attempt},
            {"restarts", s.restarts},
            {"max_restarts", s.max_restarts},
            {"time", s.time},
            {"ranks", std::move(ranks)}};
  if (!s.straggler.empty()) j["straggler"] = cut(s.straggler, kMaxStatusLine);
  return j;
}

// Throws json's exceptions on a missing or mistyped field (decode_node_status's catch).
RankStatus rank_from(const json& j) {
  RankStatus r;
  r.rank = j.at("rank").get<int>();
  r.local_rank = j.at("local_rank").get<int>();
  r.state = j.at("state").get<std::string>();
  r.pid = j.value("pid", std::int64_t{0});
  if (j.contains("idle_s")) r.idle_s = j.at("idle_s").get<double>();
  r.where = j.value("where", std::string());
  for (const json& g : j.value("collectives", json::array())) {
    r.collectives.push_back({g.at("pg").get<int>(), g.at("entered").get<std::int64_t>(),
                             g.at("completed").get<std::int64_t>(), g.at("op").get<std::string>()});
  }
  return r;
}

std::string status_seconds(double s) {
  return s < 10 ? fmt::format("{:.1f}", s) : fmt::format("{:.0f}", s);
}

}  // namespace

std::string encode_node_status(const NodeStatus& s) { return node_json(s).dump(); }

std::optional<NodeStatus> decode_node_status(const std::string& text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("v") || j["v"] != kStatusVersion) return std::nullopt;
  try {
    NodeStatus s;
    s.node = j.at("node").get<int>();
    s.host = j.at("host").get<std::string>();
    s.agent_pid = j.at("agent_pid").get<std::int64_t>();
    s.state = j.at("state").get<std::string>();
    s.attempt = j.at("attempt").get<int>();
    s.restarts = j.at("restarts").get<int>();
    s.max_restarts = j.at("max_restarts").get<int>();
    s.time = j.at("time").get<double>();
    s.straggler = j.value("straggler", std::string());
    for (const json& r : j.at("ranks")) s.ranks.push_back(rank_from(r));
    return s;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

int join_node_values(JobStatus& job, const std::vector<std::optional<std::string>>& values) {
  int bad = 0;
  job.nodes.assign(values.size(), JobStatus::Slot{});
  for (std::size_t n = 0; n < values.size(); ++n) {
    JobStatus::Slot& slot = job.nodes[n];
    if (!values[n]) {
      slot.problem = "no status yet";
      continue;
    }
    slot.status = decode_node_status(*values[n]);
    if (!slot.status || slot.status->node != static_cast<int>(n)) {
      slot.status.reset();
      slot.problem = "not a ddprun status value: '" + cut(*values[n], 40) + "'";
      ++bad;
    }
  }
  return bad;
}

std::string where_file_line(const std::string& where) {
  const auto at = where.find(" in ");
  return at == std::string::npos ? where : where.substr(0, at);
}

std::string last_collective(const std::vector<CollectiveState>& collectives) {
  const CollectiveState* pick = nullptr;
  for (const CollectiveState& c : collectives) {
    if (c.entered >= 0 && (pick == nullptr || c.pg < pick->pg)) pick = &c;
  }
  if (pick == nullptr) return "";
  const std::string name = collective_name(pick->op, pick->entered, pick->pg);
  return (pick->completed >= pick->entered ? "after " : "in ") + name;
}

std::string format_job_status(const JobStatus& job, double now) {
  std::string out = fmt::format("run '{}', round {}, {} node(s): {}\n", job.run_id, job.round,
                                job.nodes.size(), job.where);
  out += fmt::format("{:<5} {:<24} {:<11} {:<8} {:<9} {}\n", "NODE", "HOST", "STATE", "ATTEMPT",
                     "RESTARTS", "UPDATED");
  for (std::size_t n = 0; n < job.nodes.size(); ++n) {
    const JobStatus::Slot& slot = job.nodes[n];
    if (!slot.status) {
      out += fmt::format("{:<5} {:<24} {}\n", n, "-", slot.problem);
      continue;
    }
    const NodeStatus& s = *slot.status;
    out += fmt::format("{:<5} {:<24} {:<11} {:<8} {:<9} {} s ago\n", n, s.host, s.state, s.attempt,
                       fmt::format("{}/{}", s.restarts, s.max_restarts),
                       status_seconds(std::max(0.0, now - s.time)));
    out += fmt::format("      {:<6} {:<8} {:<7} {:<7} {:<32} {}\n", "RANK", "PID", "STATE",
                       "IDLE_S", "LAST COLLECTIVE", "WHERE");
    for (const RankStatus& r : s.ranks) {
      const std::string where = where_file_line(r.where);
      const std::string coll = last_collective(r.collectives);
      out += fmt::format("      {:<6} {:<8} {:<7} {:<7} {:<32} {}\n", r.rank,
                         r.pid != 0 ? std::to_string(r.pid) : "-", r.state,
                         r.idle_s ? status_seconds(*r.idle_s) : "-", coll.empty() ? "-" : coll,
                         where.empty() ? "-" : where);
    }
    if (!s.straggler.empty()) out += "      straggler: " + s.straggler + "\n";
  }
  return out;
}

std::string job_status_json(const JobStatus& job) {
  json nodes = json::array();
  for (std::size_t n = 0; n < job.nodes.size(); ++n) {
    const JobStatus::Slot& slot = job.nodes[n];
    nodes.push_back(slot.status ? node_json(*slot.status)
                                : json{{"node", n}, {"problem", slot.problem}});
  }
  return json{{"v", kStatusVersion},
              {"run_id", job.run_id},
              {"where", job.where},
              {"round", job.round},
              {"nodes", std::move(nodes)}}
      .dump(2);
}

}  // namespace ddprun::launcher
