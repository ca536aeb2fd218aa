// backoff_test.cpp: backoff sequences with an injected random source and sleep.
#include "store/backoff.h"

#include <catch2/catch.hpp>
#include <vector>

namespace ddprun::store {
namespace {

using namespace std::chrono_literals;

ExponentialBackoffOptions options(Backoff::Duration initial, double randomization,
                                  double multiplier, Backoff::Duration max) {
  ExponentialBackoffOptions o;
  o.initial_interval = initial;
  o.randomization_factor = randomization;
  o.multiplier = multiplier;
  o.max_interval = max;
  return o;
}

TEST_CASE("ExponentialBackoffWithJitter grows, caps and resets", "[backoff]") {
  ExponentialBackoffWithJitter b(options(100ms, 0.5, 2.0, 500ms),
                                 [] { return 0.5; });  // the middle: no jitter
  CHECK(b.next_backoff() == 100ms);
  CHECK(b.next_backoff() == 200ms);
  CHECK(b.next_backoff() == 400ms);
  CHECK(b.next_backoff() == 500ms);
  CHECK(b.next_backoff() == 500ms);
  b.reset();
  CHECK(b.next_backoff() == 100ms);
}

TEST_CASE("ExponentialBackoffWithJitter spreads delays by the randomization factor", "[backoff]") {
  double r = 0.0;
  ExponentialBackoffWithJitter b(options(100ms, 0.5, 1.0, 100ms), [&] { return r; });
  CHECK(b.next_backoff() == 50ms);
  r = 0.999;
  CHECK(b.next_backoff() >= 149ms);
  ExponentialBackoffWithJitter real;  // default random source stays within bounds
  for (int i = 0; i < 100; ++i) {
    auto d = real.next_backoff();
    CHECK(d >= 0ms);
    CHECK(d <= 7500ms);
  }
  CHECK_THROWS_AS(ExponentialBackoffWithJitter(options(0ms, 0.5, 1.5, 1s)), std::invalid_argument);
  CHECK_THROWS_AS(ExponentialBackoffWithJitter(options(1ms, 0.5, 0.5, 1s)), std::invalid_argument);
}

TEST_CASE("Backoff::sleep_backoff uses the injected sleep and the cap", "[backoff]") {
  std::vector<Backoff::Duration> slept;
  FixedBackoff b(250ms);
  b.set_sleep([&](Backoff::Duration d) { slept.push_back(d); });
  CHECK(b.sleep_backoff() == 250ms);
  CHECK(b.sleep_backoff(100ms) == 100ms);
  CHECK(b.sleep_backoff(0ms) == 0ms);
  CHECK(slept == std::vector<Backoff::Duration>{250ms, 100ms});
}

}  // namespace
}  // namespace ddprun::store
