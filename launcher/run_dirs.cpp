// run_dirs.cpp: the Agent's run and attempt directories (see run_dirs.h): mkdtemp, the
// attempt folders, the default directory's removal. Used by the Agent.
#include "launcher/run_dirs.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "base/sys_error.h"
#include "launcher/process/fr_dump.h"

namespace ddprun::launcher {
namespace {

namespace fs = std::filesystem;

std::string make_temp_dir(const std::string& pattern) {
  std::string buf = pattern + "XXXXXX";
  if (::mkdtemp(buf.data()) == nullptr) throw_errno("mkdtemp " + pattern);
  return buf;
}

}  // namespace

RunDirs::RunDirs(const std::string& log_dir, std::string run_id, const std::string& tmp_base) {
  std::string base = log_dir;
  files_disabled_ = base == "/dev/null";
  if (base.empty() || files_disabled_) {
    base = make_temp_dir(tmp_base + "/torchelastic_");
    default_dir_ = base;
  } else {
    // Named after the option (torchrun: "log_dir: X is a file"), not a bare errno text.
    std::error_code ec;
    if (fs::exists(base, ec) && !fs::is_directory(base, ec)) {
      throw std::runtime_error(fmt::format("--log-dir {}: is a file, not a directory", base));
    }
    fs::create_directories(base, ec);
    if (ec) throw std::runtime_error(fmt::format("--log-dir {}: {}", base, ec.message()));
  }
  std::replace(run_id.begin(), run_id.end(), '/', '_');  // a user's --rdzv-id may hold '/'
  run_dir_ = make_temp_dir((fs::path(base) / (run_id + "_")).string());
  spdlog::info("log directory set to: {}", run_dir_);
}

std::string RunDirs::attempt_dir(int attempt) const {
  return (fs::path(run_dir_) / fmt::format("attempt_{}", attempt)).string();
}

std::string RunDirs::rank_dir(int attempt, int local_rank) const {
  return (fs::path(attempt_dir(attempt)) / std::to_string(local_rank)).string();
}

std::string RunDirs::error_file(int attempt, int local_rank) const {
  return (fs::path(rank_dir(attempt, local_rank)) / "error.json").string();
}

std::string RunDirs::flight_recorder_dir(int attempt) const {
  return (fs::path(attempt_dir(attempt)) / kFrDumpFolder).string();
}

void RunDirs::prepare_attempt(int attempt, int local_ranks) const {
  fs::remove_all(attempt_dir(attempt));
  for (int lr = 0; lr < local_ranks; ++lr) fs::create_directories(rank_dir(attempt, lr));
}

void RunDirs::keep_default_dir(Keep why) {
  if (files_disabled_) return;
  (why == Keep::kLogs ? keep_logs_ : keep_failure_) = true;
}

void RunDirs::remove_default_dir() const {
  if (default_dir_.empty()) return;
  if (keep_logs_) {
    spdlog::warn("worker logs kept in {} (-r/-t without --log-dir)", run_dir_);
    return;
  }
  if (keep_failure_) {
    spdlog::info(
        "log directory kept: {} (a worker failed: attempt_<N>/<local_rank>/ holds its "
        "error file, if it wrote one)",
        run_dir_);
    return;
  }
  std::error_code ec;
  fs::remove_all(default_dir_, ec);
  if (ec) spdlog::warn("cannot remove log directory {}: {}", default_dir_, ec.message());
}

}  // namespace ddprun::launcher
