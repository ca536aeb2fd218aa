// supervision.cpp: the shared start-up of main.cpp and the ssh launch (see
// supervision.h): signals, orphan guard, ProcessSupervisor; usage errors.
#include "launcher/supervision.h"

#include <cstdint>
#include <cstdio>
#include <exception>

#include "launcher/options/cli.h"
#include "launcher/process/orphan_guard.h"
#include "launcher/process/signals.h"

namespace ddprun::launcher {

int usage_error_exit(const std::string& message) {
  std::fprintf(stderr, "ddprun: error: %s\n%s\n", message.c_str(), usage_hint().c_str());
  return 2;
}

int run_supervised(const LaunchConfig& config, Watchdogs watchdogs,
                   const std::function<int(ProcessSupervisor&)>& body) {
  try {
    // Before any thread starts: every later thread inherits the mask (signals.h).
    prepare_agent_signals(config.signals_to_handle);
    SupervisorOptions options;
    options.handled_signals = config.signals_to_handle;
    options.orphan_guard = start_orphan_guard();
    if (watchdogs == Watchdogs::kFromConfig) {
      options.stall_timeout =
          std::chrono::milliseconds(static_cast<std::int64_t>(config.stall_timeout_s * 1000));
      options.file_timer_path = config.file_timer_path;
    }
    ProcessSupervisor supervisor(options);
    return body(supervisor);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddprun: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace ddprun::launcher
