// file_timer.cpp: see file_timer.h.
#include "launcher/process/file_timer.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <limits>
#include <nlohmann/json.hpp>

#include "launcher/process/signals.h"

namespace ddprun::launcher {
namespace {

double epoch_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A line as shown in a warning: at most 200 bytes.
std::string shown(std::string_view line) {
  constexpr std::size_t kShown = 200;
  if (line.size() <= kShown) return std::string(line);
  return std::string(line.substr(0, kShown)) + "...";
}

}  // namespace

std::optional<TimerRequest> parse_timer_request(std::string_view line, std::string* why) {
  const auto fail = [&](std::string text) {
    if (why) *why = std::move(text);
    return std::nullopt;
  };
  const nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr, false);
  if (j.is_discarded()) return fail("not JSON");
  if (!j.is_object()) return fail("not a JSON object");
  const auto field = [&](const char* name) -> const nlohmann::json* {
    const auto it = j.find(name);
    return it == j.end() ? nullptr : &*it;
  };
  TimerRequest r;
  const auto* pid = field("pid");
  if (!pid || !pid->is_number_integer()) return fail("'pid' is missing or not an integer");
  const auto pid_value = pid->get<std::int64_t>();
  if (pid_value <= 0 || pid_value > std::numeric_limits<pid_t>::max()) {
    return fail("'pid' is out of range");
  }
  r.pid = static_cast<pid_t>(pid_value);
  const auto* scope = field("scope_id");
  if (!scope || !scope->is_string()) return fail("'scope_id' is missing or not a string");
  r.scope_id = scope->get<std::string>();
  const auto* exp = field("expiration_time");
  if (!exp || !exp->is_number()) return fail("'expiration_time' is missing or not a number");
  r.expiration_time = exp->get<double>();
  if (!std::isfinite(r.expiration_time)) return fail("'expiration_time' is not finite");
  const auto* sig = field("signal");
  if (!sig || !sig->is_number_integer()) return fail("'signal' is missing or not an integer");
  const auto sig_value = sig->get<std::int64_t>();
  // Like the client's "a negative or zero signal will not kill": anything out of the
  // signal range is treated as none.
  r.signal = sig_value > 0 && sig_value < NSIG ? static_cast<int>(sig_value) : 0;
  return r;
}

void TimerTable::apply(const TimerRequest& request) {
  const auto key = std::make_pair(request.pid, request.scope_id);
  if (request.release()) {
    timers_.erase(key);
  } else {
    timers_[key] = request;
  }
}

std::vector<TimerTable::Expired> TimerTable::take_expired(double now) {
  std::map<pid_t, std::vector<const TimerRequest*>> by_pid;
  for (const auto& [key, t] : timers_) {
    if (t.expiration_time <= now) by_pid[key.first].push_back(&t);
  }
  std::vector<Expired> out;
  for (auto& [pid, list] : by_pid) {
    std::stable_sort(list.begin(), list.end(), [](const TimerRequest* a, const TimerRequest* b) {
      return a->expiration_time < b->expiration_time;
    });
    Expired e;
    e.pid = pid;
    e.scope_id = list.front()->scope_id;
    for (const TimerRequest* t : list) {
      e.scopes.push_back(t->scope_id);
      if (e.signal == 0 && t->signal > 0) {
        e.signal = t->signal;
        e.scope_id = t->scope_id;
      }
    }
    out.push_back(std::move(e));
  }
  for (const Expired& e : out) drop(e.pid);
  return out;
}

void TimerTable::drop(pid_t pid) {
  for (auto it = timers_.begin(); it != timers_.end();) {
    it = it->first.first == pid ? timers_.erase(it) : std::next(it);
  }
}

std::optional<double> TimerTable::next_expiration() const {
  std::optional<double> best;
  for (const auto& [key, t] : timers_) {
    if (!best || t.expiration_time < *best) best = t.expiration_time;
  }
  return best;
}

std::vector<pid_t> TimerTable::pids() const {
  std::vector<pid_t> out;
  for (const auto& [key, t] : timers_) {
    if (out.empty() || out.back() != key.first) out.push_back(key.first);
  }
  return out;
}

FileTimerServer::FileTimerServer(EventLoop& loop, std::string path, IsJobProcess is_job_process,
                                 OnKill on_kill)
    : loop_(loop),
      path_(std::move(path)),
      is_job_process_(std::move(is_job_process)),
      on_kill_(std::move(on_kill)) {
  // torch's server removes a stale file of that name too.
  if (::unlink(path_.c_str()) != 0 && errno != ENOENT) throw_errno("file timer: unlink " + path_);
  if (::mkfifo(path_.c_str(), 0600) != 0) throw_errno("file timer: mkfifo " + path_);
  read_fd_.reset(::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!read_fd_) throw_errno("file timer: open " + path_);
  // A writer of our own: without one, every client's close would leave the pipe at EOF
  // (readable forever) until the next client opens it.
  keep_open_fd_.reset(::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
  if (!keep_open_fd_) throw_errno("file timer: open " + path_);
  id_ = loop_.add(read_fd_.get(), EPOLLIN, [this](std::uint32_t) { on_readable(); });
}

FileTimerServer::~FileTimerServer() {
  loop_.cancel_timer(timer_);
  loop_.remove(id_);
  ::unlink(path_.c_str());
}

void FileTimerServer::on_readable() {
  char buf[8192];
  while (true) {
    const ssize_t n = ::read(read_fd_.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // EAGAIN (never EOF: we hold a write end)
    std::string_view chunk(buf, static_cast<std::size_t>(n));
    while (!chunk.empty()) {
      const auto nl = chunk.find('\n');
      const std::string_view piece = chunk.substr(0, nl);
      if (!skipping_) partial_.append(piece);
      if (!skipping_ && partial_.size() > kMaxLine) {
        spdlog::warn("file timer: ignoring a request longer than {} bytes: {}", kMaxLine,
                     shown(partial_));
        partial_.clear();
        skipping_ = true;
      }
      if (nl == std::string_view::npos) break;
      chunk.remove_prefix(nl + 1);
      if (!skipping_) on_line(partial_);
      partial_.clear();
      skipping_ = false;
    }
  }
}

void FileTimerServer::on_line(std::string_view line) {
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) return;
  std::string why;
  const auto request = parse_timer_request(line, &why);
  if (!request) {
    spdlog::warn("file timer: ignoring a malformed request ({}): {}", why, shown(line));
    return;
  }
  spdlog::debug("file timer: pid {} scope '{}' {}", request->pid, request->scope_id,
                request->release() ? std::string("released")
                                   : fmt::format("expires at {:.3f}", request->expiration_time));
  table_.apply(*request);
  rearm();
}

void FileTimerServer::tick() {
  if (table_.size() == 0) return;
  for (const TimerTable::Expired& e : table_.take_expired(epoch_now())) {
    if (e.signal == 0) {
      spdlog::info("file timer: scope '{}' of pid {} expired; no signal was requested", e.scope_id,
                   e.pid);
      continue;
    }
    if (!is_job_process_(e.pid)) {
      spdlog::warn(
          "file timer: scope '{}' expired for pid {}, which is not a process of this job; "
          "not signalling it",
          e.scope_id, e.pid);
      continue;
    }
    spdlog::warn("file timer: scope '{}' of pid {} expired; sending it {}", e.scope_id, e.pid,
                 signal_name(e.signal));
    if (::kill(e.pid, e.signal) != 0 && errno != ESRCH) {
      spdlog::warn("file timer: kill({}, {}): {}", e.pid, signal_name(e.signal), errno_text(errno));
      continue;
    }
    on_kill_(e.pid, e.signal, e.scope_id);
  }
  drop_gone();
}

void FileTimerServer::drop_gone() {
  // Timers of processes that are gone can never be released (torch 2.6 drops them).
  for (pid_t pid : table_.pids()) {
    if (::kill(pid, 0) != 0 && errno == ESRCH) table_.drop(pid);
  }
  rearm();
}

void FileTimerServer::clear() {
  table_.clear();
  rearm();
}

void FileTimerServer::rearm() {
  loop_.cancel_timer(timer_);
  timer_ = 0;
  const auto next = table_.next_expiration();
  if (!next) return;
  const double left_ms = std::clamp(std::ceil((*next - epoch_now()) * 1000), 0.0, 3600.0 * 1000);
  timer_ = loop_.add_timer(
      EventLoop::Clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(left_ms)),
      [this] {
        timer_ = 0;
        tick();
      });
}

}  // namespace ddprun::launcher
