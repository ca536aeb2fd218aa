// worker_python.cpp: finding the Python environment ddprun was installed into (see
// worker_python.h).
#include "launcher/worker_python.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <system_error>

#include "base/text.h"

namespace ddprun::launcher {
namespace {

namespace fs = std::filesystem;

bool executable_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

// `dir`'s python3 or python when `dir` is the bin/ of a venv or conda environment.
std::string environment_python(const fs::path& dir) {
  if (dir.empty()) return "";
  std::error_code ec;
  const fs::path root = dir.parent_path();
  if (!fs::exists(root / "pyvenv.cfg", ec) && !fs::is_directory(root / "conda-meta", ec)) {
    return "";
  }
  for (const char* name : {"python3", "python"}) {
    if (executable_file(dir / name)) return (dir / name).string();
  }
  // The environment's python is a broken link (its base interpreter was removed or
  // upgraded): name it anyway, so that the workers fail on it, loudly, rather than run
  // PATH's python, which lacks the environment's packages.
  for (const char* name : {"python3", "python"}) {
    if (fs::is_symlink(dir / name, ec)) return (dir / name).string();
  }
  return "";
}

// The directory the shell found `argv0` in, unresolved.
fs::path started_from(const std::string& argv0, const std::string& path_env) {
  if (argv0.empty()) return {};
  std::error_code ec;
  if (argv0.find('/') != std::string::npos) {
    return fs::absolute(fs::path(argv0), ec).lexically_normal().parent_path();
  }
  for (const auto& entry : split(path_env, ':')) {
    // An empty PATH entry is the working directory, as for execvp.
    const fs::path dir = entry.empty() ? fs::current_path(ec) : fs::path(entry);
    if (executable_file(dir / argv0)) {
      return fs::absolute(dir, ec).lexically_normal();
    }
  }
  return {};
}

}  // namespace

std::string python_beside_launcher(const std::string& argv0, const std::string& path_env,
                                   const std::string& self_exe) {
  std::string found = environment_python(started_from(argv0, path_env));
  if (found.empty() && !self_exe.empty())
    found = environment_python(fs::path(self_exe).parent_path());
  return found;
}

std::string describe_worker_python(const std::string& python,
                                   const std::map<std::string, std::string>& env) {
  std::string origin;
  std::string shown = python;
  if (const auto it = env.find("PYTHON_EXEC"); it != env.end() && !it->second.empty()) {
    origin = "PYTHON_EXEC";
  } else if (python.find('/') != std::string::npos) {  // python_beside_launcher's
    origin = "the Python environment ddprun is installed in";
  } else {
    origin = python + " from PATH";
    const auto path = env.find("PATH");
    std::error_code ec;
    for (const auto& entry : split(path == env.end() ? "" : path->second, ':')) {
      const fs::path dir = entry.empty() ? fs::current_path(ec) : fs::path(entry);
      if (executable_file(dir / python)) {
        shown = (dir / python).string();
        break;
      }
    }
  }
  std::error_code ec;
  if (fs::is_symlink(shown, ec) && !fs::exists(shown, ec)) {
    origin += ", a broken link to " + fs::read_symlink(shown, ec).string();
  }
  return shown + " (" + origin + ")";
}

std::string python_beside_this_launcher(const char* argv0) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const char* path = std::getenv("PATH");
  return python_beside_launcher(argv0 ? argv0 : "", path ? path : "", ec ? "" : self.string());
}

}  // namespace ddprun::launcher
