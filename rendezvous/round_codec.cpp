// round_codec.cpp: the JSON of a node's descriptor, the job's fingerprint and the
// workers' store address, and command_line() for messages (round_codec.h).
#include "rendezvous/round_codec.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace ddprun::rdzv {

std::string NodeDesc::label() const {
  std::string out = addr;
  if (!host.empty() && host != addr) out += " (" + host + ")";
  out += " pid " + std::to_string(pid);
  return out;
}

std::string encode_node_desc(const NodeDesc& desc) {
  nlohmann::json j;
  j["addr"] = desc.addr;
  j["host"] = desc.host;
  j["pid"] = desc.pid;
  j["node_rank"] = desc.node_rank;
  j["node_rank_defaulted"] = desc.node_rank_defaulted;
  j["nproc"] = desc.nproc;
  j["restarts"] = desc.restarts;
  j["rdzv_host"] = desc.rdzv_host;
  if (desc.job) j["job"] = nlohmann::json::parse(*desc.job, nullptr, false);
  return j.dump();
}

std::optional<NodeDesc> decode_node_desc(std::string_view json, int slot) {
  auto j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  NodeDesc d;
  d.slot = slot;
  // value() throws on a field of the wrong type: such a descriptor is corrupt too.
  try {
    d.addr = j.value("addr", "");
    d.host = j.value("host", "");
    d.pid = j.value("pid", 0L);
    d.node_rank = j.value("node_rank", -1);
    d.node_rank_defaulted = j.value("node_rank_defaulted", false);
    d.nproc = j.value("nproc", 1);
    d.restarts = j.value("restarts", 0);
    d.rdzv_host = j.value("rdzv_host", false);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
  if (auto it = j.find("job"); it != j.end()) d.job = it->dump();
  return d;
}

std::string job_fingerprint(const std::vector<std::string>& command) {
  return nlohmann::json(command).dump();
}

std::optional<std::vector<std::string>> decode_job_fingerprint(std::string_view json) {
  auto j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.is_array() ||
      !std::all_of(j.begin(), j.end(), [](const auto& w) { return w.is_string(); })) {
    return std::nullopt;
  }
  return j.get<std::vector<std::string>>();
}

std::string encode_workers_store(const std::string& addr, std::uint16_t port) {
  return nlohmann::json{{"addr", addr}, {"port", port}}.dump();
}

std::optional<Endpoint> decode_workers_store(std::string_view json) {
  auto j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  auto addr = j.find("addr");
  auto port = j.find("port");
  if (addr == j.end() || port == j.end() || !addr->is_string() || !port->is_number_unsigned() ||
      port->get<std::uint64_t>() > 65535) {
    return std::nullopt;
  }
  return Endpoint{addr->get<std::string>(), port->get<int>()};
}

std::string command_line(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) {
    if (!out.empty()) out += ' ';
    if (!w.empty() && w.find_first_of(" \t\n'\"\\$`;&|<>()*?") == std::string::npos) {
      out += w;
      continue;
    }
    out += '\'';
    for (char c : w) {
      if (c == '\'') {
        out += "'\\''";
      } else if (c == '\n') {
        out += "\\n";  // keeps the message on one line
      } else {
        out += c;
      }
    }
    out += '\'';
  }
  if (out.size() > 400) out = out.substr(0, 400) + "...";
  return out.empty() ? "(no command)" : out;
}

}  // namespace ddprun::rdzv
