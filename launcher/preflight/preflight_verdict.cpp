// preflight_verdict.cpp: the pre-flight verdict (see preflight_verdict.h).
#include "launcher/preflight/preflight_verdict.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "base/numbers.h"

namespace ddprun::launcher::preflight {
namespace {

using nlohmann::json;

bool is_device(const std::string& name) { return name == "cpu" || name.rfind("cuda:", 0) == 0; }

const Check* find_check(const NodeResult& r, const std::string& name) {
  for (const auto& c : r.checks) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

// The slowest device check of a node, nullopt when it has none.
std::optional<double> device_seconds(const NodeResult& r) {
  std::optional<double> worst;
  for (const auto& c : r.checks) {
    if (is_device(c.name) && c.ok) worst = std::max(worst.value_or(0), c.seconds);
  }
  return worst;
}

// The nodes whose value stands out: above factor x median and the floor above it.
std::vector<int> outliers(const std::map<int, double>& values, double factor) {
  std::vector<int> out;
  if (values.size() < 2) return out;
  std::vector<double> all;
  for (const auto& [node, v] : values) all.push_back(v);
  const double m = median(all);
  for (const auto& [node, v] : values) {
    if (v > factor * m && v - m > kSlowFloorSeconds) out.push_back(node);
  }
  return out;
}

// A node's link score: the slowest of its two directions, each the fastest of its links
// (a host whose own link is slow is slow both ways to each neighbour; a neighbour shares
// only one slow link with it). Needs 3 nodes: with 2, both ends share the one link.
std::map<int, double> link_scores(const std::vector<NodeResult>& nodes) {
  std::map<int, double> egress, ingress, scores;
  for (const auto& to : nodes) {
    for (const auto& [from, s] : to.links) {
      if (!egress.count(from) || s < egress[from]) egress[from] = s;
      if (!ingress.count(to.node) || s < ingress[to.node]) ingress[to.node] = s;
    }
  }
  if (nodes.size() < 3) return scores;
  for (const auto& [node, out] : egress) {
    if (ingress.count(node)) scores[node] = std::max(out, ingress[node]);
  }
  return scores;
}

std::string seconds(double s) { return fmt::format("{:.2f} s", s); }

void add_bad(std::vector<Bad>& bad, int node, const std::string& why) {
  for (auto& b : bad) {
    if (b.node == node) {
      b.why += "; " + why;
      return;
    }
  }
  bad.push_back({node, why});
}

}  // namespace

bool read_findings(const std::string& text, NodeResult& r) {
  try {
    const json j = json::parse(text);
    r.python = j.value("python", "");
    for (const auto& c : j.at("checks")) {
      const bool ok = c.at("ok").get<bool>();
      r.checks.push_back({c.at("name").get<std::string>(), ok, c.value("seconds", 0.0),
                          ok ? c.value("detail", "") : c.value("error", "")});
    }
    const json links = j.value("links", json::object());
    for (const auto& [from, s] : links.items()) {
      r.links[std::stoi(from)] = s.get<double>();
    }
    return true;
  } catch (const std::exception& e) {
    r.checks.clear();
    r.links.clear();
    r.missing = std::string("unreadable findings: ") + e.what();
    return false;
  }
}

std::string to_json(const NodeResult& r) {
  json checks = json::array();
  for (const auto& c : r.checks) {
    checks.push_back({{"name", c.name}, {"ok", c.ok}, {"seconds", c.seconds}, {"text", c.text}});
  }
  json links = json::object();
  for (const auto& [from, s] : r.links) links[std::to_string(from)] = s;
  return json{{"host", r.host},       {"key", r.key},
              {"address", r.address}, {"hosts_store", r.hosts_store},
              {"python", r.python},   {"checks", checks},
              {"links", links},       {"missing", r.missing}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

NodeResult from_json(int node, const std::string& text) {
  NodeResult r;
  r.node = node;
  try {
    const json j = json::parse(text);
    r.host = j.at("host").get<std::string>();
    r.key = j.at("key").get<std::string>();
    r.address = j.at("address").get<std::string>();
    r.hosts_store = j.at("hosts_store").get<bool>();
    r.python = j.at("python").get<std::string>();
    r.missing = j.at("missing").get<std::string>();
    for (const auto& c : j.at("checks")) {
      r.checks.push_back({c.at("name").get<std::string>(), c.at("ok").get<bool>(),
                          c.at("seconds").get<double>(), c.at("text").get<std::string>()});
    }
    for (const auto& [from, s] : j.at("links").items()) r.links[std::stoi(from)] = s.get<double>();
  } catch (const std::exception& e) {
    r.checks.clear();
    r.links.clear();
    r.missing = std::string("unreadable findings: ") + e.what();
  }
  return r;
}

Verdict judge(const std::vector<NodeResult>& nodes, const Settings& s) {
  Verdict v;
  std::map<int, double> device, links;
  for (const auto& r : nodes) {
    if (!r.missing.empty()) {
      add_bad(v.bad, r.node, r.missing);
      continue;
    }
    for (const auto& c : r.checks) {
      if (c.ok) continue;
      // Which interpreter could not import torch is the fix's first clue (PYTHON_EXEC).
      add_bad(v.bad, r.node,
              c.name + ": " + c.text + (c.name == "import torch" ? " (" + r.python + ")" : ""));
    }
    if (const auto d = device_seconds(r)) device[r.node] = *d;
  }
  const auto name_slow = [&](const std::map<int, double>& values, const char* what) {
    std::vector<double> all;
    for (const auto& [node, x] : values) all.push_back(x);
    for (const int node : outliers(values, s.slow_factor)) {
      add_bad(v.bad, node,
              fmt::format("{} {} against a median of {} (--preflight-slow-factor {})", what,
                          seconds(values.at(node)), seconds(median(all)), s.slow_factor));
    }
  };
  name_slow(device, "devices took");
  name_slow(link_scores(nodes), "its links took");
  std::sort(v.bad.begin(), v.bad.end(), [](const Bad& a, const Bad& b) { return a.node < b.node; });
  if (v.bad.empty()) return v;

  const int n = static_cast<int>(nodes.size());
  const int left = n - static_cast<int>(v.bad.size()) + s.waiting;
  for (const auto& b : v.bad) {
    const auto it = std::find_if(nodes.begin(), nodes.end(),
                                 [&](const NodeResult& r) { return r.node == b.node; });
    if (it != nodes.end() && it->hosts_store) {
      v.action = Verdict::Action::kStop;
      v.why = fmt::format("node {} hosts the rendezvous store: it cannot be left out", b.node);
      return v;
    }
  }
  if (n > 1 && left >= s.min_nodes && left > 0) {
    v.action = Verdict::Action::kExclude;
  } else {
    v.action = Verdict::Action::kStop;
    v.why = fmt::format("{} good node(s){} and the job needs {} (--nnodes)", left,
                        s.waiting ? fmt::format(" with {} waiting", s.waiting) : "", s.min_nodes);
  }
  return v;
}

namespace {

json verdict_json(const Verdict& v) {
  json bad = json::array();
  for (const auto& b : v.bad) bad.push_back({{"node", b.node}, {"why", b.why}});
  return {{"action", static_cast<int>(v.action)}, {"bad", bad}, {"why", v.why}};
}

Verdict verdict_of(const json& j) {
  Verdict v;
  const int action = j.at("action").get<int>();
  if (action < 0 || action > 2) throw std::out_of_range("action");
  v.action = static_cast<Verdict::Action>(action);
  for (const auto& b : j.at("bad")) {
    v.bad.push_back({b.at("node").get<int>(), b.at("why").get<std::string>()});
  }
  v.why = j.at("why").get<std::string>();
  return v;
}

bool passed(const NodeResult& r) {
  return r.missing.empty() &&
         std::all_of(r.checks.begin(), r.checks.end(), [](const Check& k) { return k.ok; });
}

}  // namespace

std::string publish(const Verdict& v, const std::vector<NodeResult>& nodes) {
  json rows = json::object();
  for (const auto& b : v.bad) {
    for (const auto& r : nodes) {
      if (r.node == b.node) rows[std::to_string(r.node)] = json::parse(to_json(r));
    }
  }
  return json{{"verdict", verdict_json(v)}, {"nodes", nodes.size()}, {"rows", rows}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

Verdict read_published(const std::string& text, std::vector<NodeResult>& nodes) {
  nodes.clear();
  try {
    const json j = json::parse(text);
    Verdict v = verdict_of(j.at("verdict"));
    const int n = j.at("nodes").get<int>();
    if (n < 0 || n > (1 << 20)) throw std::out_of_range("nodes");
    for (int i = 0; i < n; ++i) {
      NodeResult r;
      r.node = i;
      r.host = fmt::format("node {}", i);
      nodes.push_back(std::move(r));
    }
    for (const auto& [node, row] : j.at("rows").items()) {
      const int i = std::stoi(node);
      if (i < 0 || i >= n) throw std::out_of_range("row " + node);
      nodes[static_cast<std::size_t>(i)] = from_json(i, row.dump());
    }
    for (const auto& b : v.bad) {
      if (b.node < 0 || b.node >= n) throw std::out_of_range("bad node");
    }
    return v;
  } catch (const std::exception& e) {
    nodes.clear();
    return {
        Verdict::Action::kStop, {}, std::string("the shared verdict is unreadable: ") + e.what()};
  }
}

std::string need_answer(const std::vector<std::string>& values) {
  return std::all_of(values.begin(), values.end(), [](const std::string& v) { return v == "0"; })
             ? kSkip
             : kRun;
}

std::string findings_answer(const std::vector<std::string>& values, bool last, const Settings& s,
                            std::chrono::milliseconds waited, std::vector<NodeResult>* read) {
  std::vector<NodeResult> nodes;
  for (int i = 0; i < static_cast<int>(values.size()); ++i) {
    const std::string& v = values[static_cast<std::size_t>(i)];
    if (v.empty()) {
      NodeResult r;
      r.node = i;
      r.host = fmt::format("node {}", i);
      r.missing = fmt::format("shared no findings within {} s", waited.count() / 1000);
      nodes.push_back(std::move(r));
    } else {
      nodes.push_back(from_json(i, v));
    }
  }
  const bool go = !last && std::all_of(nodes.begin(), nodes.end(), passed);
  std::string answer = go ? kGo : publish(judge(nodes, s), nodes);
  if (read != nullptr) *read = std::move(nodes);
  return answer;
}

std::string table(const std::vector<NodeResult>& nodes, const Verdict& v, bool all_rows) {
  std::string out = fmt::format("{:<5} {:<28} {:<9} {:<8} {:<22} {:<11} {:<8} {}", "node", "host",
                                "torch", "import", "devices", "collective", "links", "verdict");
  for (const auto& r : nodes) {
    const Check* torch = find_check(r, "import torch");
    const Check* coll = find_check(r, "collective");
    std::string devices;
    for (const auto& c : r.checks) {
      if (!is_device(c.name)) continue;
      devices += (devices.empty() ? "" : ", ") + c.name + " " + (c.ok ? seconds(c.seconds) : "-");
    }
    double slowest_link = 0;
    for (const auto& [from, s] : r.links) slowest_link = std::max(slowest_link, s);
    std::string verdict = "ok";
    for (const auto& b : v.bad) {
      if (b.node == r.node) verdict = "BAD: " + b.why;
    }
    if (!all_rows && verdict == "ok") continue;
    out += fmt::format(
        "\n{:<5} {:<28} {:<9} {:<8} {:<22} {:<11} {:<8} {}", r.node, r.host,
        torch && torch->ok ? torch->text : "-", torch && torch->ok ? seconds(torch->seconds) : "-",
        devices.empty() ? "-" : devices, coll && coll->ok ? seconds(coll->seconds) : "-",
        r.links.empty() ? "-" : seconds(slowest_link), verdict);
  }
  return out;
}

}  // namespace ddprun::launcher::preflight
