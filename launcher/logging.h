// logging.h: the agent's own log (spdlog's default logger): stderr, "[ddprun] <level>: "
// prefix, level from env LOGLEVEL as torchrun reads it (DEBUG, INFO, WARNING, ERROR,
// CRITICAL; default WARNING, so a normal run prints only what matters).
// Used by main.cpp. Thread-safety: call once, before other threads log.
#pragma once

#include <spdlog/common.h>

#include <map>
#include <string>

namespace ddprun::launcher {

// LOGLEVEL text -> spdlog level (case-insensitive; unknown or empty -> warn).
spdlog::level::level_enum log_level_from_env(const std::string& text);

// Installs the default logger as described above; `env` supplies LOGLEVEL.
void setup_agent_logging(const std::map<std::string, std::string>& env);

}  // namespace ddprun::launcher
