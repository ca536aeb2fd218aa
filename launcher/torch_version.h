// torch_version.h: the PyTorch version the workers' interpreter will import, found without
// starting it (a file-system look at its environment's site-packages for torch's
// dist-info/egg-info), else by asking it (no torch import), and what that means for the variables
// ddprun sets: PyTorch 2.2+ reads TORCH_NCCL_ASYNC_ERROR_HANDLING and warns when the old
// NCCL_ASYNC_ERROR_HANDLING is set; 1.13-2.1 read only the old name. Used by main.cpp and
// worker_env.cpp. Thread-safety: pure functions over the file system.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddprun::launcher {

using TorchVersion = std::pair<int, int>;  // major, minor

// The version of torch that `python` (a path, or a name looked up in env's PATH) would
// import, from the first torch-<version>.{dist,egg}-info found in: env's PYTHONPATH
// entries; the site-packages/dist-packages of the interpreter's environment (the parent
// of its directory, unresolved: a venv's or conda env's root, or /usr); ~/.local (user
// site); the same of the interpreter with symlinks resolved (the base of a venv made with
// --system-site-packages). nullopt when none is found (a wrapper script, torch from a
// .pth or a zip): callers then assume either version may run.
std::optional<TorchVersion> find_torch_version(const std::string& python,
                                               const std::map<std::string, std::string>& env);

// For an interpreter whose packages find_torch_version cannot see (a wrapper script such
// as scripts/python-torch26, a pyenv shim): asks it, running `python -c` with
// importlib.metadata (which reads the metadata and does not import torch) in `env`, stdin
// and stderr on /dev/null. nullopt when it fails, prints no version, or runs past
// `timeout` (then it is killed). Call before any thread starts (it forks).
std::optional<TorchVersion> ask_torch_version(const std::string& python,
                                              const std::map<std::string, std::string>& env,
                                              std::chrono::milliseconds timeout);

// "1.13.0a0+gitunknown" -> {1, 13}; nullopt when it does not start with N.N.
std::optional<TorchVersion> parse_torch_version(const std::string& text);

// The async-error-handling variables to set (each to "1" unless already set), as that
// version's torchrun does: 2.2+ TORCH_NCCL_ASYNC_ERROR_HANDLING; older
// NCCL_ASYNC_ERROR_HANDLING; unknown: both (1.13's error handling outweighs 2.x's
// one-time deprecation warning).
std::vector<std::string> nccl_async_error_handling_names(const std::optional<TorchVersion>& v);

}  // namespace ddprun::launcher
