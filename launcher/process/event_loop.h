// event_loop.h: EventLoop, the process library's one epoll loop on its own thread: file
// descriptors and one-shot timers (Redis ae-style) registered with a handler each, tasks
// posted from other threads (an eventfd wakes the loop), a per-wakeup hook. Used by
// ProcessSupervisor's parts. Thread-safety: post(), call() and shutdown() from any other
// thread; add(), modify(), remove(), add_timer() and cancel_timer() only on the loop
// thread (from handlers, timers, hooks or tasks), before start() or after the loop ended:
// they assert it (in builds with assertions, CI's among them).
#pragma once

#include <sys/epoll.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "base/unique_fd.h"

namespace ddprun::launcher {

class EventLoop {
 public:
  using Handler = std::function<void(std::uint32_t events)>;
  // A registration. Ids are never reused, so an event already fetched for an fd that a
  // handler of the same batch removed (and maybe closed and reopened) is dropped.
  using Id = std::uint64_t;

  using Clock = std::chrono::steady_clock;
  // A timer. Ids are never reused (0 is never one), so cancelling a fired one is a no-op.
  using TimerId = std::uint64_t;

  struct Hooks {
    std::function<void()> on_start;      // first thing on the loop thread (signal mask)
    std::function<void()> after_wakeup;  // after each batch of events and due timers
  };

  // Creates the epoll instance and the wake eventfd. Throws std::system_error.
  EventLoop();
  // shutdown().
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Starts the loop thread. Call once.
  void start(Hooks hooks);

  // Loop thread only. add() throws std::system_error; remove() of an unknown id is a
  // no-op. The fd must stay open while registered.
  Id add(int fd, std::uint32_t events, Handler handler);
  void modify(Id id, std::uint32_t events);
  void remove(Id id);
  // Runs `fn` once on the loop thread at `when` (at once, after the current batch, when
  // `when` has passed). Timers due together run in `when` order, then by id.
  TimerId add_timer(Clock::time_point when, std::function<void()> fn);
  // Unknown, fired or 0: a no-op.
  void cancel_timer(TimerId id);

  // Runs `task` on the loop thread, soon.
  void post(std::function<void()> task);
  // Runs `f` on the loop thread and waits for its result (exceptions are rethrown here).
  // REQUIRES: not called on the loop thread, and the loop is running.
  template <typename F>
  auto call(F&& f) -> decltype(f()) {
    std::packaged_task<decltype(f())()> task(std::forward<F>(f));
    auto result = task.get_future();
    post([&task] { task(); });
    return result.get();
  }
  // Quits (after the current batch; tasks still queued are dropped) and joins the
  // thread. Idempotent. Any thread but the loop's.
  void shutdown();

 private:
  struct Registration {
    int fd;
    Handler handler;
  };

  void run();
  void run_tasks();
  // True on the loop thread, and on any thread while no loop thread runs (before start(),
  // after run() returned): the rule add() and the other loop-thread calls assert.
  bool on_loop_thread() const;
  // Milliseconds until the first timer (rounded up; 0 when due), or -1 when none.
  int timeout_ms() const;
  void run_due_timers();
  void quit();
  void wake();

  UniqueFd epoll_;
  UniqueFd wake_fd_;
  Hooks hooks_;
  // Loop-thread state.
  std::unordered_map<Id, Registration> registrations_;
  Id next_id_ = 1;  // 0 is the wake eventfd
  std::map<std::pair<Clock::time_point, TimerId>, std::function<void()>> timers_;
  std::unordered_map<TimerId, Clock::time_point> timer_when_;
  TimerId next_timer_ = 1;
  // Shared state, under mu_.
  std::mutex mu_;
  std::deque<std::function<void()>> tasks_;
  bool quit_ = false;
  std::thread thread_;
  // The running loop thread's id (set by run() itself, so no thread reads thread_ while
  // start() writes it); a default id while none runs.
  std::atomic<std::thread::id> loop_thread_{};
};

}  // namespace ddprun::launcher
