// usage_error.h: UsageError, bad command-line or hostfile input. Thrown by the option
// readers (config, cli, slurm_env) and the ssh launcher's parsers; main prints it as
// "ddprun: error: MESSAGE" and exits 2. Thread-safety: an exception type.
#pragma once

#include <stdexcept>

namespace ddprun::launcher {

// Bad command-line input. The message is one line naming the flag or file, without the
// "ddprun: error: " prefix (main adds it and exits 2).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace ddprun::launcher
