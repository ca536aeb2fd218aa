// liveness.h: Liveness, one observer's verdict on the heartbeats of a round's members
// (keys.h: r<r>/hb/<slot>, a counter or "left" / "done"): dead after `threshold` of
// observed time without a beat; time the observer could not look is held against no one.
// Used by StoreRendezvous (heartbeat thread, joiner, exit barrier); table tests in
// tests/rendezvous/c10d/liveness_test.cpp. Thread-safety: none; the owner serializes.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddprun::rdzv {

enum class Member { kAlive, kLeft, kDone, kDead };

class Liveness {
 public:
  using Clock = std::chrono::steady_clock;
  using Ms = std::chrono::milliseconds;

  // threshold: unchanged this long while observed: dead. max_gap: more time than this
  // between two looks means the observer was blind for the rest.
  Liveness(Ms threshold, Ms max_gap) : threshold_(threshold), max_gap_(max_gap) {}

  // One look at round `round`: `values` (one per slot) were requested at `asked`, so
  // they are at least that fresh. A new round (or member count) starts the clocks
  // afresh. Looks of two threads may interleave (`asked` need not grow).
  std::vector<Member> observe(int round, const std::vector<std::string>& values,
                              Clock::time_point asked);

  Ms threshold() const { return threshold_; }

 private:
  Ms threshold_;
  Ms max_gap_;
  int round_ = -1;
  std::optional<Clock::time_point> last_look_;
  // Per slot: the value last seen and when it was last seen changing (observed time).
  std::vector<std::pair<std::string, Clock::time_point>> last_;
};

}  // namespace ddprun::rdzv
