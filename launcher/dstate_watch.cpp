// dstate_watch.cpp: D-state dwell times of the workers (see dstate_watch.h). Used by the
// Agent.
#include "launcher/dstate_watch.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <fstream>

namespace ddprun::launcher {

std::optional<double> uninterruptible_state_timeout(const std::map<std::string, std::string>& env) {
  const auto it = env.find("TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT");
  if (it == env.end() || it->second.empty()) return std::nullopt;
  try {
    std::size_t used = 0;
    const double v = std::stod(it->second, &used);
    // Python's float(): the whole text (surrounding blanks aside) is the number.
    const bool whole = it->second.find_first_not_of(" \t\n", used) == std::string::npos;
    if (whole && std::isfinite(v) && v > 0) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::optional<char> process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!in || !std::getline(in, text)) return std::nullopt;
  // "pid (comm) S ...": comm may hold spaces and parentheses; the state follows the last ')'.
  const auto close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return std::nullopt;
  return text[close + 2];
}

std::vector<DStateWatch::Stuck> DStateWatch::check(const std::vector<pid_t>& live,
                                                   Clock::time_point now) {
  std::map<pid_t, Clock::time_point> kept;
  std::vector<Stuck> stuck;
  for (pid_t pid : live) {
    if (process_state(pid) != 'D') continue;
    const auto it = since_.find(pid);
    const Clock::time_point first = it == since_.end() ? now : it->second;
    if (it == since_.end()) {
      spdlog::warn(
          "worker pid={} entered uninterruptible sleep (D state); the group ends if it "
          "stays there for {} s (TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT)",
          pid, timeout_s_);
    }
    kept[pid] = first;
    const double secs = std::chrono::duration<double>(now - first).count();
    if (secs >= timeout_s_) stuck.push_back({pid, secs});
  }
  since_ = std::move(kept);
  return stuck;
}

}  // namespace ddprun::launcher
