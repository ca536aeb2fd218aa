// numa.h: --numa-binding: the machine's topology as sysfs shows it, and the pure plan
// that gives each local rank the CPUs its worker is bound to (sched_setaffinity in the
// child before exec, spawn.h), after newest torchrun's modes (docs/usage.md "NUMA
// binding"). Used by the Agent to fill WorkerSpec::cpus. Thread-safety: pure functions,
// except read_topology and plan_for_this_process, which read sysfs and the affinity.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddprun::launcher {

class NumaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct NumaTopology {
  struct Cpu {
    int package = 0;  // physical_package_id (the socket)
    int core = 0;     // the smallest CPU of its thread_siblings_list (the physical core)
    int llc = 0;      // the smallest CPU sharing its last-level cache
  };
  std::map<int, std::set<int>> node_cpus;  // NUMA node -> its CPUs (nodeN/cpulist)
  std::map<int, Cpu> cpus;                 // online CPU -> its place
  struct Gpu {
    std::string pci;  // "0000:07:00.0"
    int node = 0;     // its PCI numa_node (-1 read as 0)
  };
  std::vector<Gpu> gpus;  // NVIDIA GPUs in PCI address order
};

// Reads `root` laid out as /sys (root "/sys" for this machine; tests pass a directory
// with the same layout): devices/system/node/node*/cpulist, devices/system/cpu/cpu*/
// topology/{physical_package_id,thread_siblings_list}, devices/system/cpu/cpu*/cache/
// index*/{type,level,shared_cpu_list} and bus/pci/devices/*/{vendor,class,numa_node}.
// A machine without node directories is one node 0 holding every CPU. Throws NumaError.
NumaTopology read_topology(const std::string& root);

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}. Throws NumaError naming `what` on bad text.
std::set<int> parse_cpu_list(const std::string& text, const std::string& what);
// The reverse, compact: {0,1,2,3,8} -> "0-3,8".
std::string format_cpu_list(const std::set<int>& cpus);

struct RankPlacement {
  int local_rank = 0;
  int gpu = -1;  // the GPU index it was placed by, or -1 (no NVIDIA GPU: CPU job)
  int node = 0;
  std::set<int> cpus;
};

// The plan for `nproc` local ranks, after torch.numa.binding.AffinityMode:
//   node          every allowed CPU of the NUMA node of the rank's GPU;
//   socket        every allowed CPU of every NUMA node on that node's socket;
//   exclusive     the node's physical cores split evenly among the node's GPUs (in GPU
//                 order; the first GPUs get one more when they do not divide), all SMT
//                 siblings of a core together; an error when a node has fewer cores
//                 than GPUs;
//   core-complex  one group of CPUs sharing the last-level cache (an L3 "core complex")
//                 of the node, the largest groups first, the GPU's index among the
//                 node's GPUs modulo the number of groups.
// The rank's GPU is GPU <local rank> in CUDA's numbering: the NVIDIA display/3D PCI
// devices (vendor 0x10de, class 0x03xxxx) in PCI address order, as with
// CUDA_DEVICE_ORDER=PCI_BUS_ID, through a numeric CUDA_VISIBLE_DEVICES when set. A PCI
// numa_node of -1 (single-node machines) means node 0. Like torch, only CPUs are bound
// (no memory policy: first-touch places memory on the bound node). ddprun's addition for
// hosts without NVIDIA GPUs (CPU jobs): local rank r is placed as if its GPU were on the
// r-th NUMA node that has CPUs (modulo their number).
// `mode`: node, socket, exclusive or core-complex.
// `allowed`: the CPUs this process may use (sched_getaffinity; every plan is within it).
// `visible_devices`: CUDA_VISIBLE_DEVICES, or nullopt when unset. Throws NumaError (a rank
// whose GPU does not exist, a NUMA node with no allowed CPU, too few cores for exclusive).
std::vector<RankPlacement> plan_numa(const std::string& mode, const NumaTopology& topology,
                                     const std::set<int>& allowed, int nproc,
                                     const std::optional<std::string>& visible_devices);

// plan_numa for this process: /sys's topology and the CPUs sched_getaffinity allows.
std::vector<RankPlacement> plan_for_this_process(const std::string& mode, int nproc,
                                                 const std::optional<std::string>& visible_devices);

// The one line shown at start: "numa binding (node): rank 0 -> node 0 cpus 0-19,40-59 (GPU
// 0), rank 1 -> ...".
std::string describe_plan(const std::string& mode, const std::vector<RankPlacement>& plan);

// The Agent's start: plan_for_this_process for CUDA_VISIBLE_DEVICES of `env` (the
// agent's environment), shown with describe_plan at the default level (the user asked
// for the binding). Throws NumaError.
std::vector<RankPlacement> plan_and_show(const std::string& mode, int nproc,
                                         const std::map<std::string, std::string>& env);

}  // namespace ddprun::launcher
