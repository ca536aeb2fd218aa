// EventLoop's timers (add_timer/cancel_timer): order, cancelling, a timer that re-arms
// itself, and timers added from another thread through call(); the loop-thread assertion.
// Real loop thread.
#include "launcher/process/event_loop.h"

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

using namespace ddprun::launcher;
using namespace std::chrono_literals;
using Clock = EventLoop::Clock;

TEST_CASE("event loop timers fire in deadline order - a cancelled one never", "[event_loop]") {
  EventLoop loop;
  loop.start({});
  std::promise<std::string> done;
  const std::string order = loop.call([&] {
    auto seen = std::make_shared<std::string>();
    const auto now = Clock::now();
    loop.add_timer(now + 60ms, [&, seen] {
      *seen += "c";
      done.set_value(*seen);
    });
    loop.add_timer(now + 20ms, [seen] { *seen += "a"; });
    const auto gone = loop.add_timer(now + 30ms, [seen] { *seen += "x"; });
    loop.add_timer(now + 40ms, [seen] { *seen += "b"; });
    loop.cancel_timer(gone);
    loop.cancel_timer(gone);  // twice: a no-op
    loop.cancel_timer(0);
    return std::string("armed");
  });
  CHECK(order == "armed");
  auto result = done.get_future();
  REQUIRE(result.wait_for(5s) == std::future_status::ready);
  CHECK(result.get() == "abc");
}

TEST_CASE("event loop timer in the past runs at once - re-arming itself repeats", "[event_loop]") {
  EventLoop loop;
  loop.start({});
  std::promise<int> done;
  int ticks = 0;  // loop thread only
  std::function<void()> tick = [&] {
    if (++ticks == 3) {
      done.set_value(ticks);
      return;
    }
    loop.add_timer(Clock::now() + 5ms, tick);
  };
  const auto start = Clock::now();
  loop.post([&] { loop.add_timer(Clock::now() - 1s, tick); });
  auto result = done.get_future();
  REQUIRE(result.wait_for(5s) == std::future_status::ready);
  CHECK(result.get() == 3);
  CHECK(Clock::now() - start >= 10ms);
  CHECK(Clock::now() - start < 2s);
}

// The loop-thread rule is checked, not only written: add_timer() from another thread while
// the loop runs aborts (in a forked child, so the test process survives); before start()
// and after shutdown() the same call is allowed (no loop thread to race with).
TEST_CASE("event loop asserts that loop-thread calls come from the loop thread", "[event_loop]") {
#ifdef NDEBUG
  SUCCEED("assertions are compiled out in this build");
#else
  {
    EventLoop before;
    before.add_timer(Clock::now() + 1h, [] {});  // before start(): allowed
    before.start({});
    before.shutdown();
    before.add_timer(Clock::now() + 1h, [] {});  // after shutdown(): allowed
  }
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::signal(SIGABRT, SIG_DFL);
    EventLoop loop;
    loop.start({});
    loop.call([] { return 0; });               // the loop thread runs
    loop.add_timer(Clock::now() + 1h, [] {});  // from this (non-loop) thread: must abort
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  if (WIFSIGNALED(status)) CHECK(WTERMSIG(status) == SIGABRT);
#endif
}
