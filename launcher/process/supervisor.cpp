// supervisor.cpp: ProcessSupervisor (see supervisor.h): composes the parts on one
// EventLoop thread, each registering its own fds and timers (WorkerGroup, OutputRouter,
// StallWatchdog, FileTimerServer). Here: the signalfd, the event queue next_event() reads,
// and the attempt's life cycle (start, stop with its grace period, end_attempt).
#include "launcher/process/supervisor.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <deque>
#include <map>
#include <mutex>

#include "launcher/process/descendants.h"
#include "launcher/process/event_loop.h"
#include "launcher/process/file_timer.h"
#include "launcher/process/output_router.h"
#include "launcher/process/signals.h"
#include "launcher/process/stall_watchdog.h"
#include "launcher/process/worker_group.h"

namespace ddprun::launcher {
namespace {

// How long stop() and the destructor wait for a console that accepts nothing
// (ConsoleWriter::flush).
constexpr std::chrono::milliseconds kConsoleFlushLimit{2000};

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

  // --- shared ---
  void push_event(const SupervisorEvent& ev);

  SupervisorOptions options;
  EventLoop loop;
  OutputRouter router;
  WorkerGroup group;
  UniqueFd signal_fd;

  // Loop-thread state.
  bool stopping = false;  // inside stop(): no kAllSucceeded, signals may cut the grace
  std::unique_ptr<StallWatchdog> stall;  // options.stall_timeout > 0
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
  if (options.stall_timeout.count() > 0) {
    stall = std::make_unique<StallWatchdog>(loop, group, router, options.stall_timeout);
  }
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
  // Output progress has no deadline of its own: held events and console flow are
  // checked after every wakeup. The other parts' deadlines are loop timers.
  hooks.after_wakeup = [this] {
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
  if (!child_exited) return;
  group.reap_adopted();
  if (!group.use_pidfd()) group.reap_all();
}

void ProcessSupervisor::Impl::on_exit(std::size_t index, const WorkerExit& exit) {
  // Everything the worker wrote before exiting is in its pipes now; take it all before
  // reporting the exit.
  router.drain(index);
  if (timer_server) timer_server->drop_gone();
  if (stall && stall->collect(index, exit)) {
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
  if (stall) stall->end_attempt();
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
      FrDump dump;
      dump.rank = spec.global_rank;
      dump.file = spec.flight_recorder_file;
      const UniqueFd probe = stall ? stall->add_worker(spec.env, std::move(dump)) : UniqueFd();
      group.spawn(spec, ends.out.get(), ends.err.get(), probe.get());
    }
  } catch (const SpawnError&) {
    end_attempt();
    throw;
  } catch (const std::exception& e) {
    end_attempt();
    throw SpawnError(e.what());
  }
  if (stall) stall->start_attempt(specs.size());
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
    if (m.stall) m.stall->stop_sampling();
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

StallGate* ProcessSupervisor::stall_gate() {
  return impl_->stall ? &impl_->stall->gate() : nullptr;
}

std::vector<pid_t> ProcessSupervisor::live_pids() const {
  return impl_->loop.call([&] { return impl_->group.live_pids(); });
}

}  // namespace ddprun::launcher
