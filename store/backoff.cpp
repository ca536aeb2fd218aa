// backoff.cpp: Backoff implementations.
#include "store/backoff.h"

#include <algorithm>
#include <stdexcept>
#include <thread>

namespace ddprun::store {

Backoff::Duration Backoff::sleep_backoff(Duration max) {
  Duration delay = std::min(next_backoff(), max);
  if (delay <= Duration::zero()) return Duration::zero();
  if (sleep_) {
    sleep_(delay);
  } else {
    std::this_thread::sleep_for(delay);
  }
  return delay;
}

ExponentialBackoffWithJitter::ExponentialBackoffWithJitter(Options options,
                                                           std::function<double()> uniform01)
    : options_(options),
      uniform01_(std::move(uniform01)),
      current_ms_(static_cast<double>(options.initial_interval.count())),
      rng_(std::random_device{}()) {
  if (options_.initial_interval <= Duration::zero() || options_.multiplier < 1.0 ||
      options_.randomization_factor < 0.0 || options_.randomization_factor > 1.0 ||
      options_.max_interval < options_.initial_interval) {
    throw std::invalid_argument(
        "ExponentialBackoffWithJitter: need initial > 0, multiplier >= 1, "
        "randomization in [0, 1], max >= initial");
  }
  if (!uniform01_) {
    uniform01_ = [this] { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); };
  }
}

Backoff::Duration ExponentialBackoffWithJitter::next_backoff() {
  double spread = current_ms_ * options_.randomization_factor;
  double delay = current_ms_ - spread + uniform01_() * 2.0 * spread;
  current_ms_ = std::min(current_ms_ * options_.multiplier,
                         static_cast<double>(options_.max_interval.count()));
  return Duration(static_cast<Duration::rep>(delay));
}

void ExponentialBackoffWithJitter::reset() {
  current_ms_ = static_cast<double>(options_.initial_interval.count());
}

}  // namespace ddprun::store
