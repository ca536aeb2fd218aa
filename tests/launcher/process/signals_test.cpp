// Signal names <-> numbers (--signals-to-handle) and the 128+n mapping.
#include "launcher/process/signals.h"

#include <catch2/catch.hpp>
#include <csignal>
#include <stdexcept>

using namespace ddprun::launcher;

TEST_CASE("signal_from_name accepts torchrun spellings and numbers", "[signals]") {
  CHECK(signal_from_name("SIGTERM") == SIGTERM);
  CHECK(signal_from_name("TERM") == SIGTERM);
  CHECK(signal_from_name("sigint") == SIGINT);
  CHECK(signal_from_name(" SIGUSR1 ") == SIGUSR1);
  CHECK(signal_from_name("15") == 15);
  CHECK(signal_from_name("SIGCHLD") == SIGCHLD);
  CHECK(signal_from_name("SIGCLD") == SIGCHLD);
  for (const char* bad : {"", "SIGFOO", "FOO", "0", "65", "999", "-1", "SIG", "15x"}) {
    INFO(bad);
    CHECK_THROWS_AS(signal_from_name(bad), std::invalid_argument);
  }
  CHECK_THROWS_WITH(signal_from_name("SIGFOO"), "unknown signal 'SIGFOO'");
}

TEST_CASE("parse_signal_list splits on commas and drops duplicates", "[signals]") {
  CHECK(parse_signal_list("SIGTERM,SIGINT, SIGHUP,SIGQUIT") ==
        std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT});
  CHECK(parse_signal_list("SIGUSR1,USR1,10") == std::vector<int>{SIGUSR1});
  CHECK_THROWS_WITH(parse_signal_list("SIGTERM,,SIGINT"), "unknown signal ''");
  CHECK_THROWS_WITH(parse_signal_list("SIGTERM,SIGNOPE"), "unknown signal 'SIGNOPE'");
  CHECK_THROWS_WITH(parse_signal_list("SIGTERM,9"), "SIGKILL cannot be handled");
  CHECK_THROWS_WITH(parse_signal_list("STOP"), "SIGSTOP cannot be handled");
  std::vector<std::string> unknown;
  CHECK(parse_signal_list("SIGTERM,,SIGNOPE,USR1", &unknown) == std::vector<int>{SIGTERM, SIGUSR1});
  CHECK(unknown == std::vector<std::string>{"unknown signal ''", "unknown signal 'SIGNOPE'"});
  CHECK_THROWS_WITH(parse_signal_list("SIGNOPE,9", &unknown), "SIGKILL cannot be handled");
}

TEST_CASE("signal_name and exit codes", "[signals]") {
  CHECK(signal_name(SIGTERM) == "SIGTERM");
  CHECK(signal_name(SIGKILL) == "SIGKILL");
  CHECK(signal_name(SIGABRT) == "SIGABRT");
  CHECK(signal_name(SIGCHLD) == "SIGCHLD");
  CHECK(signal_name(SIGRTMIN + 2) == "SIGRTMIN+2");
  for (int s = 1; s < 32; ++s) {
    if (s == 32 || s == 33) continue;
    CHECK(signal_from_name(signal_name(s)) == s);
  }
  CHECK(exit_code_for_signal(SIGKILL) == 137);
  CHECK(exit_code_for_signal(SIGTERM) == 143);
}
