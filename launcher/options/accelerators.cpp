// accelerators.cpp: AMD and Intel GPU counting from sysfs (see accelerators.h).
#include "launcher/options/accelerators.h"

#include <filesystem>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>

#include "base/file.h"
#include "base/text.h"
#include "launcher/options/nproc.h"

namespace ddprun::launcher {
namespace {

namespace fs = std::filesystem;

bool is_kfd_gpu(const fs::path& node) {
  if (const auto id = read_file(node / "gpu_id")) {
    const auto v = parse_int<unsigned long long>(trim(*id));
    return v && *v != 0;
  }
  const auto props = read_file(node / "properties");
  if (!props) return false;
  std::istringstream in(*props);
  std::string key;
  long long value = 0;
  while (in >> key >> value) {
    if (key == "simd_count") return value > 0;
  }
  return false;
}

std::optional<std::string> get(const std::map<std::string, std::string>& env, const char* k) {
  const auto it = env.find(k);
  return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
}

}  // namespace

int count_amd_gpus(const std::string& sys_root) {
  std::error_code ec;
  int n = 0;
  const fs::path nodes = fs::path(sys_root) / "class/kfd/kfd/topology/nodes";
  for (fs::directory_iterator it(nodes, ec), end; !ec && it != end; it.increment(ec)) {
    if (is_kfd_gpu(it->path())) ++n;
  }
  return n;
}

int count_intel_gpus(const std::string& sys_root) {
  std::error_code ec;
  int n = 0;
  const fs::path drm = fs::path(sys_root) / "class/drm";
  for (fs::directory_iterator it(drm, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("card", 0) != 0 || !parse_int<int>(std::string_view(name).substr(4))) continue;
    std::error_code lec;
    const fs::path driver = fs::read_symlink(it->path() / "device/driver", lec);
    if (lec) continue;
    const std::string d = driver.filename().string();
    if (d == "i915" || d == "xe") ++n;
  }
  return n;
}

int visible_amd_count(int physical, const std::map<std::string, std::string>& env) {
  int n = physical;
  if (const auto rocr = get(env, "ROCR_VISIBLE_DEVICES")) n = visible_gpu_count(n, rocr);
  auto hip = get(env, "HIP_VISIBLE_DEVICES");
  if (!hip) hip = get(env, "CUDA_VISIBLE_DEVICES");
  if (hip) n = visible_gpu_count(n, hip);
  return n;
}

int visible_intel_count(int physical, const std::map<std::string, std::string>& env) {
  const auto mask = get(env, "ZE_AFFINITY_MASK");
  if (!mask || trim(*mask).empty()) return physical;
  std::set<int> cards;
  for (const auto& entry : split(*mask, ',')) {
    const std::string_view e = trim(entry);
    const auto card = parse_int<int>(e.substr(0, e.find('.')));
    if (card && *card >= 0 && *card < physical) cards.insert(*card);
  }
  return static_cast<int>(cards.size());
}

}  // namespace ddprun::launcher
