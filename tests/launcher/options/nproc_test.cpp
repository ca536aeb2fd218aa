// GPU counting for --nproc-per-node gpu|auto, over a fake /proc and /dev root.
#include "launcher/options/nproc.h"

#include <catch2/catch.hpp>
#include <filesystem>

#include "tests/support/temp_dir.h"

using namespace ddprun::launcher;
namespace fs = std::filesystem;

namespace {

// A fake file-system root holding only the driver entries a test creates.
struct FakeRoot {
  ddprun::test::TempDir dir;
  const fs::path& root = dir.path;
  void touch(const std::string& rel) { dir.write(rel, ""); }
};

}  // namespace

TEST_CASE("physical GPUs from /proc/driver/nvidia/gpus, else /dev/nvidiaN", "[nproc]") {
  FakeRoot r;
  CHECK(count_physical_gpus(r.root.string()) == 0);
  r.touch("dev/nvidiactl");
  r.touch("dev/nvidia-uvm");
  CHECK(count_physical_gpus(r.root.string()) == 0);
  r.touch("dev/nvidia0");
  r.touch("dev/nvidia1");
  CHECK(count_physical_gpus(r.root.string()) == 2);
  for (const char* bus : {"0000:01:00.0", "0000:02:00.0", "0000:03:00.0"}) {
    fs::create_directories(r.root / "proc/driver/nvidia/gpus" / bus);
  }
  CHECK(count_physical_gpus(r.root.string()) == 3);
}

TEST_CASE("CUDA_VISIBLE_DEVICES narrows the count like the CUDA runtime", "[nproc]") {
  CHECK(visible_gpu_count(4, std::nullopt) == 4);
  CHECK(visible_gpu_count(4, std::string("")) == 0);
  CHECK(visible_gpu_count(4, std::string("0,2")) == 2);
  CHECK(visible_gpu_count(4, std::string("3, 1")) == 2);
  CHECK(visible_gpu_count(4, std::string("1,7,2")) == 1);  // stops at the invalid 7
  CHECK(visible_gpu_count(4, std::string("-1")) == 0);
  CHECK(visible_gpu_count(4, std::string("0,0")) == 1);
  CHECK(visible_gpu_count(2, std::string("GPU-abc,GPU-def,GPU-x")) == 2);
  CHECK(visible_gpu_count(0, std::string("0")) == 0);
  CHECK(cpu_count() >= 1);
}
