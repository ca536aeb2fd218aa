// stall_watch.cpp: StallDetector and the /proc readers of the stall watchdog (see
// stall_watch.h). Used by StallWatchdog.
#include "launcher/process/stall_watch.h"

#include <unistd.h>

#include <algorithm>
#include <set>
#include <string>

#include "base/text.h"
#include "launcher/process/descendants.h"

namespace ddprun::launcher {
namespace {

// The next space-separated field of `rest`, removed from it ("" at the end).
std::string_view next_field(std::string_view& rest) {
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  const auto end = std::min(rest.find(' '), rest.size());
  std::string_view field = rest.substr(0, end);
  rest.remove_prefix(end);
  return field;
}

template <typename T>
bool to_number(std::string_view text, T& out) {
  const std::optional<T> v = parse_int<T>(text);
  if (v) out = *v;
  return v.has_value();
}

}  // namespace

std::optional<ProcStat> parse_proc_stat(std::string_view text) {
  const auto close = text.rfind(')');
  if (close == std::string_view::npos || text.find('(') > close) return std::nullopt;
  std::string_view rest = text.substr(close + 1);
  while (!rest.empty() && (rest.back() == '\n' || rest.back() == ' ')) rest.remove_suffix(1);
  // Fields after comm, numbered as in proc(5): 3 state, 4 ppid, 14 utime, 15 stime,
  // 16 cutime, 17 cstime (the last two are signed there).
  ProcStat st;
  std::uint64_t sum = 0;
  std::uint64_t own = 0;
  for (int field = 3; field <= 17; ++field) {
    const std::string_view f = next_field(rest);
    if (f.empty()) return std::nullopt;
    if (field == 3) {
      if (f.size() != 1) return std::nullopt;
      st.state = f[0];
    } else if (field == 4) {
      std::int64_t ppid = 0;
      if (!to_number(f, ppid)) return std::nullopt;
      st.ppid = static_cast<pid_t>(ppid);
    } else if (field == 14 || field == 15) {
      std::uint64_t v = 0;
      if (!to_number(f, v)) return std::nullopt;
      sum += v;
      own += v;
    } else if (field == 16 || field == 17) {
      std::int64_t v = 0;
      if (!to_number(f, v)) return std::nullopt;
      if (v > 0) sum += static_cast<std::uint64_t>(v);
    }
  }
  st.cpu_ticks = sum;
  st.own_ticks = own;
  return st;
}

double process_tree_cpu_seconds(pid_t pid, pid_t except_own) {
  static const long ticks_per_second = std::max(1L, ::sysconf(_SC_CLK_TCK));
  std::uint64_t ticks = 0;
  std::vector<pid_t> todo = {pid};
  std::set<pid_t> seen;
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    if (!seen.insert(p).second) continue;
    const auto st = parse_proc_stat(read_proc_file("/proc/" + std::to_string(p) + "/stat"));
    if (!st) continue;  // gone meanwhile
    ticks += st->cpu_ticks - (p == except_own ? st->own_ticks : 0);
    for (pid_t child : child_pids(p)) todo.push_back(child);
  }
  return static_cast<double>(ticks) / static_cast<double>(ticks_per_second);
}

StallDetector::StallDetector(std::chrono::milliseconds timeout) : timeout_(timeout) {}

std::chrono::milliseconds StallDetector::sample_interval() const {
  return std::clamp(timeout_ / 5, std::chrono::milliseconds(100), std::chrono::milliseconds(1000));
}

void StallDetector::reset(std::size_t count, Clock::time_point now) {
  workers_.assign(count, Worker{});
  reset_at_ = now;
  for (Worker& w : workers_) {
    w.watched = true;
    w.last_progress = now;
  }
}

void StallDetector::observe(std::size_t index, Clock::time_point now, double cpu_seconds,
                            std::uint64_t output_bytes, std::optional<std::uint64_t> moves) {
  if (index >= workers_.size() || !workers_[index].watched) return;
  Worker& w = workers_[index];
  if (w.sampled) {
    const auto unseen = now - w.last_sample - 2 * sample_interval();
    if (unseen > Clock::duration::zero()) w.last_progress = std::min(now, w.last_progress + unseen);
    const double wall = std::chrono::duration<double>(now - w.last_sample).count();
    const bool busy = cpu_seconds - w.cpu > kMinBusyFraction * std::max(wall, 0.0);
    // The first report of a stack counts as a move.
    const bool moved = busy || (moves && moves != w.moves);
    if (moved || output_bytes != w.bytes) w.last_progress = now;
  }
  w.moves = moves;
  w.sampled = true;
  w.last_sample = now;
  w.cpu = cpu_seconds;
  w.bytes = output_bytes;
}

void StallDetector::held_back(std::size_t index, Clock::time_point now) {
  if (index < workers_.size() && workers_[index].watched) workers_[index].last_progress = now;
}

void StallDetector::forget(std::size_t index) {
  if (index < workers_.size()) workers_[index].watched = false;
}

std::vector<std::size_t> StallDetector::stalled(Clock::time_point now) const {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i].watched && now - workers_[i].last_progress >= timeout_) out.push_back(i);
  }
  return out;
}

bool StallDetector::all_stalled(Clock::time_point now) const {
  const auto watched = static_cast<std::size_t>(
      std::count_if(workers_.begin(), workers_.end(), [](const Worker& w) { return w.watched; }));
  return watched > 0 && stalled(now).size() == watched;
}

StallDetector::Clock::time_point StallDetector::last_progress() const {
  Clock::time_point latest = reset_at_;
  for (const Worker& w : workers_) {
    if (w.watched) latest = std::max(latest, w.last_progress);
  }
  return latest;
}

std::chrono::milliseconds StallDetector::idle_for(std::size_t index, Clock::time_point now) const {
  if (index >= workers_.size()) return std::chrono::milliseconds(0);
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - workers_[index].last_progress);
}

}  // namespace ddprun::launcher
