// nproc.h: how many CPUs and NVIDIA GPUs this host offers, for --nproc-per-node
// cpu|gpu|auto. GPUs are counted without linking CUDA, from the driver's /proc entries
// (or the /dev/nvidiaN device nodes), then narrowed by CUDA_VISIBLE_DEVICES as the CUDA
// runtime would. Used by cli.cpp. Thread-safety: pure functions over the file system.
#pragma once

#include <optional>
#include <string>

namespace ddprun::launcher {

// Number of NVIDIA GPUs the driver exposes under `root` (normally "/"): entries of
// <root>/proc/driver/nvidia/gpus/, else <root>/dev/nvidia<digits> device nodes.
int count_physical_gpus(const std::string& root = "/");

// Applies CUDA_VISIBLE_DEVICES (nullopt: unset) to `physical` devices the way the CUDA
// runtime does: entries are read left to right and the list ends at the first invalid
// one (an index out of range, a negative number, garbage); "GPU-"/"MIG-" UUIDs count as
// valid. An empty value hides every device.
int visible_gpu_count(int physical, const std::optional<std::string>& cuda_visible_devices);

// Online CPUs (sysconf), at least 1.
int cpu_count();

}  // namespace ddprun::launcher
