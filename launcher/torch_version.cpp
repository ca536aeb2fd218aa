// torch_version.cpp: finding the workers' torch version on disk (see torch_version.h).
#include "launcher/torch_version.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "base/text.h"
#include "launcher/process/run_capture.h"

namespace ddprun::launcher {
namespace {

namespace fs = std::filesystem;

std::optional<TorchVersion> torch_in(const fs::path& dir) {
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("torch-", 0) != 0) continue;
    for (const char* suffix : {".dist-info", ".egg-info"}) {
      const std::string s(suffix);
      if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
        names.push_back(name.substr(6, name.size() - 6 - s.size()));
      }
    }
  }
  std::sort(names.begin(), names.end());  // deterministic when several are left over
  for (const auto& n : names) {
    if (auto v = parse_torch_version(n)) return v;
  }
  return std::nullopt;
}

// <root>/lib/python3*/{site,dist}-packages, <root>/lib/python3/dist-packages,
// <root>/local/lib/python3*/dist-packages.
std::vector<fs::path> site_dirs(const fs::path& root) {
  std::vector<fs::path> out;
  for (const fs::path& lib : {root / "lib", root / "local" / "lib"}) {
    std::error_code ec;
    std::vector<fs::path> pys;
    for (fs::directory_iterator it(lib, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().filename().string().rfind("python3", 0) == 0) pys.push_back(it->path());
    }
    std::sort(pys.begin(), pys.end());
    for (const auto& py : pys) {
      out.push_back(py / "site-packages");
      out.push_back(py / "dist-packages");
    }
  }
  return out;
}

// A venv made without --system-site-packages (its pyvenv.cfg says
// include-system-site-packages = false, venv's default) sees neither its base
// interpreter's packages nor the user's ~/.local.
bool isolated_venv(const fs::path& root) {
  std::ifstream cfg(root / "pyvenv.cfg");
  if (!cfg) return false;
  for (std::string line; std::getline(cfg, line);) {
    const auto eq = line.find('=');
    if (eq == std::string::npos || trim(line.substr(0, eq)) != "include-system-site-packages") {
      continue;
    }
    std::string value(trim(line.substr(eq + 1)));
    std::transform(value.begin(), value.end(), value.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return value != "true";
  }
  return true;
}

std::optional<TorchVersion> first_torch_in(const std::vector<fs::path>& dirs) {
  for (const auto& d : dirs) {
    if (auto v = torch_in(d)) return v;
  }
  return std::nullopt;
}

fs::path find_in_path(const std::string& name, const std::string& path_env) {
  if (name.find('/') != std::string::npos) return name;
  for (const auto& dir : split(path_env, ':')) {
    fs::path p = fs::path(dir.empty() ? "." : dir) / name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return {};
}

}  // namespace

std::optional<TorchVersion> parse_torch_version(const std::string& text) {
  const auto dot = text.find('.');
  if (dot == std::string::npos) return std::nullopt;
  auto end = text.find_first_not_of("0123456789", dot + 1);
  if (end == std::string::npos) end = text.size();
  const auto major = parse_int<int>(std::string_view(text).substr(0, dot));
  const auto minor = parse_int<int>(std::string_view(text).substr(dot + 1, end - dot - 1));
  if (!major || !minor) return std::nullopt;
  return TorchVersion{*major, *minor};
}

std::optional<TorchVersion> find_torch_version(const std::string& python,
                                               const std::map<std::string, std::string>& env) {
  const auto get = [&](const char* k) {
    const auto it = env.find(k);
    return it == env.end() ? std::string() : it->second;
  };
  std::vector<fs::path> dirs;
  for (const auto& p : split(get("PYTHONPATH"), ':')) {
    if (!p.empty()) dirs.emplace_back(p);
  }
  std::error_code ec;
  const fs::path exe = find_in_path(python, get("PATH"));
  if (!exe.empty()) {
    const fs::path root = fs::absolute(exe, ec).lexically_normal().parent_path().parent_path();
    for (auto& d : site_dirs(root)) dirs.push_back(std::move(d));
    if (isolated_venv(root)) return first_torch_in(dirs);
    if (const std::string home = get("HOME"); !home.empty()) {
      for (auto& d : site_dirs(fs::path(home) / ".local")) dirs.push_back(std::move(d));
    }
    const fs::path real = fs::canonical(exe, ec);
    if (!ec) {
      for (auto& d : site_dirs(real.parent_path().parent_path())) dirs.push_back(std::move(d));
    }
  }
  return first_torch_in(dirs);
}

std::optional<TorchVersion> ask_torch_version(const std::string& python,
                                              const std::map<std::string, std::string>& env,
                                              std::chrono::milliseconds timeout) {
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  // The name is looked up in this process's PATH; the workers' PATH is env's, and for a
  // bare name the two are the same environment in practice (ddprun's own).
  const auto text =
      run_capture({python, "-c", "import importlib.metadata as m; print(m.version('torch'))"},
                  env_strings, timeout, 256);
  if (!text) return std::nullopt;
  return parse_torch_version(std::string(trim(*text)));
}

std::vector<std::string> nccl_async_error_handling_names(const std::optional<TorchVersion>& v) {
  if (!v) return {"NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING"};
  if (*v >= TorchVersion{2, 2}) return {"TORCH_NCCL_ASYNC_ERROR_HANDLING"};
  return {"NCCL_ASYNC_ERROR_HANDLING"};
}

}  // namespace ddprun::launcher
