// supervisor.cpp: ProcessSupervisor (see supervisor.h).
//
// One thread runs an epoll loop over: the signalfd of the handled signals (and SIGCHLD
// when pidfds are unavailable), an eventfd for requests from the agent thread, one pidfd
// per worker (exit detection without polling), the workers' stdout/stderr pipes, and the
// console fds while output is queued for them. The agent thread talks to it through
// call() (run a task on the loop and wait for it) and the event queue (next_event).
#include "launcher/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "launcher/log_fanout.h"
#include "launcher/orphan_guard.h"
#include "launcher/signals.h"
#include "launcher/spawn.h"
#include "launcher/unique_fd.h"

namespace ddprun::launcher {
namespace {

using Clock = std::chrono::steady_clock;

// epoll tags: kind in the high 32 bits, worker index in the low 32 bits.
enum class Tag : std::uint64_t { kSignal = 1, kWake, kConsoleOut, kConsoleErr, kPidfd, kOut, kErr };

std::uint64_t tag(Tag t, std::size_t index = 0) {
  return (static_cast<std::uint64_t>(t) << 32) | static_cast<std::uint32_t>(index);
}

// Per readable event, at most this much is read from one pipe, so one chatty worker
// cannot starve the others or the exit handling (epoll is level-triggered).
constexpr std::size_t kReadChunk = 64 * 1024;
constexpr int kReadsPerWakeup = 4;
// How long stop() and the destructor wait for a console that does not accept output.
constexpr std::chrono::milliseconds kConsoleFlushLimit{2000};
// An exit event waits for the console output queued before it at most this long: a
// console that stopped reading must not keep a failure from the agent (never a hang).
constexpr std::chrono::milliseconds kHoldLimit{1000};
// How long a worker may take to die after SIGKILL before the supervisor gives up on it.
constexpr std::chrono::milliseconds kKillWait{10000};
// Reaping interval when pidfds are missing and SIGCHLD may not be blocked everywhere.
constexpr int kFallbackPollMs = 50;

UniqueFd open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
#else
  (void)pid;
  errno = ENOSYS;
  return UniqueFd();
#endif
}

WorkerExit decode_status(int status) {
  WorkerExit e;
  if (WIFSIGNALED(status)) {
    e.signal = WTERMSIG(status);
  } else {
    e.exit_code = WEXITSTATUS(status);
  }
  return e;
}

struct Pipe {
  UniqueFd fd;
  std::unique_ptr<StreamRoute> route;
  bool paused = false;
};

struct Worker {
  int local_rank = 0;
  int global_rank = 0;
  pid_t pid = 0;
  UniqueFd pidfd;
  Pipe out, err;
  bool spawned = false;     // exec succeeded (the process is ours to reap)
  bool reaped = false;
  bool group_gone = false;  // the process group is known to be empty
  WorkerExit exit;
};

// An event that must not overtake console output queued before it.
struct HeldEvent {
  SupervisorEvent event;
  std::uint64_t out_mark = 0;
  std::uint64_t err_mark = 0;
  Clock::time_point deadline;
};

}  // namespace

struct ProcessSupervisor::Impl {
  explicit Impl(SupervisorOptions opts);
  ~Impl();

  // --- agent-thread side ---
  template <typename F>
  auto call(F&& f) -> decltype(f());
  void post(std::function<void()> task);
  void push_event(SupervisorEvent ev);

  // --- loop-thread side ---
  void loop();
  void handle(std::uint64_t data, std::uint32_t events);
  void on_signalfd();
  void run_tasks();
  void reap(std::size_t index);
  void reap_all();
  void reap_after_kill();
  // Reads one pipe; `drain` ignores the per-wakeup limit and backpressure and reads until
  // the pipe is empty. Returns true at EOF (the pipe is then closed).
  bool read_pipe(Pipe& pipe, bool drain);
  void close_pipe(Pipe& pipe);
  void on_exited(Worker& w);
  void release_held();
  void sync_interest();
  void set_interest(int fd, std::uint64_t data, std::uint32_t events, bool* registered);
  void del_interest(int fd);
  void signal_groups(int signo);
  void kill_and_clean_attempt(bool warn_leftovers);
  void do_start(std::vector<WorkerSpec>& specs);
  std::vector<WorkerExit> take_undelivered_exits();
  void guard(GuardRecord::Op op, pid_t pgid);
  void update_attempt_done();

  SupervisorOptions options;
  UniqueFd epoll;
  UniqueFd signal_fd;
  UniqueFd wake_fd;
  bool use_pidfd = true;
  ConsoleWriter console_out;
  ConsoleWriter console_err;
  bool console_out_registered = false;
  bool console_err_registered = false;
  bool guard_warned = false;

  // Loop-thread state.
  std::vector<std::unique_ptr<Worker>> workers;
  std::deque<HeldEvent> held;
  bool stopping = false;

  // Shared state, under mu.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> tasks;
  std::deque<SupervisorEvent> events;
  bool attempt_done = true;  // every worker of the attempt reaped
  bool quit = false;
  std::atomic<bool> cut{false};

  std::thread thread;
};

ProcessSupervisor::Impl::Impl(SupervisorOptions opts)
    : options(std::move(opts)),
      console_out(options.console_stdout_fd),
      console_err(options.console_stderr_fd) {
  epoll.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll) throw_errno("epoll_create1");
  wake_fd.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_fd) throw_errno("eventfd");
  {
    // Probe once: pidfd_open needs Linux 5.3. Without it, SIGCHLD joins the signalfd.
    UniqueFd self = options.use_pidfd ? open_pidfd(::getpid()) : UniqueFd();
    use_pidfd = self.valid();
  }
  std::vector<int> sigs = options.handled_signals;
  if (!use_pidfd) {
    sigs.push_back(SIGCHLD);
    spdlog::debug("pidfd_open unavailable; reaping workers on SIGCHLD");
  }
  signal_fd = make_signalfd(sigs);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = tag(Tag::kSignal);
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, signal_fd.get(), &ev) != 0) throw_errno("epoll_ctl");
  ev.data.u64 = tag(Tag::kWake);
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, wake_fd.get(), &ev) != 0) throw_errno("epoll_ctl");
  thread = std::thread([this] {
    // The handled signals must stay blocked here too, or the kernel could deliver one to
    // this thread with its default action instead of queueing it for the signalfd.
    try {
      std::vector<int> blocked = options.handled_signals;
      blocked.push_back(SIGCHLD);
      block_signals(blocked);
    } catch (const std::exception& e) {
      spdlog::error("supervisor: {}", e.what());
    }
    loop();
  });
}

ProcessSupervisor::Impl::~Impl() {
  try {
    call([this] {
      kill_and_clean_attempt(/*warn_leftovers=*/true);
      console_out.flush(kConsoleFlushLimit);
      console_err.flush(kConsoleFlushLimit);
      std::lock_guard lock(mu);
      quit = true;
    });
  } catch (const std::exception& e) {
    spdlog::error("supervisor shutdown: {}", e.what());
    {
      std::lock_guard lock(mu);
      quit = true;
    }
    std::uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd.get(), &one, sizeof one);
  }
  if (thread.joinable()) thread.join();
}

void ProcessSupervisor::Impl::post(std::function<void()> task) {
  {
    std::lock_guard lock(mu);
    tasks.push_back(std::move(task));
  }
  std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd.get(), &one, sizeof one);
}

template <typename F>
auto ProcessSupervisor::Impl::call(F&& f) -> decltype(f()) {
  std::packaged_task<decltype(f())()> task(std::forward<F>(f));
  auto result = task.get_future();
  post([&task] { task(); });
  return result.get();
}

void ProcessSupervisor::Impl::push_event(SupervisorEvent ev) {
  {
    std::lock_guard lock(mu);
    events.push_back(ev);
  }
  cv.notify_all();
}

void ProcessSupervisor::Impl::loop() {
  epoll_event ready[32];
  while (true) {
    {
      std::lock_guard lock(mu);
      if (quit) return;
    }
    int timeout = -1;
    if (!use_pidfd) {
      bool alive = std::any_of(workers.begin(), workers.end(), [](auto& w) { return !w->reaped; });
      if (alive) timeout = kFallbackPollMs;
    }
    if (!held.empty()) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(held.front().deadline - Clock::now());
      int ms = static_cast<int>(std::max<std::int64_t>(left.count(), 0));
      timeout = timeout < 0 ? ms : std::min(timeout, ms);
    }
    int n = ::epoll_wait(epoll.get(), ready, 32, timeout);
    if (n < 0) {
      if (errno == EINTR) continue;
      spdlog::critical("supervisor: epoll_wait: {}", std::strerror(errno));
      std::abort();  // a supervisor that cannot wait can neither reap nor stop workers
    }
    for (int i = 0; i < n; ++i) handle(ready[i].data.u64, ready[i].events);
    if (!use_pidfd) reap_all();
    release_held();
    sync_interest();
  }
}

void ProcessSupervisor::Impl::handle(std::uint64_t data, std::uint32_t events_mask) {
  auto kind = static_cast<Tag>(data >> 32);
  std::size_t index = data & 0xffffffffu;
  switch (kind) {
    case Tag::kSignal:
      on_signalfd();
      break;
    case Tag::kWake:
      run_tasks();
      break;
    case Tag::kConsoleOut:
      console_out.on_writable();
      break;
    case Tag::kConsoleErr:
      console_err.on_writable();
      break;
    case Tag::kPidfd:
      if (index < workers.size()) reap(index);
      break;
    case Tag::kOut:
    case Tag::kErr:
      if (index < workers.size()) {
        Worker& w = *workers[index];
        Pipe& p = kind == Tag::kOut ? w.out : w.err;
        if (p.fd && (events_mask & (EPOLLIN | EPOLLHUP | EPOLLERR))) read_pipe(p, false);
      }
      break;
  }
}

void ProcessSupervisor::Impl::on_signalfd() {
  signalfd_siginfo info{};
  while (::read(signal_fd.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    int signo = static_cast<int>(info.ssi_signo);
    if (signo == SIGCHLD && !use_pidfd) continue;  // reap_all runs after every wakeup
    SupervisorEvent ev;
    ev.kind = SupervisorEvent::Kind::kSignal;
    ev.signo = signo;
    if (stopping && options.signal_cuts_grace) cut = true;
    push_event(ev);
  }
}

void ProcessSupervisor::Impl::run_tasks() {
  std::uint64_t count;
  [[maybe_unused]] ssize_t n = ::read(wake_fd.get(), &count, sizeof count);
  while (true) {
    std::function<void()> task;
    {
      std::lock_guard lock(mu);
      if (tasks.empty()) return;
      task = std::move(tasks.front());
      tasks.pop_front();
    }
    task();
  }
}

void ProcessSupervisor::Impl::reap(std::size_t index) {
  Worker& w = *workers[index];
  if (w.reaped) return;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(w.pid, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return;
  if (r < 0) {
    // ECHILD: someone else reaped it (should not happen: nothing else waits for workers).
    spdlog::warn("waitpid({}): {}", w.pid, std::strerror(errno));
    status = 0xff00;  // reported as exit code 255
  }
  w.reaped = true;
  WorkerExit e = decode_status(status);
  e.local_rank = w.local_rank;
  e.global_rank = w.global_rank;
  e.pid = w.pid;
  e.when = std::chrono::system_clock::now();
  w.exit = e;
  if (w.pidfd) {
    del_interest(w.pidfd.get());
    w.pidfd.reset();
  }
  on_exited(w);
}

void ProcessSupervisor::Impl::reap_all() {
  for (std::size_t i = 0; i < workers.size(); ++i) reap(i);
}

void ProcessSupervisor::Impl::reap_after_kill() {
  // SIGKILL cannot be caught, so this normally takes microseconds. A process stuck in
  // uninterruptible sleep (a hung NFS mount or GPU driver call) dies only when the call
  // returns; rather than hang the agent, such a worker is reported as killed and left.
  auto deadline = Clock::now() + kKillWait;
  while (true) {
    reap_all();
    std::vector<pollfd> fds;
    for (auto& w : workers) {
      if (!w->reaped && w->pidfd) fds.push_back({w->pidfd.get(), POLLIN, 0});
    }
    bool pending = std::any_of(workers.begin(), workers.end(), [](auto& w) { return !w->reaped; });
    if (!pending) return;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    // Without pidfds there is nothing to wait on: poll() then just sleeps a few ms.
    int ms = fds.empty() ? 5 : static_cast<int>(std::min<std::int64_t>(left.count(), 100));
    ::poll(fds.data(), fds.size(), ms);
  }
  for (auto& w : workers) {
    if (w->reaped) continue;
    spdlog::warn("worker pid {} (local rank {}) is still alive {} s after SIGKILL "
                 "(uninterruptible sleep?); giving up on it",
                 w->pid, w->local_rank, kKillWait.count() / 1000);
    w->reaped = true;
    w->exit.local_rank = w->local_rank;
    w->exit.global_rank = w->global_rank;
    w->exit.pid = w->pid;
    w->exit.signal = SIGKILL;
    w->exit.when = std::chrono::system_clock::now();
    if (w->pidfd) {
      del_interest(w->pidfd.get());
      w->pidfd.reset();
    }
    on_exited(*w);
  }
}

bool ProcessSupervisor::Impl::read_pipe(Pipe& pipe, bool drain) {
  if (!pipe.fd) return true;
  if (!drain && pipe.paused) return false;
  // A drain takes what is in the pipe now (all of an exited worker's output) plus one
  // byte to see EOF, and no more: a grandchild that keeps writing must not keep the
  // supervisor in this loop.
  std::size_t budget = kReadsPerWakeup * kReadChunk;
  if (drain) {
    int avail = 0;
    budget = ::ioctl(pipe.fd.get(), FIONREAD, &avail) == 0 ? std::size_t(avail) + 1 : budget;
  }
  char buf[kReadChunk];
  while (budget > 0) {
    ssize_t n = ::read(pipe.fd.get(), buf, std::min(sizeof buf, budget));
    if (n > 0) {
      budget -= static_cast<std::size_t>(n);
      pipe.route->on_data(std::string_view(buf, static_cast<std::size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return false;
    // EOF (or a read error, treated alike): flush the last partial line.
    pipe.route->on_eof();
    close_pipe(pipe);
    return true;
  }
  return false;
}

void ProcessSupervisor::Impl::close_pipe(Pipe& pipe) {
  if (!pipe.fd) return;
  del_interest(pipe.fd.get());
  pipe.fd.reset();
}

void ProcessSupervisor::Impl::on_exited(Worker& w) {
  // Everything the worker wrote before exiting is in its pipes now; take it all before
  // reporting the exit. Grandchildren may keep the pipes open: don't wait for EOF.
  read_pipe(w.out, true);
  read_pipe(w.err, true);
  // An empty group can be forgotten by the guard at once (no pid reuse window).
  if (::kill(-w.pid, 0) != 0 && errno == ESRCH) {
    w.group_gone = true;
    guard(GuardRecord::kRemove, w.pid);
  }
  HeldEvent h;
  h.event.kind = SupervisorEvent::Kind::kWorkerExited;
  h.event.exit = w.exit;
  h.out_mark = console_out.enqueued();
  h.err_mark = console_err.enqueued();
  h.deadline = Clock::now() + kHoldLimit;
  held.push_back(h);
  bool all_reaped = std::all_of(workers.begin(), workers.end(), [](auto& x) { return x->reaped; });
  if (all_reaped && !stopping &&
      std::all_of(workers.begin(), workers.end(), [](auto& x) { return !x->exit.failed(); })) {
    h.event = SupervisorEvent{};
    h.event.kind = SupervisorEvent::Kind::kAllSucceeded;
    held.push_back(h);
  }
  update_attempt_done();
}

void ProcessSupervisor::Impl::update_attempt_done() {
  bool done = std::all_of(workers.begin(), workers.end(), [](auto& x) { return x->reaped; });
  {
    std::lock_guard lock(mu);
    attempt_done = done;
  }
  if (done) cv.notify_all();
}

void ProcessSupervisor::Impl::release_held() {
  bool any = false;
  {
    std::lock_guard lock(mu);
    auto now = Clock::now();
    while (!held.empty() && ((console_out.written() >= held.front().out_mark &&
                              console_err.written() >= held.front().err_mark) ||
                             now >= held.front().deadline)) {
      events.push_back(held.front().event);
      held.pop_front();
      any = true;
    }
  }
  if (any) cv.notify_all();
}

void ProcessSupervisor::Impl::set_interest(int fd, std::uint64_t data, std::uint32_t ev_mask,
                                           bool* registered) {
  epoll_event ev{};
  ev.events = ev_mask;
  ev.data.u64 = data;
  int op = *registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
  if (::epoll_ctl(epoll.get(), op, fd, &ev) == 0) *registered = true;
}

void ProcessSupervisor::Impl::del_interest(int fd) {
  ::epoll_ctl(epoll.get(), EPOLL_CTL_DEL, fd, nullptr);
}

void ProcessSupervisor::Impl::sync_interest() {
  // Console fds are watched only while they have a backlog.
  auto sync_console = [this](ConsoleWriter& c, Tag t, bool* registered) {
    int fd = c.poll_fd();
    if (fd >= 0 && c.backlog() > 0 && !*registered) {
      set_interest(fd, tag(t), EPOLLOUT, registered);
    } else if (*registered && c.backlog() == 0) {
      del_interest(fd);
      *registered = false;
    }
  };
  sync_console(console_out, Tag::kConsoleOut, &console_out_registered);
  sync_console(console_err, Tag::kConsoleErr, &console_err_registered);
  // Backpressure: stop reading console-bound pipes while their console is over its mark.
  for (std::size_t i = 0; i < workers.size(); ++i) {
    Worker& w = *workers[i];
    for (auto [pipe, t, console] : {std::tuple{&w.out, Tag::kOut, &console_out},
                                    std::tuple{&w.err, Tag::kErr, &console_err}}) {
      if (!pipe->fd || !pipe->route->uses_console()) continue;
      bool pause = console->over_high_water();
      if (pause == pipe->paused) continue;
      pipe->paused = pause;
      // Removed rather than set to no events: epoll reports EPOLLHUP regardless of the
      // mask, which would spin this loop on a paused pipe whose writer has gone.
      if (pause) {
        del_interest(pipe->fd.get());
      } else {
        bool registered = false;
        set_interest(pipe->fd.get(), tag(t, i), EPOLLIN, &registered);
      }
    }
  }
}

void ProcessSupervisor::Impl::guard(GuardRecord::Op op, pid_t pgid) {
  if (options.orphan_guard_fd < 0 || guard_warned) return;
  if (!send_guard_record(options.orphan_guard_fd, op, pgid)) {
    guard_warned = true;
    spdlog::warn("orphan guard unreachable ({}); workers' grandchildren may outlive a killed "
                 "agent", std::strerror(errno));
  }
}

void ProcessSupervisor::Impl::signal_groups(int signo) {
  for (auto& w : workers) {
    if (w->group_gone) continue;
    // The group id is the leader's pid (setsid in spawn). Signalled even when the leader
    // has exited: its grandchildren may still be in the group. ESRCH: the group is empty.
    if (::kill(-w->pid, signo) != 0) {
      if (errno == ESRCH) {
        w->group_gone = w->reaped;  // before reaping, the leader's zombie keeps the id
      } else {
        spdlog::warn("killpg({}, {}): {}", w->pid, signal_name(signo), std::strerror(errno));
      }
    }
  }
}

void ProcessSupervisor::Impl::kill_and_clean_attempt(bool warn_leftovers) {
  if (workers.empty()) return;
  std::size_t alive = std::count_if(workers.begin(), workers.end(), [](auto& w) { return !w->reaped; });
  if (warn_leftovers && alive > 0) {
    spdlog::warn("killing {} worker(s) still running at supervisor shutdown", alive);
  }
  signal_groups(SIGKILL);
  reap_after_kill();
  for (auto& w : workers) {
    // Every writer in the group is dead; take what is left, but never wait for writers
    // outside the group (a grandchild that called setsid itself).
    read_pipe(w->out, true);
    read_pipe(w->err, true);
    for (Pipe* p : {&w->out, &w->err}) {
      if (p->fd) {
        p->route->on_eof();
        close_pipe(*p);
      }
    }
    if (!w->group_gone) guard(GuardRecord::kRemove, w->pid);
  }
  release_held();
}

std::vector<WorkerExit> ProcessSupervisor::Impl::take_undelivered_exits() {
  std::vector<WorkerExit> out;
  std::lock_guard lock(mu);
  std::deque<SupervisorEvent> keep;
  auto take = [&](const SupervisorEvent& ev) {
    if (ev.kind == SupervisorEvent::Kind::kWorkerExited) out.push_back(ev.exit);
    if (ev.kind == SupervisorEvent::Kind::kSignal || ev.kind == SupervisorEvent::Kind::kTimeout) {
      keep.push_back(ev);
    }
  };
  for (const auto& ev : events) take(ev);
  for (const auto& h : held) take(h.event);
  held.clear();
  events = std::move(keep);
  return out;
}

void ProcessSupervisor::Impl::do_start(std::vector<WorkerSpec>& specs) {
  if (std::any_of(workers.begin(), workers.end(), [](auto& w) { return !w->reaped; })) {
    spdlog::warn("start() while workers of the previous attempt are alive; killing them");
  }
  kill_and_clean_attempt(false);
  take_undelivered_exits();
  workers.clear();
  stopping = false;
  update_attempt_done();
  try {
    for (WorkerSpec& spec : specs) {
      auto w = std::make_unique<Worker>();
      w->local_rank = spec.local_rank;
      w->global_rank = spec.global_rank;
      int out_pipe[2], err_pipe[2];
      // Close-on-exec both ends: the child gets its end through dup2, which clears it.
      if (::pipe2(out_pipe, O_CLOEXEC) != 0) throw_errno("pipe2");
      w->out.fd.reset(out_pipe[0]);
      UniqueFd out_write(out_pipe[1]);
      if (::pipe2(err_pipe, O_CLOEXEC) != 0) throw_errno("pipe2");
      w->err.fd.reset(err_pipe[0]);
      UniqueFd err_write(err_pipe[1]);
      // Only our read ends are non-blocking (separate open file descriptions).
      ::fcntl(w->out.fd.get(), F_SETFL, O_NONBLOCK);
      ::fcntl(w->err.fd.get(), F_SETFL, O_NONBLOCK);
      // Only tee'd streams carry the prefix on the console, as torchrun's (-t 1 prefixes
      // stdout lines and leaves stderr lines bare).
      auto prefix_for = [&](const StreamSpec& s) {
        return s.mode == StreamMode::kTee ? spec.line_prefix : std::string();
      };
      w->out.route = std::make_unique<StreamRoute>(spec.out, prefix_for(spec.out), &console_out);
      w->err.route = std::make_unique<StreamRoute>(spec.err, prefix_for(spec.err), &console_err);

      SpawnOptions so;
      so.argv = std::move(spec.argv);
      so.env = std::move(spec.env);
      so.cwd = std::move(spec.cwd);
      so.stdout_fd = out_write.get();
      so.stderr_fd = err_write.get();
      Worker* raw = w.get();
      workers.push_back(std::move(w));
      update_attempt_done();
      raw->pid = spawn_process(so, [&](pid_t pid) {
        raw->pid = pid;
        guard(GuardRecord::kAdd, pid);
      });
      raw->spawned = true;
      std::size_t index = workers.size() - 1;
      raw->pidfd = use_pidfd ? open_pidfd(raw->pid) : UniqueFd();
      if (use_pidfd && !raw->pidfd) throw_errno("pidfd_open");
      bool reg = false;
      if (raw->pidfd) set_interest(raw->pidfd.get(), tag(Tag::kPidfd, index), EPOLLIN, &reg);
      reg = false;
      set_interest(raw->out.fd.get(), tag(Tag::kOut, index), EPOLLIN, &reg);
      reg = false;
      set_interest(raw->err.fd.get(), tag(Tag::kErr, index), EPOLLIN, &reg);
    }
  } catch (const std::exception& e) {
    // A worker whose exec failed was already reaped by spawn_process (or never forked):
    // mark it so the cleanup below neither signals nor waits for it.
    for (auto& w : workers) {
      if (!w->spawned) {
        w->reaped = true;
        if (w->pid != 0) guard(GuardRecord::kRemove, w->pid);
        w->group_gone = true;
      }
    }
    kill_and_clean_attempt(false);
    take_undelivered_exits();
    workers.clear();
    update_attempt_done();
    if (dynamic_cast<const SpawnError*>(&e) != nullptr) throw;
    throw SpawnError(e.what());
  }
}

ProcessSupervisor::ProcessSupervisor(SupervisorOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

ProcessSupervisor::~ProcessSupervisor() = default;

void ProcessSupervisor::start(std::vector<WorkerSpec> workers) {
  impl_->call([&] { impl_->do_start(workers); });
}

SupervisorEvent ProcessSupervisor::next_event(std::chrono::milliseconds timeout) {
  // Capped so that milliseconds::max() means "wait forever" without overflowing.
  auto limit = std::min<std::chrono::milliseconds>(timeout, std::chrono::hours(24 * 365));
  std::unique_lock lock(impl_->mu);
  if (!impl_->cv.wait_for(lock, limit, [&] { return !impl_->events.empty(); })) {
    return SupervisorEvent{};
  }
  SupervisorEvent ev = impl_->events.front();
  impl_->events.pop_front();
  return ev;
}

void ProcessSupervisor::forward_signal(int signo) {
  impl_->call([&] { impl_->signal_groups(signo); });
}

std::vector<WorkerExit> ProcessSupervisor::stop(int signo, std::chrono::milliseconds grace) {
  Impl& m = *impl_;
  m.cut = false;
  m.call([&] {
    m.stopping = true;
    m.signal_groups(signo);
  });
  {
    std::unique_lock lock(m.mu);
    m.cv.wait_for(lock, grace, [&] { return m.attempt_done || m.cut.load(); });
  }
  return m.call([&] {
    m.kill_and_clean_attempt(false);
    m.console_out.flush(kConsoleFlushLimit);
    m.console_err.flush(kConsoleFlushLimit);
    m.release_held();
    std::vector<WorkerExit> exits = m.take_undelivered_exits();
    m.workers.clear();
    m.stopping = false;
    m.update_attempt_done();
    return exits;
  });
}

void ProcessSupervisor::cut_short() {
  impl_->cut = true;
  std::lock_guard lock(impl_->mu);  // so a waiter cannot miss the notification
  impl_->cv.notify_all();
}

std::vector<pid_t> ProcessSupervisor::live_pids() const {
  return impl_->call([&] {
    std::vector<pid_t> pids;
    for (auto& w : impl_->workers) {
      if (!w->reaped) pids.push_back(w->pid);
    }
    return pids;
  });
}

}  // namespace ddprun::launcher
