// run_dirs.h: RunDirs, the Agent's files on disk: the run log directory
// <log-dir>/<run_id>_XXXXXX, each attempt's attempt_<N>/<local_rank>/ (logs, error.json)
// and attempt_<N>/flight_recorder/ (the dumps at a stall),
// and the default TMPDIR/torchelastic_XXXXXX made without --log-dir, removed at the end
// unless it holds log files or a failed worker's folders.
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
  // attempt_<N>/flight_recorder: the flight recorder's dumps at a stall (fr_dump.h), made
  // by the stall watchdog only then.
  std::string flight_recorder_dir(int attempt) const;
  // Removes attempt_<N> and creates it again with one folder per local rank.
  void prepare_attempt(int attempt, int local_ranks) const;

  // Why the default directory stays at the end, as torchrun's always does: a worker
  // stream went to a log file there (-r/-t: the user asked for the files), or a worker
  // failed (its attempt_<N>/<local_rank>/ folders, error.json, which the report names).
  enum class Keep { kLogs, kFailure };
  // Keeps the default directory (not with --log-dir /dev/null: no files were asked for).
  void keep_default_dir(Keep why);
  // Removes the default directory (after the failure report, which reads the error
  // files), unless --log-dir was given or keep_default_dir() was called: a run whose
  // workers all succeeded and wrote no log file leaves nothing in TMPDIR. Logs where a
  // kept directory is (a warning for log files), never throws.
  void remove_default_dir() const;

 private:
  std::string run_dir_;
  std::string default_dir_;  // the torchelastic_XXXXXX dir made here (no --log-dir)
  bool files_disabled_ = false;
  bool keep_logs_ = false;
  bool keep_failure_ = false;
};

}  // namespace ddprun::launcher
