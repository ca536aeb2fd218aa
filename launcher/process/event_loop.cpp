// event_loop.cpp: EventLoop (see event_loop.h): the epoll loop, its timers and the task
// queue. Used by ProcessSupervisor's parts.
#include "launcher/process/event_loop.h"

#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <vector>

namespace ddprun::launcher {
namespace {

constexpr EventLoop::Id kWakeId = 0;

}  // namespace

EventLoop::EventLoop() {
  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) throw_errno("epoll_create1");
  wake_fd_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_fd_) throw_errno("eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeId;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_fd_.get(), &ev) != 0) {
    throw_errno("epoll_ctl");
  }
}

EventLoop::~EventLoop() { shutdown(); }

void EventLoop::shutdown() {
  quit();
  if (thread_.joinable()) thread_.join();
}

void EventLoop::start(Hooks hooks) {
  hooks_ = std::move(hooks);
  thread_ = std::thread([this] { run(); });
}

EventLoop::Id EventLoop::add(int fd, std::uint32_t events, Handler handler) {
  assert(on_loop_thread() && "EventLoop: a loop-thread call from another thread");
  const Id id = next_id_++;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = id;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) throw_errno("epoll_ctl");
  registrations_.emplace(id, Registration{fd, std::move(handler)});
  return id;
}

void EventLoop::modify(Id id, std::uint32_t events) {
  assert(on_loop_thread() && "EventLoop: a loop-thread call from another thread");
  auto it = registrations_.find(id);
  if (it == registrations_.end()) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = id;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, it->second.fd, &ev);
}

void EventLoop::remove(Id id) {
  assert(on_loop_thread() && "EventLoop: a loop-thread call from another thread");
  auto it = registrations_.find(id);
  if (it == registrations_.end()) return;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->second.fd, nullptr);
  registrations_.erase(it);
}

EventLoop::TimerId EventLoop::add_timer(Clock::time_point when, std::function<void()> fn) {
  assert(on_loop_thread() && "EventLoop: a loop-thread call from another thread");
  const TimerId id = next_timer_++;
  timers_.emplace(std::make_pair(when, id), std::move(fn));
  timer_when_.emplace(id, when);
  return id;
}

void EventLoop::cancel_timer(TimerId id) {
  assert(on_loop_thread() && "EventLoop: a loop-thread call from another thread");
  const auto it = timer_when_.find(id);
  if (it == timer_when_.end()) return;
  timers_.erase(std::make_pair(it->second, id));
  timer_when_.erase(it);
}

int EventLoop::timeout_ms() const {
  if (timers_.empty()) return -1;
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(timers_.begin()->first.first - Clock::now());
  return static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 3600 * 1000));
}

void EventLoop::run_due_timers() {
  const auto now = Clock::now();
  // Only the timers due now: one that a timer adds for `now` or earlier waits for the
  // next round, so a part re-arming at once cannot starve the loop.
  std::vector<TimerId> due;
  for (auto it = timers_.begin(); it != timers_.end() && it->first.first <= now; ++it) {
    due.push_back(it->first.second);
  }
  for (const TimerId id : due) {
    const auto at = timer_when_.find(id);
    if (at == timer_when_.end()) continue;  // cancelled by an earlier timer of this round
    const auto node = timers_.find(std::make_pair(at->second, id));
    std::function<void()> fn = std::move(node->second);
    timers_.erase(node);
    timer_when_.erase(at);
    fn();
  }
}

void EventLoop::post(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    tasks_.push_back(std::move(task));
  }
  wake();
}

void EventLoop::quit() {
  {
    std::lock_guard lock(mu_);
    quit_ = true;
  }
  wake();
}

void EventLoop::wake() {
  std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof one);
}

bool EventLoop::on_loop_thread() const {
  const std::thread::id loop = loop_thread_.load();
  return loop == std::thread::id{} || loop == std::this_thread::get_id();
}

void EventLoop::run() {
  loop_thread_ = std::this_thread::get_id();
  struct Ended {  // however run() returns, the loop-thread rule no longer applies
    std::atomic<std::thread::id>& id;
    ~Ended() { id = std::thread::id{}; }
  } ended{loop_thread_};
  if (hooks_.on_start) hooks_.on_start();
  epoll_event ready[32];
  while (true) {
    {
      std::lock_guard lock(mu_);
      if (quit_) return;
    }
    const int n = ::epoll_wait(epoll_.get(), ready, 32, timeout_ms());
    if (n < 0) {
      if (errno == EINTR) continue;
      spdlog::critical("event loop: epoll_wait: {}", errno_text(errno));
      std::abort();  // a supervisor that cannot wait can neither reap nor stop workers
    }
    for (int i = 0; i < n; ++i) {
      if (ready[i].data.u64 == kWakeId) {
        run_tasks();
        continue;
      }
      auto it = registrations_.find(ready[i].data.u64);
      if (it == registrations_.end()) continue;  // removed earlier in this batch
      Handler handler = it->second.handler;      // a copy: the handler may remove itself
      handler(ready[i].events);
    }
    run_due_timers();
    if (hooks_.after_wakeup) hooks_.after_wakeup();
  }
}

void EventLoop::run_tasks() {
  std::uint64_t count;
  [[maybe_unused]] ssize_t n = ::read(wake_fd_.get(), &count, sizeof count);
  while (true) {
    std::function<void()> task;
    {
      std::lock_guard lock(mu_);
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace ddprun::launcher
