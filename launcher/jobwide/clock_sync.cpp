// clock_sync.cpp: ClockSync (clock_sync.h).
#include "launcher/jobwide/clock_sync.h"

#include <fmt/format.h>

#include <string>

#include "base/text.h"

namespace ddprun::launcher {
namespace {

std::string ready_key(int stamp) { return fmt::format("clock/{}/ready", stamp); }
std::string stamp_key(int stamp) { return fmt::format("clock/{}/t", stamp); }

}  // namespace

ClockSync::ClockSync(rdzv::JobBoard& board, std::function<std::int64_t()> wall_ns,
                     Clock::time_point now)
    : board_(board), wall_ns_(std::move(wall_ns)) {
  begin(1, now);
}

void ClockSync::begin(int stamp, Clock::time_point now) {
  stamp_ = stamp;
  asked_ = false;
  deadline_ = now + (board_.node() == 0 ? kReadyWait : kStampWait);
  next_ = now;
}

void ClockSync::poll(Clock::time_point now) {
  if (done_ || now < next_) return;
  next_ = now + kPoll;
  if (board_.node() == 0) {
    // Once every other node waits (or the wait is over), one stamp of this clock.
    if (board_.add(ready_key(stamp_), 0) < board_.nodes() - 1 && now < deadline_) return;
    board_.set(stamp_key(stamp_), std::to_string(wall_ns_()));
    if (stamp_ == 1) return begin(2, now);
    return finish(Offset{0, 0});
  }
  if (!asked_) {
    asked_ = true;
    stamp_after_ns_ = wall_ns_();
    board_.add(ready_key(stamp_), 1);
    return;
  }
  const std::int64_t before = wall_ns_();
  const auto value = board_.get({stamp_key(stamp_)}, std::chrono::milliseconds(0)).front();
  if (!value) {
    // Not there when this read reached the board: the stamp is set after `before`.
    stamp_after_ns_ = before;
    if (now >= deadline_) finish(first_);
    return;
  }
  const std::int64_t read = wall_ns_();
  const auto t0 = parse_int<std::int64_t>(*value);
  if (!t0) return finish(first_);
  const Offset measured{*t0 - (stamp_after_ns_ + read) / 2, (read - stamp_after_ns_) / 2};
  if (stamp_ == 1) {
    first_ = measured;
    return begin(2, now);
  }
  finish(measured.second <= first_->second ? measured : *first_);
}

void ClockSync::finish(std::optional<Offset> measured) {
  done_ = true;
  offset_ = measured ? measured : Offset{0, -1};
}

}  // namespace ddprun::launcher
