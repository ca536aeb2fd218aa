// numa_test.cpp: --numa-binding: CPU lists, the topology reader on sysfs layouts of two
// 2-socket 8-GPU machines (fixtures/numa/*.sysfs, recreated as directories), and the plan
// of every mode on them, CUDA_VISIBLE_DEVICES, a restricted affinity and the errors.
#include "launcher/numa.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "tests/support/temp_dir.h"

namespace ddprun::launcher {
namespace {

namespace fs = std::filesystem;

const std::string kFixtures = std::string(DDPRUN_SOURCE_DIR) + "/tests/launcher/fixtures/numa/";

// Recreates the files of a `grep . FILES` dump ("/sys/<path>:<content>") under `dir`;
// returns the directory that stands for /sys.
std::string materialize(const ddprun::test::TempDir& dir, const std::string& machine) {
  std::ifstream in(kFixtures + machine + ".sysfs");
  REQUIRE(in);
  std::set<fs::path> made;  // create_directories once per directory (thousands of files)
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.rfind(':');  // PCI addresses hold ':', the values do not
    REQUIRE(colon != std::string::npos);
    REQUIRE(line.rfind("/sys/", 0) == 0);
    const fs::path file = dir.path / line.substr(1, colon - 1);
    if (made.insert(file.parent_path()).second) fs::create_directories(file.parent_path());
    std::ofstream(file) << line.substr(colon + 1) << "\n";
  }
  return (dir.path / "sys").string();
}

std::set<int> cpus(const std::string& list) { return parse_cpu_list(list, "test"); }

std::set<int> all_of(const NumaTopology& t) {
  std::set<int> out;
  for (const auto& [cpu, info] : t.cpus) out.insert(cpu);
  return out;
}

}  // namespace

TEST_CASE("numa: CPU lists", "[numa]") {
  CHECK(cpus("0-3,8,10-11\n") == std::set<int>{0, 1, 2, 3, 8, 10, 11});
  CHECK(cpus("") == std::set<int>{});
  CHECK(format_cpu_list({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11");
  CHECK(format_cpu_list({5}) == "5");
  CHECK(format_cpu_list({}).empty());
  for (const char* bad : {"a", "3-1", "-1", "1-", "1,,x", "99999999"}) {
    INFO(bad);
    CHECK_THROWS_AS(cpus(bad), NumaError);
  }
}

TEST_CASE("numa: the DGX-1 (2 sockets, 1 node each, 8 GPUs)", "[numa]") {
  ddprun::test::TempDir dir;
  const NumaTopology t = read_topology(materialize(dir, "dgx1-v100"));
  REQUIRE(t.cpus.size() == 80);
  REQUIRE(t.node_cpus.size() == 2);
  CHECK(format_cpu_list(t.node_cpus.at(1)) == "20-39,60-79");
  REQUIRE(t.gpus.size() == 8);  // the Mellanox NICs are not GPUs
  CHECK(t.gpus[4].pci == "0000:85:00.0");
  CHECK(t.gpus[4].node == 1);
  CHECK(t.cpus.at(45).core == 5);
  CHECK(t.cpus.at(45).package == 0);
  CHECK(t.cpus.at(45).llc == 0);
  const auto all = all_of(t);

  const auto node = plan_numa("node", t, all, 8, std::nullopt);
  REQUIRE(node.size() == 8);
  CHECK(format_cpu_list(node[0].cpus) == "0-19,40-59");
  CHECK(format_cpu_list(node[7].cpus) == "20-39,60-79");
  CHECK(node[7].node == 1);
  CHECK(node[7].gpu == 7);
  // One node per socket: socket is node.
  CHECK(plan_numa("socket", t, all, 8, std::nullopt)[5].cpus == node[5].cpus);
  // exclusive: 20 cores for 4 GPUs per node, 5 each, both threads of each core.
  const auto excl = plan_numa("exclusive", t, all, 8, std::nullopt);
  CHECK(format_cpu_list(excl[0].cpus) == "0-4,40-44");
  CHECK(format_cpu_list(excl[3].cpus) == "15-19,55-59");
  CHECK(format_cpu_list(excl[4].cpus) == "20-24,60-64");
  // core-complex: one L3 per socket, shared by the node's 4 GPUs.
  CHECK(plan_numa("core-complex", t, all, 8, std::nullopt)[2].cpus == node[2].cpus);
  // CUDA_VISIBLE_DEVICES renumbers the GPUs: local rank 0 is GPU 6.
  const auto cvd = plan_numa("exclusive", t, all, 2, std::string("6,1"));
  CHECK(cvd[0].node == 1);
  CHECK(format_cpu_list(cvd[0].cpus) == "20-39,60-79");  // the only visible GPU of node 1
  CHECK(cvd[1].node == 0);
  CHECK(describe_plan("node", {node[0], node[4]}) ==
        "numa binding (node): rank 0 -> node 0 cpus 0-19,40-59 (GPU 0), "
        "rank 4 -> node 1 cpus 20-39,60-79 (GPU 4)");
}

TEST_CASE("numa: the DGX A100 (2 sockets, NPS4, L3 per CCX, NVSwitches)", "[numa]") {
  ddprun::test::TempDir dir;
  const NumaTopology t = read_topology(materialize(dir, "dgx-a100"));
  REQUIRE(t.cpus.size() == 256);
  REQUIRE(t.node_cpus.size() == 8);
  REQUIRE(t.gpus.size() == 8);  // the 6 NVSwitches (NVIDIA, class 0x0680) are not GPUs
  const auto all = all_of(t);
  const std::vector<int> gpu_nodes = {3, 3, 1, 1, 7, 7, 5, 5};
  const auto node = plan_numa("node", t, all, 8, std::nullopt);
  for (int r = 0; r < 8; ++r) CHECK(node[r].node == gpu_nodes[r]);
  CHECK(format_cpu_list(node[0].cpus) == "48-63,176-191");
  // socket: every node of the GPU's socket.
  CHECK(format_cpu_list(plan_numa("socket", t, all, 8, std::nullopt)[0].cpus) == "0-63,128-191");
  CHECK(format_cpu_list(plan_numa("socket", t, all, 8, std::nullopt)[6].cpus) == "64-127,192-255");
  const auto excl = plan_numa("exclusive", t, all, 8, std::nullopt);
  CHECK(format_cpu_list(excl[0].cpus) == "48-55,176-183");
  CHECK(format_cpu_list(excl[1].cpus) == "56-63,184-191");
  CHECK(format_cpu_list(excl[7].cpus) == "88-95,216-223");
  const auto ccx = plan_numa("core-complex", t, all, 8, std::nullopt);
  CHECK(format_cpu_list(ccx[0].cpus) == "48-51,176-179");
  CHECK(format_cpu_list(ccx[1].cpus) == "52-55,180-183");
  CHECK(format_cpu_list(ccx[2].cpus) == "16-19,144-147");
  // Only CPUs this process may use: the largest cache group comes first.
  std::set<int> some = cpus("0-255");
  for (int c : cpus("48-50,176-178")) some.erase(c);
  CHECK(format_cpu_list(plan_numa("core-complex", t, some, 1, std::nullopt)[0].cpus) ==
        "52-55,180-183");
  CHECK(format_cpu_list(plan_numa("exclusive", t, some, 2, std::nullopt)[0].cpus) ==
        "51-57,179-185");
}

TEST_CASE("numa: errors and CPU jobs", "[numa]") {
  ddprun::test::TempDir dir;
  const NumaTopology t = read_topology(materialize(dir, "dgx1-v100"));
  const auto all = all_of(t);
  const auto fails = [&](const std::string& mode, const std::set<int>& allowed, int nproc,
                         std::optional<std::string> cvd, const std::string& text) {
    INFO(mode << " " << nproc);
    try {
      plan_numa(mode, t, allowed, nproc, cvd);
      FAIL("no error");
    } catch (const NumaError& e) {
      CHECK(std::string(e.what()).find(text) != std::string::npos);
    }
  };
  fails("node", all, 9, std::nullopt, "local rank 8 has no GPU to bind by (8 visible");
  fails("node", all, 3, std::string("1,x,2"), "local rank 1 has no GPU");
  fails("node", cpus("0-19,40-59"), 5, std::nullopt,
        "NUMA node 1 (local rank 4) has no CPU this process may use");
  fails("exclusive", cpus("0-2"), 4, std::nullopt,
        "NUMA node 0 has 3 physical core(s) for 4 GPU(s)");
  fails("cores", all, 1, std::nullopt, "unknown --numa-binding mode 'cores'");

  // No NVIDIA GPU: rank r stands on the r-th node (modulo), exclusive splits its cores.
  NumaTopology cpu_only = t;
  cpu_only.gpus.clear();
  const auto plan = plan_numa("exclusive", cpu_only, all, 4, std::nullopt);
  CHECK(plan[0].node == 0);
  CHECK(plan[1].node == 1);
  CHECK(plan[2].node == 0);
  CHECK(plan[0].gpu == -1);
  CHECK(format_cpu_list(plan[0].cpus) == "0-9,40-49");
  CHECK(format_cpu_list(plan[2].cpus) == "10-19,50-59");
  CHECK(describe_plan("exclusive", {plan[3]}) ==
        "numa binding (exclusive): rank 3 -> node 1 cpus 30-39,70-79");
  // A machine without node directories is one node.
  ddprun::test::TempDir bare;
  fs::create_directories(bare.path / "devices/system/cpu/cpu0");
  fs::create_directories(bare.path / "devices/system/cpu/cpu1");
  const NumaTopology one = read_topology(bare.str());
  CHECK(format_cpu_list(one.node_cpus.at(0)) == "0-1");
  CHECK(plan_numa("node", one, {0, 1}, 2, std::nullopt)[1].cpus == std::set<int>{0, 1});
}

}  // namespace ddprun::launcher
