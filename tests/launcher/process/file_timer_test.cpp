// file_timer_test.cpp: torch's file timer, server side: the request parser (table), the
// timer table's per-pid rules, and FileTimerServer on a real named pipe in a real
// ProcessSupervisor whose real workers write requests to it as torch's client does
// (open O_WRONLY|O_NONBLOCK, one line, close). The real FileTimerClient of PyTorch 1.13
// and 2.6 is driven by tests/integration (file_timer_kills_expired_scope).
#include "launcher/process/file_timer.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <string>

#include "tests/launcher/process/supervisor_harness.h"

namespace ddprun::launcher::test {
namespace {

using Kind = SupervisorEvent::Kind;

TimerRequest req(pid_t pid, const std::string& scope, double exp, int sig) {
  TimerRequest r;
  r.pid = pid;
  r.scope_id = scope;
  r.expiration_time = exp;
  r.signal = sig;
  return r;
}

}  // namespace

TEST_CASE("file timer: parse_timer_request", "[file_timer]") {
  struct Row {
    const char* line;
    bool ok;
    const char* why;
  };
  const Row rows[] = {
      // What the 1.13 and 2.6 clients write (json.dumps of their dict).
      {R"({"version": 1, "pid": 42, "scope_id": "a.py#7", "expiration_time": 1700000000.25, "signal": 9})",
       true, ""},
      {R"({"version": 1, "pid": 42, "scope_id": "s", "expiration_time": -1, "signal": 0})", true,
       ""},
      {R"({"pid": 42, "scope_id": "s", "expiration_time": 5, "signal": -3, "extra": [1]})", true,
       ""},
      {"not json", false, "not JSON"},
      {"[1, 2]", false, "not a JSON object"},
      {R"({"pid": "42", "scope_id": "s", "expiration_time": 5, "signal": 9})", false, "'pid'"},
      {R"({"pid": 0, "scope_id": "s", "expiration_time": 5, "signal": 9})", false, "'pid'"},
      {R"({"pid": 99999999999, "scope_id": "s", "expiration_time": 5, "signal": 9})", false,
       "'pid'"},
      {R"({"pid": 4, "expiration_time": 5, "signal": 9})", false, "'scope_id'"},
      {R"({"pid": 4, "scope_id": 3, "expiration_time": 5, "signal": 9})", false, "'scope_id'"},
      {R"({"pid": 4, "scope_id": "s", "expiration_time": "5", "signal": 9})", false,
       "'expiration_time'"},
      {R"({"pid": 4, "scope_id": "s", "expiration_time": 5})", false, "'signal'"},
      {R"({"pid": 4, "scope_id": "s", "expiration_time": 5, "signal": 1.5})", false, "'signal'"},
      {R"({"pid": 4, "scope_id": "s", "expiration_time": 5, "signal": 9)", false, "not JSON"},
  };
  for (const Row& r : rows) {
    INFO(r.line);
    std::string why;
    const auto got = parse_timer_request(r.line, &why);
    CHECK(got.has_value() == r.ok);
    if (!r.ok) CHECK(why.find(r.why) != std::string::npos);
  }
  std::string why;
  const auto a = parse_timer_request(rows[0].line, &why);
  REQUIRE(a);
  CHECK(a->pid == 42);
  CHECK(a->scope_id == "a.py#7");
  CHECK(a->expiration_time == 1700000000.25);
  CHECK(a->signal == 9);
  CHECK(!a->release());
  CHECK(parse_timer_request(rows[1].line, &why)->release());
  CHECK(parse_timer_request(rows[2].line, &why)->signal == 0);  // "no signal"
}

TEST_CASE("file timer: the table's per-pid rules", "[file_timer]") {
  TimerTable t;
  CHECK(!t.next_expiration());
  // Same scope name in two pids: two timers; releasing one leaves the other.
  t.apply(req(10, "step", 100, SIGKILL));
  t.apply(req(11, "step", 100, SIGTERM));
  t.apply(req(10, "step", -1, 0));
  CHECK(t.size() == 1);
  // A new acquire of a key replaces it.
  t.apply(req(11, "step", 50, SIGTERM));
  CHECK(*t.next_expiration() == 50);
  // Pid 12: an expired timer without a signal, then a later one with one: the signal of
  // the earliest expired timer that has one; all of its timers go, expired or not.
  t.apply(req(12, "a", 20, 0));
  t.apply(req(12, "b", 30, SIGUSR1));
  t.apply(req(12, "c", 40, SIGKILL));
  t.apply(req(12, "later", 1000, SIGKILL));
  // Pid 13: expired, no signal anywhere.
  t.apply(req(13, "quiet", 10, 0));
  CHECK(t.take_expired(5).empty());
  const auto expired = t.take_expired(45);
  REQUIRE(expired.size() == 2);
  CHECK(expired[0].pid == 12);
  CHECK(expired[0].signal == SIGUSR1);
  CHECK(expired[0].scope_id == "b");
  CHECK(expired[0].scopes == std::vector<std::string>{"a", "b", "c"});
  CHECK(expired[1].pid == 13);
  CHECK(expired[1].signal == 0);
  CHECK(t.pids() == std::vector<pid_t>{11});
  // expiration_time == now counts as expired (torch: <= deadline).
  const auto at50 = t.take_expired(50);
  REQUIRE(at50.size() == 1);
  CHECK(at50[0].signal == SIGTERM);
  CHECK(t.size() == 0);
  // Releasing what was never acquired is a no-op.
  t.apply(req(14, "x", -1, 0));
  CHECK(t.size() == 0);
}

TEST_CASE("file timer: the server signals an expired worker and survives bad input",
          "[file_timer]") {
  TempDir dir;
  const std::string pipe = dir.str() + "/timer";
  {
    std::ofstream(pipe) << "stale";  // torch's server replaces what is there
  }
  agent_signal_setup();
  PipeCapture out, err;
  SupervisorOptions o;
  o.console_stdout_fd = out.fd();
  o.console_stderr_fd = err.fd();
  o.file_timer_path = pipe;
  auto sup = std::make_unique<ProcessSupervisor>(o);
  struct stat st {};
  REQUIRE(::stat(pipe.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));

  // A client's send: one line written to the pipe (the server always holds it open).
  const std::string gate = dir.str() + "/garbage_sent";
  const std::string send = "send() { printf '%s\\n' \"$1\" > " + pipe + "; }; ";
  const auto request = [](const std::string& expiry, int sig) {
    return R"({"version": 1, "pid": '$$', "scope_id": "s", "expiration_time": )" + expiry +
           R"(, "signal": )" + std::to_string(sig) + "}";
  };
  const std::string in_2s = request(R"x('"$(($(date +%s)+2))"')x", SIGKILL);
  const std::string in_1s = request(R"x('"$(($(date +%s)+1))"')x", SIGTERM);
  const std::string release = request("-1", 0);
  // Rank 0: garbage, an oversized line, then a scope it releases at once, then waits.
  // Rank 1 (after the garbage: a line over PIPE_BUF is not one atomic write): a scope of
  // the same name that expires within a second, with SIGTERM, then sleeps.
  const std::string big(6000, 'x');
  sup->start({sh(0, send + "send 'nonsense'; send '" + big + "'; touch " + gate + "; send '" +
                        in_2s + "'; send '" + release + "'; echo released; sleep 60"),
              sh(1, send + "while [ ! -e " + gate + " ]; do sleep 0.05; done; send '" + in_1s +
                        "'; echo acquired; sleep 60")});
  const SupervisorEvent ev = sup->next_event(30s);
  REQUIRE(ev.kind == Kind::kWorkerExited);
  CHECK(ev.exit.local_rank == 1);
  CHECK(ev.exit.signal == SIGTERM);
  CHECK(ev.exit.note == "file timer: scope 's' expired; sent SIGTERM by ddprun");
  CHECK(eventually([&] { return out.text().find("released") != std::string::npos; }));
  // Rank 0 released its scope of the same name: past its expiry it is still running.
  CHECK(sup->next_event(3s).kind == Kind::kTimeout);
  CHECK(sup->live_pids().size() == 1);
  CHECK(sup->stop(SIGTERM, 1s).size() == 1);
  sup.reset();
  CHECK(::stat(pipe.c_str(), &st) != 0);  // removed
}

}  // namespace ddprun::launcher::test
