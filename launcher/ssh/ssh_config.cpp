// ssh_config.cpp: see ssh_config.h.
#include "launcher/ssh/ssh_config.h"

#include <chrono>

#include "launcher/process/run_capture.h"

namespace ddprun::launcher {

std::optional<std::string> parse_ssh_g_hostname(std::string_view output) {
  while (!output.empty()) {
    const auto nl = output.find('\n');
    std::string_view line = output.substr(0, nl);
    output = nl == std::string_view::npos ? std::string_view() : output.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    constexpr std::string_view kKey = "hostname ";
    if (line.substr(0, kKey.size()) == kKey && line.size() > kKey.size()) {
      return std::string(line.substr(kKey.size()));
    }
  }
  return std::nullopt;
}

std::optional<std::string> ssh_config_hostname(const std::vector<std::string>& ssh_command,
                                               const std::string& host, int timeout_ms) {
  if (ssh_command.empty()) return std::nullopt;
  std::vector<std::string> words = ssh_command;
  words.emplace_back("-G");
  words.push_back(host);
  const auto text = run_capture(words, std::nullopt, std::chrono::milliseconds(timeout_ms));
  if (!text) return std::nullopt;
  return parse_ssh_g_hostname(*text);
}

}  // namespace ddprun::launcher
