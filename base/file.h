// file.h: ddprun's one whole-file read, for the small files it reads at once (hostfiles,
// sysfs and procfs values, error files, completion scripts). Header-only, like all of
// base/. Thread-safety: no shared state.
#pragma once

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace ddprun {

// The whole content of `path`, byte for byte; nullopt when it cannot be opened.
inline std::optional<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return std::move(text).str();
}

}  // namespace ddprun
