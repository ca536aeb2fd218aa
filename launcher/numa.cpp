// numa.cpp: --numa-binding (see numa.h): sysfs topology, the pure plan per mode, and the
// plan for this process. Used by the Agent.
#include "launcher/numa.h"

#include <fmt/format.h>
#include <sched.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "base/file.h"
#include "base/text.h"

namespace ddprun::launcher {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> read_text(const fs::path& path) {
  std::optional<std::string> read = read_file(path);
  if (!read) return std::nullopt;
  std::string text = *std::move(read);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// A sysfs number; base 16 ones ("0x10de") may carry their "0x".
std::optional<long> to_long(std::string_view text, int base = 10) {
  if (base == 16 && text.substr(0, 2) == "0x") text.remove_prefix(2);
  return parse_int<long>(text, base);
}

// Numbered entries "<prefix><N>" of `dir`, sorted by N.
std::vector<int> numbered(const fs::path& dir, const std::string& prefix) {
  std::vector<int> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    if (const auto n = to_long(std::string_view(name).substr(prefix.size())); n && *n >= 0) {
      out.push_back(static_cast<int>(*n));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The smallest CPU sharing `cpu`'s highest-level data or unified cache (itself if none).
int last_level_cache(const fs::path& cpu_dir, int cpu) {
  int best_level = -1;
  int key = cpu;
  for (int index : numbered(cpu_dir / "cache", "index")) {
    const fs::path dir = cpu_dir / "cache" / ("index" + std::to_string(index));
    const auto type = read_text(dir / "type");
    if (!type || (*type != "Unified" && *type != "Data")) continue;
    const auto level_text = read_text(dir / "level");
    // A plain number (-1: unreadable): GCC 12 -O2 sees a std::optional here as maybe
    // uninitialized (a false -Wmaybe-uninitialized that failed the Release -Werror build).
    const long level = level_text ? to_long(*level_text).value_or(-1) : -1;
    const auto shared = read_text(dir / "shared_cpu_list");
    if (level < 0 || !shared || level <= best_level) continue;
    const auto cpus = parse_cpu_list(*shared, (dir / "shared_cpu_list").string());
    if (cpus.empty()) continue;
    best_level = static_cast<int>(level);
    key = *cpus.begin();
  }
  return key;
}

}  // namespace

std::set<int> parse_cpu_list(const std::string& text, const std::string& what) {
  std::set<int> out;
  std::string_view rest = text;
  while (!rest.empty()) {
    const auto comma = std::min(rest.find(','), rest.size());
    std::string_view item = rest.substr(0, comma);
    rest.remove_prefix(std::min(comma + 1, rest.size()));
    while (!item.empty() && (item.front() == ' ' || item.front() == '\n')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\n')) item.remove_suffix(1);
    if (item.empty()) continue;
    const auto dash = item.find('-');
    const auto lo = to_long(item.substr(0, dash));
    const auto hi = dash == std::string_view::npos ? lo : to_long(item.substr(dash + 1));
    constexpr long kMaxCpu = 1 << 16;
    if (!lo || !hi || *lo < 0 || *hi < *lo || *hi >= kMaxCpu) {
      throw NumaError(fmt::format("{}: bad CPU list '{}'", what, text));
    }
    for (long c = *lo; c <= *hi; ++c) out.insert(static_cast<int>(c));
  }
  return out;
}

std::string format_cpu_list(const std::set<int>& cpus) {
  std::string out;
  for (auto it = cpus.begin(); it != cpus.end();) {
    const int lo = *it;
    int hi = lo;
    for (++it; it != cpus.end() && *it == hi + 1; ++it) hi = *it;
    out +=
        (out.empty() ? "" : ",") + (lo == hi ? std::to_string(lo) : fmt::format("{}-{}", lo, hi));
  }
  return out;
}

NumaTopology read_topology(const std::string& root) {
  NumaTopology t;
  const fs::path sys(root);
  const fs::path cpu_root = sys / "devices/system/cpu";
  const auto online_text = read_text(cpu_root / "online");
  std::set<int> online;
  if (online_text) {
    online = parse_cpu_list(*online_text, (cpu_root / "online").string());
  } else {
    for (int c : numbered(cpu_root, "cpu")) online.insert(c);
  }
  if (online.empty()) throw NumaError(fmt::format("no CPUs found under {}", cpu_root.string()));
  for (int cpu : online) {
    const fs::path dir = cpu_root / ("cpu" + std::to_string(cpu));
    NumaTopology::Cpu c;
    const auto pkg = read_text(dir / "topology/physical_package_id");
    c.package = pkg ? static_cast<int>(to_long(*pkg).value_or(0)) : 0;
    const auto siblings = read_text(dir / "topology/thread_siblings_list");
    const auto sib =
        siblings ? parse_cpu_list(*siblings, (dir / "topology").string()) : std::set<int>{cpu};
    c.core = sib.empty() ? cpu : *sib.begin();
    c.llc = last_level_cache(dir, cpu);
    t.cpus[cpu] = c;
  }
  const fs::path node_root = sys / "devices/system/node";
  for (int node : numbered(node_root, "node")) {
    const fs::path file = node_root / ("node" + std::to_string(node)) / "cpulist";
    const auto text = read_text(file);
    if (!text) continue;
    std::set<int> cpus;
    for (int c : parse_cpu_list(*text, file.string())) {
      if (online.count(c) != 0) cpus.insert(c);
    }
    t.node_cpus[node] = std::move(cpus);
  }
  if (t.node_cpus.empty()) t.node_cpus[0] = online;
  const fs::path pci = sys / "bus/pci/devices";
  std::vector<std::string> addrs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(pci, ec)) addrs.push_back(e.path().filename());
  std::sort(addrs.begin(), addrs.end());
  for (const std::string& addr : addrs) {
    const auto vendor = read_text(pci / addr / "vendor");
    const auto cls = read_text(pci / addr / "class");
    if (!vendor || !cls || to_long(*vendor, 16) != 0x10de) continue;
    const auto cls_value = to_long(*cls, 16);
    if (!cls_value || (*cls_value >> 16) != 0x03) continue;  // display / 3D controllers
    const auto node_text = read_text(pci / addr / "numa_node");
    const long node = node_text ? to_long(*node_text).value_or(-1) : -1;
    t.gpus.push_back({addr, static_cast<int>(std::max(node, 0L))});
  }
  return t;
}

std::vector<RankPlacement> plan_numa(const std::string& mode, const NumaTopology& topology,
                                     const std::set<int>& allowed, int nproc,
                                     const std::optional<std::string>& visible_devices) {
  const auto node_allowed = [&](int node) {
    std::set<int> out;
    const auto it = topology.node_cpus.find(node);
    if (it == topology.node_cpus.end()) return out;
    for (int c : it->second) {
      if (allowed.count(c) != 0) out.insert(c);
    }
    return out;
  };
  // The GPUs as CUDA numbers them here: through CUDA_VISIBLE_DEVICES when it is set.
  std::vector<int> gpu_nodes;
  if (!topology.gpus.empty()) {
    if (visible_devices) {
      std::stringstream in(*visible_devices);
      for (std::string item; std::getline(in, item, ',');) {
        const auto n = to_long(item);
        if (!n || *n < 0 || *n >= static_cast<long>(topology.gpus.size())) {
          // CUDA stops at the first entry it cannot use.
          break;
        }
        gpu_nodes.push_back(topology.gpus[*n].node);
      }
    } else {
      for (const auto& g : topology.gpus) gpu_nodes.push_back(g.node);
    }
  }
  // No NVIDIA GPU at all (a CPU job): rank r stands on the r-th node with allowed CPUs.
  const bool cpu_job = topology.gpus.empty();
  std::vector<int> cpu_nodes;
  for (const auto& [node, cpus] : topology.node_cpus) {
    if (!node_allowed(node).empty()) cpu_nodes.push_back(node);
  }
  if (cpu_job && cpu_nodes.empty()) throw NumaError("no NUMA node has a CPU this process may use");
  const auto node_of_rank = [&](int rank) {
    if (cpu_job) return cpu_nodes[static_cast<std::size_t>(rank) % cpu_nodes.size()];
    if (rank >= static_cast<int>(gpu_nodes.size())) {
      throw NumaError(fmt::format(
          "local rank {} has no GPU to bind by ({} visible NVIDIA GPU(s){})", rank,
          gpu_nodes.size(),
          visible_devices ? ", CUDA_VISIBLE_DEVICES=" + *visible_devices : std::string()));
    }
    return gpu_nodes[rank];
  };
  // The "GPUs" of a node: the ranks' stand-ins for a CPU job.
  const auto node_gpus = [&](int node) {
    std::vector<int> out;
    const int count = cpu_job ? nproc : static_cast<int>(gpu_nodes.size());
    for (int g = 0; g < count; ++g) {
      if (node_of_rank(g) == node) out.push_back(g);
    }
    return out;
  };

  std::vector<RankPlacement> plan;
  for (int rank = 0; rank < nproc; ++rank) {
    RankPlacement p;
    p.local_rank = rank;
    p.gpu = cpu_job ? -1 : rank;
    p.node = node_of_rank(rank);
    const std::set<int> local = node_allowed(p.node);
    if (local.empty()) {
      throw NumaError(fmt::format("NUMA node {} (local rank {}) has no CPU this process may use",
                                  p.node, rank));
    }
    if (mode == "node") {
      p.cpus = local;
    } else if (mode == "socket") {
      const int package = topology.cpus.at(*local.begin()).package;
      for (const auto& [node, cpus] : topology.node_cpus) {
        const std::set<int> mine = node_allowed(node);
        if (!mine.empty() && topology.cpus.at(*mine.begin()).package == package) {
          p.cpus.insert(mine.begin(), mine.end());
        }
      }
    } else if (mode == "exclusive" || mode == "core-complex") {
      const std::vector<int> peers = node_gpus(p.node);
      const auto index =
          static_cast<std::size_t>(std::find(peers.begin(), peers.end(), rank) - peers.begin());
      const bool exclusive = mode == "exclusive";
      std::map<int, std::set<int>> groups;  // core (or cache) -> its allowed CPUs
      for (int c : local) {
        const auto& cpu = topology.cpus.at(c);
        groups[exclusive ? cpu.core : cpu.llc].insert(c);
      }
      std::vector<std::set<int>> ordered;
      for (auto& [key, cpus] : groups) ordered.push_back(std::move(cpus));
      if (exclusive) {
        if (ordered.size() < peers.size()) {
          throw NumaError(fmt::format(
              "--numa-binding=exclusive: NUMA node {} has {} physical core(s) for {} GPU(s)",
              p.node, ordered.size(), peers.size()));
        }
        const std::size_t each = ordered.size() / peers.size();
        const std::size_t extra = ordered.size() % peers.size();
        const std::size_t start = index * each + std::min(index, extra);
        const std::size_t end = start + each + (index < extra ? 1 : 0);
        for (std::size_t i = start; i < end; ++i)
          p.cpus.insert(ordered[i].begin(), ordered[i].end());
      } else {
        // Largest caches first, then by their smallest CPU.
        std::stable_sort(ordered.begin(), ordered.end(),
                         [](const auto& a, const auto& b) { return a.size() > b.size(); });
        p.cpus = ordered[index % ordered.size()];
      }
    } else {
      throw NumaError(fmt::format("unknown --numa-binding mode '{}'", mode));
    }
    plan.push_back(std::move(p));
  }
  return plan;
}

std::string describe_plan(const std::string& mode, const std::vector<RankPlacement>& plan) {
  std::string out = fmt::format("numa binding ({}):", mode);
  for (const auto& p : plan) {
    out += fmt::format("{} rank {} -> node {} cpus {}", &p == &plan.front() ? "" : ",",
                       p.local_rank, p.node, format_cpu_list(p.cpus));
    if (p.gpu >= 0) out += fmt::format(" (GPU {})", p.gpu);
  }
  return out;
}

std::vector<RankPlacement> plan_for_this_process(
    const std::string& mode, int nproc, const std::optional<std::string>& visible_devices) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::set<int> allowed;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) allowed.insert(c);
    }
  }
  return plan_numa(mode, read_topology("/sys"), allowed, nproc, visible_devices);
}

std::vector<RankPlacement> plan_and_show(const std::string& mode, int nproc,
                                         const std::map<std::string, std::string>& env) {
  const auto cvd = env.find("CUDA_VISIBLE_DEVICES");
  std::vector<RankPlacement> plan = plan_for_this_process(
      mode, nproc, cvd == env.end() ? std::nullopt : std::optional<std::string>(cvd->second));
  spdlog::warn("{}", describe_plan(mode, plan));
  return plan;
}

}  // namespace ddprun::launcher
