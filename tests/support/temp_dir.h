// temp_dir.h: a uniquely named directory under the system temp dir (mkdtemp), removed
// with its contents on destruction, and small file helpers. The one TempDir of the C++
// test suites. Thread-safety: one per test; the helpers touch only the named files.
#pragma once

#include <filesystem>
#include <string>

namespace ddprun::test {

class TempDir {
 public:
  TempDir();  // throws std::system_error when the directory cannot be made
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path path;
  // The path as text, for `dir.str() + "/name"` and shell commands.
  std::string str() const { return path.string(); }
  // Writes `text` to <path>/<name> (creating parent directories); returns the full path.
  std::string write(const std::string& name, const std::string& text) const;
};

// The whole content of `file` ("" when it cannot be read).
std::string slurp(const std::filesystem::path& file);

}  // namespace ddprun::test
