// TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT (dstate_watch.h) on a real process in D state:
// a vfork() parent waits for its child in uninterruptible (killable) sleep.
#include "launcher/dstate_watch.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <thread>

using namespace ddprun::launcher;
using namespace std::chrono_literals;

TEST_CASE("the timeout is read as torchrun 2.14 reads it", "[dstate_watch]") {
  using Env = std::map<std::string, std::string>;
  CHECK_FALSE(uninterruptible_state_timeout({}));
  for (const char* off : {"", "0", "-3", "abc", "2s", "nan"}) {
    CAPTURE(off);
    CHECK_FALSE(
        uninterruptible_state_timeout(Env{{"TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT", off}}));
  }
  CHECK(uninterruptible_state_timeout(Env{{"TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT", "2.5"}}) ==
        2.5);
  CHECK(uninterruptible_state_timeout(Env{{"TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT", " 7 "}}) ==
        7.0);
}

TEST_CASE("a worker in D state past the timeout is reported, others are not", "[dstate_watch]") {
  CHECK(process_state(::getpid()) == 'R');
  CHECK_FALSE(process_state(999999999));
  const pid_t wedged = ::fork();
  REQUIRE(wedged >= 0);
  if (wedged == 0) {
    // The vfork parent sleeps in D state until its child exits (10 s at most).
    if (::vfork() == 0) {
      ::sleep(10);
      ::_exit(0);
    }
    ::_exit(0);
  }
  const pid_t sleeper = ::fork();
  REQUIRE(sleeper >= 0);
  if (sleeper == 0) {
    ::pause();
    ::_exit(0);
  }
  for (int i = 0; i < 200 && process_state(wedged) != 'D'; ++i) std::this_thread::sleep_for(10ms);
  REQUIRE(process_state(wedged) == 'D');
  DStateWatch watch(2.0);
  const auto t0 = DStateWatch::Clock::now();
  CHECK(watch.check({wedged, sleeper}, t0).empty());  // first seen now
  CHECK(watch.check({wedged, sleeper}, t0 + 1s).empty());
  const auto stuck = watch.check({wedged, sleeper}, t0 + 2500ms);
  REQUIRE(stuck.size() == 1);
  CHECK(stuck[0].pid == wedged);
  CHECK(stuck[0].seconds == Approx(2.5));
  ::kill(wedged, SIGKILL);  // a killable D state: SIGKILL ends it
  ::kill(sleeper, SIGKILL);
  ::waitpid(wedged, nullptr, 0);
  ::waitpid(sleeper, nullptr, 0);
  // Gone: forgotten, so a new pid with that number would start over.
  CHECK(watch.check({wedged}, t0 + 3s).empty());
}
