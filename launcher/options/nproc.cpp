// nproc.cpp: CPU and GPU counting (see nproc.h): online CPUs, NVIDIA GPUs from
// /proc/driver/nvidia and /dev. Used by cli.cpp (--nproc-per-node cpu/gpu/auto).
#include "launcher/options/nproc.h"

#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <set>
#include <system_error>

#include "base/text.h"

namespace ddprun::launcher {

int count_physical_gpus(const std::string& root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path base(root);
  int n = 0;
  // One directory per GPU (named by PCI address) while the driver is loaded.
  for (fs::directory_iterator it(base / "proc/driver/nvidia/gpus", ec), end; !ec && it != end;
       it.increment(ec)) {
    ++n;
  }
  if (n > 0) return n;
  // Containers often get the device nodes without /proc/driver/nvidia.
  for (fs::directory_iterator it(base / "dev", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 6 && name.compare(0, 6, "nvidia") == 0) {
      bool digits = true;
      for (std::size_t i = 6; i < name.size(); ++i) {
        digits = digits && std::isdigit(static_cast<unsigned char>(name[i]));
      }
      if (digits) ++n;
    }
  }
  return n;
}

int visible_gpu_count(int physical, const std::optional<std::string>& cuda_visible_devices) {
  if (!cuda_visible_devices) return physical;
  std::set<std::string> seen;
  int n = 0;
  std::string::size_type start = 0;
  const std::string& s = *cuda_visible_devices;
  while (start <= s.size() && n < physical) {
    auto end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string entry = s.substr(start, end - start);
    while (!entry.empty() && std::isspace(static_cast<unsigned char>(entry.front()))) {
      entry.erase(entry.begin());
    }
    while (!entry.empty() && std::isspace(static_cast<unsigned char>(entry.back()))) {
      entry.pop_back();
    }
    bool valid = false;
    if (entry.rfind("GPU-", 0) == 0 || entry.rfind("MIG-", 0) == 0) {
      valid = entry.size() > 4;
    } else if (!entry.empty() && entry.size() < 9) {
      valid = true;
      for (char ch : entry) valid = valid && std::isdigit(static_cast<unsigned char>(ch));
      valid = valid && parse_int<int>(entry).value_or(physical) < physical;
    }
    // The CUDA runtime stops at the first invalid entry and rejects duplicates there too.
    if (!valid || !seen.insert(entry).second) break;
    ++n;
    start = end + 1;
  }
  return n;
}

int cpu_count() {
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

}  // namespace ddprun::launcher
