// backoff.h: delays between retries (connecting to a store, polling). Exponential with
// jitter spreads the reconnects of thousands of workers after a store restart; fixed is
// for polls. The random source and the sleep are injectable so tests need no real time.
// Thread-safety: one instance per retry loop (not shared).
#pragma once

#include <chrono>
#include <functional>
#include <random>

namespace ddprun::store {

class Backoff {
 public:
  using Duration = std::chrono::milliseconds;
  using SleepFn = std::function<void(Duration)>;

  Backoff() = default;
  Backoff(const Backoff&) = delete;
  Backoff& operator=(const Backoff&) = delete;
  virtual ~Backoff() = default;
  // The delay before the next retry.
  virtual Duration next_backoff() = 0;
  // Back to the first delay (after a success).
  virtual void reset() = 0;
  // Sleeps next_backoff(), capped at `max` (e.g. the time left before a deadline), and
  // returns what it slept. Uses the injected sleep (std::this_thread::sleep_for by default).
  Duration sleep_backoff(Duration max = Duration::max());
  void set_sleep(SleepFn sleep) { sleep_ = std::move(sleep); }

 private:
  SleepFn sleep_;
};

struct ExponentialBackoffOptions {
  std::chrono::milliseconds initial_interval{100};
  double randomization_factor = 0.5;
  double multiplier = 1.5;
  std::chrono::milliseconds max_interval{5000};
};

// interval = initial * multiplier^n, capped at `max_interval`; each delay is drawn
// uniformly from interval * [1 - randomization, 1 + randomization].
class ExponentialBackoffWithJitter final : public Backoff {
 public:
  using Options = ExponentialBackoffOptions;
  // `uniform01` returns a number in [0, 1); default: a randomly seeded generator.
  explicit ExponentialBackoffWithJitter(Options options = {},
                                        std::function<double()> uniform01 = {});
  Duration next_backoff() override;
  void reset() override;

 private:
  Options options_;
  std::function<double()> uniform01_;
  double current_ms_;
  std::mt19937_64 rng_;
};

class FixedBackoff final : public Backoff {
 public:
  explicit FixedBackoff(Duration interval) : interval_(interval) {}
  Duration next_backoff() override { return interval_; }
  void reset() override {}

 private:
  Duration interval_;
};

}  // namespace ddprun::store
