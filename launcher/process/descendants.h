// descendants.h: finding a job's processes that left their worker's process group (a
// daemon that called setsid() or setpgid() and forked again): the child subreaper and the
// job token. Used by WorkerGroup (adopted processes), ProcessSupervisor (subreaper) and
// the orphan guard (token scan). Thread-safety: free functions without shared state.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::launcher {

// Two handles on such processes: the agent is a child subreaper, so an orphan re-parents
// to the agent instead of init (its children that are not workers: "adopted"); and every
// worker's environment carries the job token, which descendants inherit, so that the
// orphan guard can still find them after the agent itself is gone.

// The environment variable that marks a job's processes: "DDPRUN_JOB_TOKEN=<token>".
inline constexpr std::string_view kJobTokenVar = "DDPRUN_JOB_TOKEN";

// PR_SET_CHILD_SUBREAPER on this process. Returns false (errno set) if refused.
bool become_child_subreaper();

// The children of `parent` (0: this process), zombies included: /proc/<pid>/task/*/children,
// or a scan of /proc/*/stat for the parent pid where that file is missing
// (CONFIG_PROC_CHILDREN). Empty when `parent` is gone.
std::vector<pid_t> child_pids(pid_t parent = 0);

// The whole of a small /proc file ("" if it cannot be read).
std::string read_proc_file(const std::string& path);

// A fresh random token (32 hex digits). Throws std::system_error.
std::string make_job_token();

// Sets `name`=`value` in `env` ("NAME=value" entries), replacing an entry of that name.
void set_env_entry(std::vector<std::string>& env, std::string_view name, std::string_view value);
// The value of `name` in `env` (the first entry of that name), nullopt when it has none.
std::optional<std::string_view> find_env_entry(const std::vector<std::string>& env,
                                               std::string_view name);

// Live (not zombie) processes, other than the caller, whose environment holds the entry
// DDPRUN_JOB_TOKEN=<token> (those of other users cannot be read and are skipped).
std::vector<pid_t> processes_with_token(const std::string& token);

}  // namespace ddprun::launcher
