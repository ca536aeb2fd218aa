// liveness.cpp: Liveness (liveness.h), the heartbeat verdict per member, not counting
// the observer's blind time.
#include "rendezvous/c10d/liveness.h"

#include <algorithm>

#include "rendezvous/c10d/keys.h"

namespace ddprun::rdzv {

std::vector<Member> Liveness::observe(int round, const std::vector<std::string>& values,
                                      Clock::time_point asked) {
  // A heartbeat that did not move while this observer could not look proves nothing:
  // the store was frozen (its host stopped: nobody could beat) or this thread was (the
  // peers' beats are then all in at once, or not yet). So the time between two looks
  // counts for at most max_gap: the clocks skip the rest; and after a whole threshold
  // without a look they start afresh. (Steadily slow looks still add up, so a dead node
  // is found however loaded the observer is, only later.)
  const auto gap = last_look_ ? asked - *last_look_ : Clock::duration{0};
  last_look_ = std::max(asked, last_look_.value_or(asked));  // two threads' looks interleave
  if (round_ != round || last_.size() != values.size()) {
    round_ = round;
    last_.assign(values.size(), {std::string("\x01"), asked});
  } else if (gap >= threshold_) {
    for (auto& l : last_) l.second = asked;
  } else if (gap > max_gap_) {
    for (auto& l : last_) l.second = std::min(asked, l.second + (gap - max_gap_));
  }
  std::vector<Member> out(values.size(), Member::kAlive);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i] == keys::kLeft) {
      out[i] = Member::kLeft;
    } else if (values[i] == keys::kDone) {
      out[i] = Member::kDone;
    } else if (values[i] != last_[i].first) {
      last_[i] = {values[i], asked};
    } else if (asked - last_[i].second >= threshold_) {
      out[i] = Member::kDead;
    }
  }
  return out;
}

}  // namespace ddprun::rdzv
