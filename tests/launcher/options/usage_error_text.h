// usage_error_text.h: the message of the UsageError a call throws, for the launcher's
// table tests of bad input. Used by hostfile_test.cpp and remote_launch_test.cpp.
#pragma once

#include <functional>
#include <string>

#include "launcher/options/config.h"

namespace ddprun::launcher::test {

// The UsageError's message, or "(no error)" when `f` returns normally.
inline std::string usage_error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace ddprun::launcher::test
