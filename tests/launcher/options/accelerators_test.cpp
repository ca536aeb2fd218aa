// AMD and Intel GPU counting (accelerators.h) on sysfs fixtures written from the kernel's
// documented layouts (tests/launcher/fixtures/accelerators/*.sysfs), recreated in a
// temporary directory and read with the real counters; and the visibility variables.
#include "launcher/options/accelerators.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "launcher/options/cli.h"
#include "tests/support/temp_dir.h"

using namespace ddprun::launcher;
namespace fs = std::filesystem;

namespace {

// Recreates a fixture under a fresh directory; returns its /sys.
struct Sysfs {
  ddprun::test::TempDir dir;
  std::string sys;
  explicit Sysfs(const std::string& name) {
    std::ifstream in(std::string(DDPRUN_SOURCE_DIR) + "/tests/launcher/fixtures/accelerators/" +
                     name);
    REQUIRE(in);
    std::map<std::string, std::string> files;
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] == '#') continue;
      const auto arrow = line.find(" -> ");
      if (arrow != std::string::npos) {
        const fs::path link = dir.path / line.substr(1, arrow - 1);
        fs::create_directories(link.parent_path());
        fs::create_symlink(line.substr(arrow + 4), link);
        continue;
      }
      const auto colon = line.find(':');
      REQUIRE(colon != std::string::npos);
      files[line.substr(1, colon - 1)] += line.substr(colon + 1) + "\n";
    }
    for (const auto& [path, text] : files) dir.write(path, text);
    sys = (dir.path / "sys").string();
  }
};

using Env = std::map<std::string, std::string>;

}  // namespace

TEST_CASE("AMD GPUs from the KFD topology, one per GCD", "[accelerators]") {
  Sysfs mi250x("mi250x-8gcd.sysfs");
  CHECK(count_amd_gpus(mi250x.sys) == 8);
  CHECK(count_intel_gpus(mi250x.sys) == 0);  // amdgpu and ast cards are not Intel's
  Sysfs dgx("dgx-a100-drm.sysfs");
  CHECK(count_amd_gpus(dgx.sys) == 0);
  CHECK(count_amd_gpus("/nonexistent") == 0);
  // Without gpu_id files: the properties' simd_count decides.
  ddprun::test::TempDir d;
  d.write("sys/class/kfd/kfd/topology/nodes/0/properties", "cpu_cores_count 16\nsimd_count 0\n");
  d.write("sys/class/kfd/kfd/topology/nodes/1/properties", "cpu_cores_count 0\nsimd_count 240\n");
  CHECK(count_amd_gpus(d.str() + "/sys") == 1);
}

TEST_CASE("Intel GPUs: cards on i915 or xe, not connectors or render nodes", "[accelerators]") {
  Sysfs max("max1550-4card.sysfs");
  CHECK(count_intel_gpus(max.sys) == 4);
  CHECK(count_amd_gpus(max.sys) == 0);
  Sysfs desktop("desktop-igpu-arc.sysfs");
  CHECK(count_intel_gpus(desktop.sys) == 2);
  Sysfs dgx("dgx-a100-drm.sysfs");
  CHECK(count_intel_gpus(dgx.sys) == 0);
}

TEST_CASE("ROCm's and Level Zero's visibility variables", "[accelerators]") {
  CHECK(visible_amd_count(8, {}) == 8);
  CHECK(visible_amd_count(8, Env{{"HIP_VISIBLE_DEVICES", "0,1,2"}}) == 3);
  CHECK(visible_amd_count(8, Env{{"CUDA_VISIBLE_DEVICES", "4,5"}}) == 2);
  // HIP_VISIBLE_DEVICES wins over CUDA_VISIBLE_DEVICES; ROCR narrows first.
  CHECK(visible_amd_count(8, Env{{"HIP_VISIBLE_DEVICES", "0"}, {"CUDA_VISIBLE_DEVICES", "0,1"}}) ==
        1);
  CHECK(visible_amd_count(8, Env{{"ROCR_VISIBLE_DEVICES", "2,3,4,5"}}) == 4);
  // HIP indexes the 4 ROCR left: 5 is out of range, and the list ends there.
  CHECK(visible_amd_count(
            8, Env{{"ROCR_VISIBLE_DEVICES", "2,3,4,5"}, {"HIP_VISIBLE_DEVICES", "0,1,5"}}) == 2);
  CHECK(visible_amd_count(8, Env{{"ROCR_VISIBLE_DEVICES", ""}}) == 0);
  CHECK(visible_intel_count(4, {}) == 4);
  CHECK(visible_intel_count(4, Env{{"ZE_AFFINITY_MASK", "0,2"}}) == 2);
  CHECK(visible_intel_count(4, Env{{"ZE_AFFINITY_MASK", "1.0,1.1,3"}}) == 2);
  CHECK(visible_intel_count(4, Env{{"ZE_AFFINITY_MASK", "7"}}) == 0);
}

TEST_CASE("nproc-per-node gpu, xpu and auto count AMD and Intel GPUs", "[accelerators]") {
  auto nproc = [](const std::string& spec, int nvidia, int amd, int intel) {
    HostFacts h;
    h.cpu_count = 16;
    h.gpu_count = nvidia;
    h.amd_gpu_count = amd;
    h.intel_gpu_count = intel;
    const CliOutcome out = parse_command_line({"--nproc-per-node=" + spec, "x.py"}, h);
    return out.kind == CliOutcome::Kind::kRun ? out.config.nproc_per_node : -1;
  };
  CHECK(nproc("gpu", 0, 8, 0) == 8);
  CHECK(nproc("auto", 0, 8, 0) == 8);
  CHECK(nproc("gpu", 4, 0, 0) == 4);
  CHECK(nproc("gpu", 0, 0, 4) == -1);  // torch.cuda does not see Intel GPUs
  CHECK(nproc("xpu", 0, 0, 4) == 4);
  CHECK(nproc("xpu", 0, 8, 0) == -1);
  CHECK(nproc("auto", 0, 0, 4) == 4);
  CHECK(nproc("auto", 0, 0, 0) == 16);
}
