// logging.cpp: the agent's log setup (see logging.h): spdlog's level and pattern from
// LOGLEVEL. Used by main.cpp.
#include "launcher/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>

namespace ddprun::launcher {

spdlog::level::level_enum log_level_from_env(const std::string& text) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (t == "DEBUG" || t == "NOTSET") return spdlog::level::debug;
  if (t == "INFO") return spdlog::level::info;
  if (t == "ERROR") return spdlog::level::err;
  if (t == "CRITICAL" || t == "FATAL") return spdlog::level::critical;
  return spdlog::level::warn;
}

void setup_agent_logging(const std::map<std::string, std::string>& env) {
  auto logger = spdlog::stderr_color_mt("ddprun");
  logger->set_pattern("[ddprun] %^%l%$: %v");
  const auto it = env.find("LOGLEVEL");
  logger->set_level(log_level_from_env(it == env.end() ? "" : it->second));
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
}

}  // namespace ddprun::launcher
