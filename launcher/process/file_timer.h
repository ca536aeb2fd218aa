// file_timer.h: the server side of torch.distributed.elastic.timer's FileTimerClient
// (TORCHELASTIC_ENABLE_FILE_TIMER=1), compatible with PyTorch 1.13's and 2.6's clients:
// parse_timer_request and TimerTable (pure, table-tested) and FileTimerServer, which owns
// the named pipe and signals expired timers on its own EventLoop timer. Used by
// ProcessSupervisor (SupervisorOptions::file_timer_path). Thread-safety: none;
// FileTimerServer runs on the supervisor's EventLoop thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/unique_fd.h"
#include "launcher/process/event_loop.h"

namespace ddprun::launcher {

// The wire format, as the clients write it: the server makes a named pipe; for every
// acquire/release a client opens it (O_WRONLY|O_NONBLOCK, which fails while no reader has
// it open), writes one JSON object and '\n' (at most PIPE_BUF bytes, so writes of several
// clients never interleave) and closes it:
//   {"version": 1, "pid": <worker pid>, "scope_id": "<text>",
//    "expiration_time": <seconds since the epoch, float>, "signal": <int>}
// A negative expiration_time releases the scope. Timers are keyed by (pid, scope_id); a
// new acquire of a key replaces it. When timers have expired (expiration_time <= now),
// their pid gets the signal of its earliest expired timer whose signal is > 0 (none: the
// pid is not signalled), and every timer of that pid is dropped. Timers of pids that no
// longer exist are dropped too (2.6).

struct TimerRequest {
  pid_t pid = 0;
  std::string scope_id;
  double expiration_time = 0;  // seconds since the epoch; < 0: release
  int signal = 0;
  bool release() const { return expiration_time < 0; }
};

// One line of the pipe (without its '\n'). nullopt with `why` set when it is not a
// request: not JSON, not an object, a missing or mistyped field, a pid <= 0.
std::optional<TimerRequest> parse_timer_request(std::string_view line, std::string* why);

class TimerTable {
 public:
  struct Expired {
    pid_t pid = 0;
    int signal = 0;                   // 0: no timer of the pid asked for a signal
    std::string scope_id;             // the timer whose signal is used (else the first)
    std::vector<std::string> scopes;  // every expired scope of the pid
  };

  void apply(const TimerRequest& request);
  // The pids with timers expired at `now` (seconds since the epoch), in pid order; every
  // timer of those pids is removed.
  std::vector<Expired> take_expired(double now);
  // Drops every timer of `pid`.
  void drop(pid_t pid);
  void clear() { timers_.clear(); }
  // The earliest expiration_time, or nullopt when empty.
  std::optional<double> next_expiration() const;
  std::vector<pid_t> pids() const;
  std::size_t size() const { return timers_.size(); }

 private:
  std::map<std::pair<pid_t, std::string>, TimerRequest> timers_;
};

class FileTimerServer {
 public:
  // Says whether a pid belongs to the job (a worker or one of its descendants): only
  // those are signalled; a request for another pid is dropped with a warning.
  using IsJobProcess = std::function<bool(pid_t)>;
  // Called after `pid` was sent `signo` because `scope` expired.
  using OnKill = std::function<void(pid_t pid, int signo, const std::string& scope)>;

  // Removes whatever is at `path`, creates the named pipe (mode 0600) and opens it for
  // reading (and once for writing, so that the last client's close is not an EOF), and
  // registers it with `loop`. Throws std::system_error naming the path. Call on the loop
  // thread or before the loop starts.
  FileTimerServer(EventLoop& loop, std::string path, IsJobProcess is_job_process, OnKill on_kill);
  // Unregisters and removes the pipe.
  ~FileTimerServer();
  FileTimerServer(const FileTimerServer&) = delete;
  FileTimerServer& operator=(const FileTimerServer&) = delete;

  // Drops the timers of pids that are gone (call when a worker exits). The server
  // signals expired timers on its own EventLoop timer, re-armed as requests arrive.
  void drop_gone();
  // The attempt ended: its workers' timers go.
  void clear();
  const std::string& path() const { return path_; }

  // The longest line accepted (the clients refuse to send more than PIPE_BUF bytes).
  static constexpr std::size_t kMaxLine = 4096;

 private:
  void on_readable();
  void on_line(std::string_view line);
  // Signals the pids whose timers expired, then drop_gone().
  void tick();
  // The loop timer at the next expiration (none when no timer is set).
  void rearm();

  EventLoop& loop_;
  std::string path_;
  IsJobProcess is_job_process_;
  OnKill on_kill_;
  UniqueFd read_fd_;
  UniqueFd keep_open_fd_;
  EventLoop::Id id_ = 0;
  EventLoop::TimerId timer_ = 0;
  std::string partial_;
  bool skipping_ = false;  // inside an oversized line, until its '\n'
  TimerTable table_;
};

}  // namespace ddprun::launcher
