// run_dirs.h: RunDirs, the Agent's files on disk: the run log directory
// <log-dir>/<run_id>_XXXXXX, each attempt's attempt_<N>/<local_rank>/ (logs, error.json),
// and the default TMPDIR/torchelastic_XXXXXX made without --log-dir, removed at the end.
// Used by the Agent. Thread-safety: one owner (the agent's thread).
#pragma once

#include <string>

namespace ddprun::launcher {

class RunDirs {
 public:
  // Creates the run log directory under `log_dir` ("" or "/dev/null": under a fresh
  // `tmp_base`/torchelastic_XXXXXX). '/' in `run_id` becomes '_'. Throws on I/O errors.
  RunDirs(const std::string& log_dir, std::string run_id, const std::string& tmp_base);

  const std::string& run_dir() const { return run_dir_; }
  // --log-dir /dev/null: worker logs go nowhere; the run dir holds only error.json.
  bool files_disabled() const { return files_disabled_; }

  std::string attempt_dir(int attempt) const;
  std::string rank_dir(int attempt, int local_rank) const;
  std::string error_file(int attempt, int local_rank) const;
  // Removes attempt_<N> and creates it again with one folder per local rank.
  void prepare_attempt(int attempt, int local_ranks) const;

  // A worker stream goes to a log file in the default directory (-r/-t): keep it.
  void keep_default_dir();
  // Removes the default directory (after the failure report, which reads the error
  // files), unless --log-dir was given or keep_default_dir() was called. Logs, never throws.
  void remove_default_dir() const;

 private:
  std::string run_dir_;
  std::string default_dir_;  // the torchelastic_XXXXXX dir made here (no --log-dir)
  bool files_disabled_ = false;
  bool keep_default_ = false;
};

}  // namespace ddprun::launcher
