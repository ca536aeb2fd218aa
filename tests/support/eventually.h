// eventually.h: the one poll-until-true of the C++ test suites: `eventually(pred, limit)`
// calls `pred` every few milliseconds until it holds or `limit` passes, so a test waits
// for an observable state instead of sleeping a guessed time. Used by every suite that
// waits for another thread or process. Thread-safety: `pred` runs on the calling thread.
#pragma once

#include <chrono>
#include <thread>

namespace ddprun::test {

// True as soon as `pred()` holds; false if it still does not after `limit` (checked once
// more at the deadline, so a slow last poll is not a false failure). The default limit
// is generous: a 2-core CI machine under a sanitizer can be 10x slower than a laptop.
template <class Pred>
bool eventually(Pred&& pred, std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return static_cast<bool>(pred());
}

}  // namespace ddprun::test
