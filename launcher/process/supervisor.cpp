// supervisor.cpp: ProcessSupervisor (see supervisor.h).
//
// The parts, each with its own state, all driven by one EventLoop thread:
//   EventLoop     epoll, the request eventfd, post/call from the agent thread;
//   WorkerGroup   the attempt's processes: spawn, pidfds, reaping, signals, SIGKILL;
//   OutputRouter  the workers' pipes, console back-pressure, events held behind output.
// Here: the signalfd, the event queue next_event() reads, and the attempt's life cycle
// (start, stop with its grace period, end_attempt shared by start, stop and shutdown).
#include "launcher/process/supervisor.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "launcher/process/descendants.h"
#include "launcher/process/event_loop.h"
#include "launcher/process/file_timer.h"
#include "launcher/process/output_router.h"
#include "launcher/process/signals.h"
#include "launcher/process/stall_watch.h"
#include "launcher/process/worker_group.h"

namespace ddprun::launcher {
namespace {

// How long stop() and the destructor wait for a console that does not accept output.
constexpr std::chrono::milliseconds kConsoleFlushLimit{2000};

using Clock = std::chrono::steady_clock;

int ms_until(Clock::time_point when, Clock::time_point now) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(when - now).count();
  return static_cast<int>(std::clamp<std::int64_t>(left, 0, 3600 * 1000));
}

}  // namespace

struct ProcessSupervisor::Impl {
  explicit Impl(SupervisorOptions opts);
  ~Impl();

  // --- loop-thread side ---
  void on_signalfd();
  void on_exit(std::size_t index, const WorkerExit& exit);
  void do_start(std::vector<WorkerSpec>& specs);
  // Ends the attempt, whatever its state: SIGKILL to every group, reap, drain and close
  // the pipes; returns the exits not yet delivered (queued or held) and forgets the
  // workers. kSignal events stay queued.
  std::vector<WorkerExit> end_attempt();
  void update_attempt_done();
  int timeout_ms() const;
  // The stall watchdog, after each wakeup: samples when due, fires, escalates to SIGKILL.
  void stall_tick();
  void stall_fire(const std::vector<std::size_t>& stalled, Clock::time_point now);
  // A dumped worker's exit; true when it was one (then it is not reported on its own).
  bool stall_collect(std::size_t index, const WorkerExit& exit);

  // --- shared ---
  void push_event(const SupervisorEvent& ev);

  SupervisorOptions options;
  EventLoop loop;
  OutputRouter router;
  WorkerGroup group;
  UniqueFd signal_fd;

  // Loop-thread state.
  bool stopping = false;  // inside stop(): no kAllSucceeded, signals may cut the grace
  // The stall watchdog (options.stall_timeout > 0).
  std::optional<StallDetector> stall;
  Clock::time_point next_sample{};
  std::set<std::size_t> stall_warned;  // idle workers already said so (peers progress)
  struct Dump {
    bool active = false;
    bool killed = false;
    Clock::time_point deadline{};
    std::vector<std::size_t> pending;  // signalled, not yet exited
    std::vector<std::string> notes;    // by worker index
    std::vector<WorkerExit> exits;
  } dump;
  // torch's file timer (options.file_timer_path), and the notes for the exits it caused.
  std::unique_ptr<FileTimerServer> timer_server;
  std::map<pid_t, std::string> kill_notes;

  // Shared state, under mu.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<SupervisorEvent> events;
  bool attempt_done = true;  // every worker of the attempt reaped
  std::atomic<bool> cut{false};
};

ProcessSupervisor::Impl::Impl(SupervisorOptions opts)
    : options(std::move(opts)),
      router(loop, options.console_stdout_fd, options.console_stderr_fd,
             [this](const SupervisorEvent& ev) { push_event(ev); }),
      group(loop, options.use_pidfd, options.orphan_guard,
            [this](std::size_t index, const WorkerExit& exit) { on_exit(index, exit); }) {
  // Orphaned descendants (daemons that left their worker's group) re-parent to this
  // process instead of init; WorkerGroup reaps them on SIGCHLD and kills them at the
  // attempt's end.
  if (!become_child_subreaper()) {
    spdlog::warn(
        "prctl(PR_SET_CHILD_SUBREAPER): {}; daemons started by workers may outlive "
        "the job",
        errno_text(errno));
  }
  // SIGCHLD joins the signalfd: adopted processes are reaped on it, and without pidfds
  // the workers too (reap_all runs after every wakeup).
  std::vector<int> sigs = options.handled_signals;
  sigs.push_back(SIGCHLD);
  if (!group.use_pidfd()) spdlog::debug("pidfd_open unavailable; reaping workers on SIGCHLD");
  signal_fd = make_signalfd(sigs);
  loop.add(signal_fd.get(), EPOLLIN, [this](std::uint32_t) { on_signalfd(); });
  if (options.stall_timeout.count() > 0) stall.emplace(options.stall_timeout);
  if (!options.file_timer_path.empty()) {
    timer_server = std::make_unique<FileTimerServer>(
        loop, options.file_timer_path, [this](pid_t pid) { return group.owns(pid); },
        [this](pid_t pid, int signo, const std::string& scope) {
          kill_notes[pid] = fmt::format("file timer: scope '{}' expired; sent {} by ddprun", scope,
                                        signal_name(signo));
        });
    spdlog::info("file timer: requests read from {} (TORCHELASTIC_TIMER_FILE)",
                 options.file_timer_path);
  }
  EventLoop::Hooks hooks;
  hooks.on_start = [this] {
    // The handled signals must stay blocked here too, or the kernel could deliver one to
    // this thread with its default action instead of queueing it for the signalfd.
    try {
      std::vector<int> blocked = options.handled_signals;
      blocked.push_back(SIGCHLD);
      block_signals(blocked);
    } catch (const std::exception& e) {
      spdlog::error("supervisor: {}", e.what());
    }
  };
  hooks.timeout_ms = [this] { return timeout_ms(); };
  hooks.after_wakeup = [this] {
    if (!group.use_pidfd()) group.reap_all();
    stall_tick();
    if (timer_server) timer_server->tick();
    router.release_ready();
    router.sync();
  };
  loop.start(std::move(hooks));
}

ProcessSupervisor::Impl::~Impl() {
  try {
    loop.call([this] {
      if (const std::size_t alive = group.alive(); alive > 0) {
        spdlog::warn("killing {} worker(s) still running at supervisor shutdown", alive);
      }
      end_attempt();
      router.flush_consoles(kConsoleFlushLimit);
    });
  } catch (const std::exception& e) {
    spdlog::error("supervisor shutdown: {}", e.what());
  }
  // The thread must end before the parts it drives (declared after the loop) go.
  loop.shutdown();
}

int ProcessSupervisor::Impl::timeout_ms() const {
  int out = -1;
  const auto take = [&](int ms) {
    if (ms >= 0) out = out < 0 ? ms : std::min(out, ms);
  };
  take(group.poll_interval_ms());
  take(router.timeout_ms());
  if (timer_server) take(timer_server->timeout_ms());
  if (stall && group.alive() > 0) {
    const auto now = Clock::now();
    take(ms_until(dump.active ? dump.deadline : next_sample, now));
  }
  return out;
}

void ProcessSupervisor::Impl::stall_tick() {
  if (!stall || group.alive() == 0) return;
  const auto now = Clock::now();
  if (dump.active) {
    if (now < dump.deadline || dump.killed) return;
    dump.killed = true;
    spdlog::warn("stall: {} worker(s) still alive {} s after SIGABRT; killing them",
                 dump.pending.size(), kStallDumpWait.count() / 1000);
    for (std::size_t i : dump.pending) ::kill(-group.pid(i), SIGKILL);
    return;
  }
  if (now < next_sample || stopping) return;
  for (std::size_t i = 0; i < group.size(); ++i) {
    if (group.reaped(i)) continue;
    stall->observe(i, now, process_tree_cpu_seconds(group.pid(i)), router.bytes_read(i));
  }
  next_sample = now + stall->sample_interval();
  const auto stalled = stall->stalled(now);
  if (!stalled.empty() && stall->all_stalled(now)) {
    stall_fire(stalled, now);
    return;
  }
  // Some workers idle while others still progress: most often ranks waiting for a slower
  // peer (a long import, a checkpoint), so it is said once per idle spell, not acted on.
  for (std::size_t i : stalled) {
    if (!stall_warned.insert(i).second) continue;
    spdlog::warn(
        "stall: local rank {} (pid {}) has made no progress (CPU time or output) for {:g} s "
        "while other workers still progress",
        group.local_rank(i), group.pid(i),
        std::round(static_cast<double>(stall->idle_for(i, now).count()) / 100) / 10);
  }
  for (auto it = stall_warned.begin(); it != stall_warned.end();) {
    it = std::find(stalled.begin(), stalled.end(), *it) == stalled.end() ? stall_warned.erase(it)
                                                                         : std::next(it);
  }
}

void ProcessSupervisor::Impl::stall_fire(const std::vector<std::size_t>& stalled,
                                         Clock::time_point now) {
  // "30", "0.3": seconds to a tenth.
  const auto seconds = [](std::chrono::milliseconds ms) {
    return fmt::format("{:g}", std::round(static_cast<double>(ms.count()) / 100) / 10);
  };
  std::string who;
  dump = Dump{};
  dump.notes.assign(group.size(), "");
  for (std::size_t i : stalled) {  // every live worker (all_stalled)
    who += fmt::format("{}local rank {} (pid {})", who.empty() ? "" : ", ", group.local_rank(i),
                       group.pid(i));
    dump.notes[i] = fmt::format(
        "stalled: no progress (CPU time or output) for {} s; stacks dumped by the stall "
        "watchdog (SIGABRT)",
        seconds(stall->idle_for(i, now)));
    dump.pending.push_back(i);
  }
  spdlog::error(
      "stall: no worker made progress (CPU time or output) for {} s: {}; dumping their Python "
      "stacks (SIGABRT) and ending the attempt",
      seconds(options.stall_timeout), who);
  dump.active = true;
  dump.deadline = now + kStallDumpWait;
  // The worker process only, not its group: faulthandler prints its own stacks, and its
  // children (data loaders) would add theirs to the same stderr. The group dies at the
  // attempt's end.
  for (std::size_t i : dump.pending) ::kill(group.pid(i), SIGABRT);
}

bool ProcessSupervisor::Impl::stall_collect(std::size_t index, const WorkerExit& exit) {
  if (stall) stall->forget(index);
  if (!dump.active) return false;
  const auto it = std::find(dump.pending.begin(), dump.pending.end(), index);
  if (it == dump.pending.end()) return false;
  dump.pending.erase(it);
  WorkerExit e = exit;
  router.take_stderr_tail(index, e);
  e.note = dump.notes[index];
  dump.exits.push_back(std::move(e));
  if (dump.pending.empty()) {
    SupervisorEvent ev;
    ev.kind = SupervisorEvent::Kind::kStalled;
    ev.exits = std::move(dump.exits);
    router.hold(ev);
    dump = Dump{};
  }
  return true;
}

void ProcessSupervisor::Impl::push_event(const SupervisorEvent& ev) {
  {
    std::lock_guard lock(mu);
    events.push_back(ev);
  }
  cv.notify_all();
}

void ProcessSupervisor::Impl::on_signalfd() {
  signalfd_siginfo info{};
  bool child_exited = false;
  while (::read(signal_fd.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    const int signo = static_cast<int>(info.ssi_signo);
    if (signo == SIGCHLD) {  // workers: pidfds or reap_all after the batch
      child_exited = true;
      continue;
    }
    SupervisorEvent ev;
    ev.kind = SupervisorEvent::Kind::kSignal;
    ev.signo = signo;
    // A second Ctrl-C during stop()'s grace period means "now" (still reported).
    if (stopping) cut = true;
    push_event(ev);
  }
  if (child_exited) group.reap_adopted();
}

void ProcessSupervisor::Impl::on_exit(std::size_t index, const WorkerExit& exit) {
  // Everything the worker wrote before exiting is in its pipes now; take it all before
  // reporting the exit.
  router.drain(index);
  if (stall_collect(index, exit)) {
    update_attempt_done();
    return;
  }
  SupervisorEvent ev;
  ev.kind = SupervisorEvent::Kind::kWorkerExited;
  ev.exit = exit;
  if (exit.failed()) router.take_stderr_tail(index, ev.exit);
  if (const auto note = kill_notes.find(exit.pid); note != kill_notes.end() && exit.failed()) {
    ev.exit.note = note->second;
  }
  router.hold(ev);
  if (!stopping && group.all_succeeded()) {
    SupervisorEvent all;
    all.kind = SupervisorEvent::Kind::kAllSucceeded;
    router.hold(all);
  }
  update_attempt_done();
}

void ProcessSupervisor::Impl::update_attempt_done() {
  const bool done = group.all_reaped();
  {
    std::lock_guard lock(mu);
    attempt_done = done;
  }
  if (done) cv.notify_all();
}

std::vector<WorkerExit> ProcessSupervisor::Impl::end_attempt() {
  group.kill_all();
  router.close_all();
  router.release_ready();
  std::vector<WorkerExit> exits;
  {
    std::lock_guard lock(mu);
    std::deque<SupervisorEvent> keep;
    auto take = [&](const SupervisorEvent& ev) {
      if (ev.kind == SupervisorEvent::Kind::kWorkerExited) {
        exits.push_back(ev.exit);
      } else if (ev.kind == SupervisorEvent::Kind::kStalled) {
        exits.insert(exits.end(), ev.exits.begin(), ev.exits.end());
      } else if (ev.kind != SupervisorEvent::Kind::kAllSucceeded) {
        keep.push_back(ev);
      }
    };
    for (const auto& ev : events) take(ev);
    for (const auto& ev : router.take_held()) take(ev);
    events = std::move(keep);
  }
  group.clear();
  stopping = false;
  dump = Dump{};
  kill_notes.clear();
  if (timer_server) timer_server->clear();
  update_attempt_done();
  return exits;
}

void ProcessSupervisor::Impl::do_start(std::vector<WorkerSpec>& specs) {
  if (group.alive() > 0) {
    spdlog::warn("start() while workers of the previous attempt are alive; killing them");
  }
  end_attempt();
  try {
    for (WorkerSpec& spec : specs) {
      OutputRouter::ChildEnds ends = router.add(spec);
      group.spawn(spec, ends.out.get(), ends.err.get());
    }
  } catch (const SpawnError&) {
    end_attempt();
    throw;
  } catch (const std::exception& e) {
    end_attempt();
    throw SpawnError(e.what());
  }
  if (stall) {
    stall->reset(specs.size(), Clock::now());
    stall_warned.clear();
    next_sample = Clock::now();  // the baseline sample
  }
  update_attempt_done();
}

ProcessSupervisor::ProcessSupervisor(SupervisorOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

ProcessSupervisor::~ProcessSupervisor() = default;

void ProcessSupervisor::start(std::vector<WorkerSpec> workers) {
  impl_->loop.call([&] { impl_->do_start(workers); });
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
  impl_->loop.call([&] { impl_->group.signal_groups(signo); });
}

std::vector<WorkerExit> ProcessSupervisor::stop(int signo, std::chrono::milliseconds grace) {
  Impl& m = *impl_;
  m.cut = false;
  m.loop.call([&] {
    m.stopping = true;
    m.group.signal_groups(signo);
  });
  {
    std::unique_lock lock(m.mu);
    m.cv.wait_for(lock, grace, [&] { return m.attempt_done || m.cut.load(); });
  }
  return m.loop.call([&] {
    std::vector<WorkerExit> exits = m.end_attempt();
    m.router.flush_consoles(kConsoleFlushLimit);
    return exits;
  });
}

void ProcessSupervisor::cut_short() {
  impl_->cut = true;
  std::lock_guard lock(impl_->mu);  // so a waiter cannot miss the notification
  impl_->cv.notify_all();
}

std::vector<pid_t> ProcessSupervisor::live_pids() const {
  return impl_->loop.call([&] { return impl_->group.live_pids(); });
}

}  // namespace ddprun::launcher
