// sys_error.h: ddprun's one errno helper: the text for an errno value and the exception
// for a failed system call. Header-only (library ddprun_base, below every other target).
// Used by the process library, the launcher's run_dirs, the store client, ddprun-loadgen
// and the tests' raw client. Thread-safety: pure functions (no strerror static buffer).
#pragma once

#include <cerrno>
#include <string>
#include <system_error>

namespace ddprun {

// "Connection refused" for ECONNREFUSED: what strerror says, without its shared buffer.
inline std::string errno_text(int err) { return std::generic_category().message(err); }

// Throws std::system_error(err) whose what() reads "<what>: <errno_text(err)>".
[[noreturn]] inline void throw_errno(const std::string& what, int err = errno) {
  throw std::system_error(err, std::generic_category(), what);
}

}  // namespace ddprun
