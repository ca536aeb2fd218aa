// accelerators.h: AMD (ROCm) and Intel (xpu) GPUs counted from sysfs, without linking
// their runtimes, for --nproc-per-node gpu|xpu|auto (nproc.h counts NVIDIA's), narrowed by
// the visibility variables as those runtimes narrow them. Used by cli.cpp
// (current_host_facts); tested on sysfs fixtures (tests/launcher/fixtures/accelerators).
// Thread-safety: pure functions over the file system.
#pragma once

#include <map>
#include <string>

namespace ddprun::launcher {

// AMD GPUs the amdgpu kernel driver exposes to ROCm (Documentation/gpu/amdgpu, the KFD
// topology): the nodes under <sys>/class/kfd/kfd/topology/nodes/ whose gpu_id is not 0
// (CPU nodes have gpu_id 0), else, without a gpu_id file, whose properties hold
// "simd_count N" with N > 0. One per GCD: an MI250X card counts 2, as ROCm does.
int count_amd_gpus(const std::string& sys_root = "/sys");

// Intel GPUs: <sys>/class/drm/card<N> (not connectors such as card0-DP-1) whose
// device/driver links to the i915 or xe driver. One per card (Level Zero's COMPOSITE
// hierarchy; under FLAT, the default on multi-tile Data Center GPU Max, each tile is a
// device of its own and the count is lower than torch.xpu.device_count()).
int count_intel_gpus(const std::string& sys_root = "/sys");

// `physical` AMD GPUs narrowed as ROCm does: ROCR_VISIBLE_DEVICES first, then
// HIP_VISIBLE_DEVICES (else CUDA_VISIBLE_DEVICES, which HIP also reads) on what is left;
// each list read as visible_gpu_count (nproc.h) reads CUDA_VISIBLE_DEVICES.
int visible_amd_count(int physical, const std::map<std::string, std::string>& env);

// `physical` Intel GPUs narrowed by ZE_AFFINITY_MASK ("0,1", or "0.1" for one tile of
// card 0): the distinct cards named that exist; unset: all.
int visible_intel_count(int physical, const std::map<std::string, std::string>& env);

}  // namespace ddprun::launcher
