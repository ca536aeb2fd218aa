// run_capture_test.cpp: run_capture (launcher/process/run_capture.h) with real helper
// processes: output, exit status, a missing program, a replaced environment, and a helper
// that outlives its timeout, whose whole process group is gone when the call returns.
#include "launcher/process/run_capture.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "tests/launcher/process/process_test_util.h"

namespace ddprun::launcher {
namespace {

using namespace std::chrono_literals;

TEST_CASE("run_capture: a helper's stdout when it exits 0, nothing otherwise", "[capture]") {
  CHECK(run_capture({"/bin/sh", "-c", "echo hello; echo ignored >&2"}, std::nullopt, 10s) ==
        "hello\n");
  CHECK_FALSE(run_capture({"/bin/sh", "-c", "echo partial; exit 3"}, std::nullopt, 10s));
  CHECK_FALSE(run_capture({"/bin/sh", "-c", "kill -9 $$"}, std::nullopt, 10s));
  CHECK_FALSE(run_capture({"ddprun-no-such-program-here"}, std::nullopt, 10s));
  CHECK_FALSE(run_capture({}, std::nullopt, 10s));
  // At most max_bytes are kept; the rest is read and dropped, so the helper is not blocked.
  CHECK(run_capture({"/bin/sh", "-c", "head -c 100000 /dev/zero | tr '\\0' x"}, std::nullopt, 10s,
                    10) == std::string(10, 'x'));
}

TEST_CASE("run_capture: the environment given replaces this process's", "[capture]") {
  CHECK(run_capture({"/bin/sh", "-c", "echo \"$DDPRUN_CAPTURE_X:$HOME\""},
                    std::vector<std::string>{"DDPRUN_CAPTURE_X=1"}, 10s) == "1:\n");
}

TEST_CASE("run_capture: a helper past its timeout is killed with everything it started",
          "[capture]") {
  test::TempDir dir;
  const std::string pids = dir.str() + "/pids";
  // A helper that starts a background child, closes its stdout (so EOF is no sign of its
  // end) and goes on.
  const auto started = std::chrono::steady_clock::now();
  CHECK_FALSE(run_capture(
      {"/bin/sh", "-c", "sleep 60 & echo $$ $! > '" + pids + "'; exec >/dev/null; sleep 60"},
      std::nullopt, 500ms));
  CHECK(std::chrono::steady_clock::now() - started < 5s);
  const std::string text = test::slurp(pids);
  REQUIRE_FALSE(text.empty());
  pid_t helper = 0;
  pid_t child = 0;
  REQUIRE(std::sscanf(text.c_str(), "%d %d", &helper, &child) == 2);
  CHECK_FALSE(test::alive(helper));  // reaped by run_capture
  // The background child was in the helper's group: killed too (reaped by init).
  CHECK(test::eventually([&] { return !test::alive(child); }, 5s));
}

}  // namespace
}  // namespace ddprun::launcher
