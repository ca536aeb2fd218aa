// EventLoop's timers (add_timer/cancel_timer): order, cancelling, a timer that re-arms
// itself, and timers added from another thread through call(). Real loop thread.
#include "launcher/process/event_loop.h"

#include <catch2/catch.hpp>
#include <chrono>
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
