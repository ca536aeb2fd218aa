// output_router.h: OutputRouter, the supervisor's output side: the workers' pipes (or,
// for WorkerSpec::terminal on a terminal console, ptys) routed line by line to consoles and
// log files (log_fanout.h), console back-pressure, events held until the output before
// them is on the console, a prompt let out after kPartialWait, each worker's stderr tail.
// Used by ProcessSupervisor. Thread-safety: none; all on the supervisor's EventLoop thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/unique_fd.h"
#include "launcher/process/event_loop.h"
#include "launcher/process/log_fanout.h"
#include "launcher/process/supervisor_interface.h"

namespace ddprun::launcher {

// Pipes are read with a per-wakeup budget and drained when the worker exits; a console
// over its high-water mark pauses the pipes bound for it; a worker's exit waits until the
// output queued before it has reached the console.

class OutputRouter {
 public:
  // Receives each held event once it may be delivered.
  using Deliver = std::function<void(const SupervisorEvent&)>;

  // The console fds are not owned and must outlive the router.
  OutputRouter(EventLoop& loop, int console_stdout_fd, int console_stderr_fd, Deliver deliver);
  ~OutputRouter();
  OutputRouter(const OutputRouter&) = delete;
  OutputRouter& operator=(const OutputRouter&) = delete;

  // A partial line (no newline yet) waits at most this long for the rest before it is
  // let out to the console as a piece of its line.
  static constexpr std::chrono::milliseconds kPartialWait{50};

  // The write ends a worker's stdout and stderr become (close-on-exec; spawn dup2s them):
  // a pipe's, or the slave of a pty (spec.terminal, a stream that goes to the console
  // alone, not tee'd to a file, and a console that is a terminal; output processing off,
  // so the bytes arrive as written).
  struct ChildEnds {
    UniqueFd out;
    UniqueFd err;
  };
  // Creates the next worker's two pipes and routes (log files created, truncated) and
  // starts reading them. Workers are numbered in the order of add() from 0, as in
  // WorkerGroup. Throws std::system_error naming a log file that cannot be created.
  ChildEnds add(const WorkerSpec& spec);
  // Reads what worker `index`'s pipes hold now (its exit was seen): not waiting for EOF,
  // since grandchildren may hold the pipes open, and ignoring back-pressure; lines of it
  // waiting behind another worker's long line go to the console now.
  void drain(std::size_t index);
  // End of an attempt, every writer in the groups dead: drains every pipe, flushes the
  // last partial lines and forgets the pipes.
  void close_all();
  // Puts into `exit` the last WorkerExit::kStderrTailBytes worker `index` wrote to stderr
  // (kept for every worker of the attempt, whatever its routes; drain() first).
  void take_stderr_tail(std::size_t index, WorkerExit& exit) const;
  // Bytes read so far from worker `index`'s stdout and stderr (the stall watchdog).
  std::uint64_t bytes_read(std::size_t index) const;
  // Worker `index`'s output is not being read because its console is over its high-water
  // mark (a reader of ddprun's stdout that stopped, Ctrl-S, a paused pager): the worker may
  // be blocked writing to ddprun, which the stall watchdog must not call a stall.
  bool held_back(std::size_t index) const;

  // Queues `event` behind the console output queued so far (for at most kHoldLimit: a
  // console that stopped reading must not keep a failure from the agent).
  void hold(const SupervisorEvent& event);
  // Delivers the held events whose output is written (or whose time is up), in order.
  void release_ready();
  // Removes and returns every held event.
  std::vector<SupervisorEvent> take_held();

  // After each wakeup: let out console lines that waited their time behind a long line,
  // watch the consoles for EPOLLOUT while they have a backlog, pause or resume
  // console-bound pipes as the consoles cross their high-water mark, and set the loop
  // timer at the first held event's deadline or the time a console must let lines
  // waiting behind a long line out.
  void sync();
  // Blocks until the console backlogs are written or `limit` passes (see ConsoleWriter).
  void flush_consoles(std::chrono::milliseconds limit);

 private:
  struct Pipe {
    UniqueFd fd;
    std::unique_ptr<StreamRoute> route;
    ConsoleWriter* console = nullptr;  // the console this stream's lines may go to
    bool paused = false;
    EventLoop::Id id = 0;  // 0: not registered
    // stderr only: the last bytes read (between tail_limit and twice that, then trimmed).
    std::size_t tail_limit = 0;
    std::string tail;
    bool tail_cut = false;    // bytes before `tail` were dropped
    std::uint64_t bytes = 0;  // read so far
    bool tty = false;         // `fd` is a pty master
    // When the partial line pending in `route` is let out (max: none pending).
    std::chrono::steady_clock::time_point partial_at = std::chrono::steady_clock::time_point::max();
  };
  struct Console {
    explicit Console(int fd) : writer(fd) {}
    ConsoleWriter writer;
    EventLoop::Id id = 0;  // registered for EPOLLOUT while it has a backlog
  };
  struct Held {
    SupervisorEvent event;
    std::uint64_t out_mark = 0;
    std::uint64_t err_mark = 0;
    std::chrono::steady_clock::time_point deadline;
  };

  // Reads one pipe; `drain` ignores the per-wakeup budget and back-pressure and reads
  // what the pipe holds now plus one byte to see EOF. At EOF the pipe is closed.
  void read(Pipe& pipe, bool drain);
  void close(Pipe& pipe);
  static void keep_tail(Pipe& pipe, std::string_view chunk);
  void watch(Pipe& pipe);
  void sync_console(Console& console);
  void rearm();

  EventLoop& loop_;
  bool out_tty_ = false;  // the console stdout is a terminal
  bool err_tty_ = false;
  Console out_;
  Console err_;
  Deliver deliver_;
  std::vector<std::unique_ptr<Pipe>> pipes_;  // worker i: 2i is stdout, 2i+1 stderr
  std::deque<Held> held_;
  EventLoop::TimerId timer_ = 0;
  std::chrono::steady_clock::time_point timer_at_ = std::chrono::steady_clock::time_point::max();
};

}  // namespace ddprun::launcher
