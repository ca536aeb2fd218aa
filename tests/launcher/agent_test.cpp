// The Agent's state machine with the real single-node rendezvous from the registry and,
// for worker supervision, the in-process ThreadSupervisor (thread_supervisor.h): workers
// are C++ programs on threads, steered directly, so no test waits on shells or sleeps.
// One test runs the Agent on the real ProcessSupervisor with `sh` workers (main's
// wiring); the real process supervision is tested in tests/launcher/process. Two
// transitions a one-node rendezvous never takes (a membership change, a rendezvous
// error) are driven by a thin handler that delegates to the real one.
#include "launcher/agent.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "launcher/process/signals.h"
#include "launcher/process/supervisor.h"
#include "rendezvous/registry.h"
#include "tests/launcher/thread_supervisor.h"
#include "tests/support/temp_dir.h"

using namespace ddprun::launcher;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

using ddprun::test::slurp;
using ddprun::test::TempDir;
using test::ThreadSupervisor;

// `sh -c <script>` workers; the script sees torchrun's environment.
LaunchConfig sh_job(int nproc, const std::string& script, const TempDir& dir) {
  LaunchConfig c;
  c.nproc_per_node = nproc;
  c.entry = EntryKind::kExecutable;
  c.training_script = "sh";
  c.script_args = {"-c", script};
  c.log_dir = (dir.path / "logs").string();
  c.shutdown_timeout_s = 5;
  return c;
}

// In-process workers: ThreadSupervisor's program "program" runs as every local rank.
LaunchConfig program_job(int nproc, const TempDir& dir) {
  LaunchConfig c;
  c.nproc_per_node = nproc;
  c.entry = EntryKind::kExecutable;
  c.training_script = "program";
  c.log_dir = (dir.path / "logs").string();
  c.shutdown_timeout_s = 5;
  return c;
}

EnvMap base_env() { return {{"PATH", "/usr/bin:/bin"}}; }

SupervisorOptions options() {
  const std::vector<int> handled = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
  prepare_agent_signals(handled);  // before the supervisor's thread starts
  SupervisorOptions o;
  o.handled_signals = handled;
  return o;
}

std::unique_ptr<ddprun::rdzv::RendezvousHandler> local_handler(const LaunchConfig& c) {
  return ddprun::rdzv::make_rendezvous_handler(make_rendezvous_params(c, {}));
}

// Delegates to the real handler; can ask for one new round, fail a rendezvous, or block
// a rendezvous or the exit barrier until interrupt() (as a multi-node one waits).
class Steered : public ddprun::rdzv::RendezvousHandler {
 public:
  explicit Steered(std::unique_ptr<ddprun::rdzv::RendezvousHandler> real)
      : real_(std::move(real)) {}
  ddprun::rdzv::RendezvousInfo next_rendezvous() override {
    ++rounds;
    if (fail_at_round == rounds) throw ddprun::rdzv::RendezvousTimeoutError("test: no peers");
    if (block_rendezvous && !block_until_interrupted("rendezvous")) {
      throw ddprun::rdzv::RendezvousInterruptedError("test: interrupted");
    }
    ddprun::rdzv::RendezvousInfo info = real_->next_rendezvous();
    // A peer's count, as a multi-node handler reports the round's most.
    if (rounds == peer_restarts_at_round) info.restart_count = peer_restarts;
    return info;
  }
  void set_restarts_spent(int restarts) override { published.push_back(restarts); }
  int num_nodes_waiting() override { return 0; }
  bool needs_new_round() override {
    if (!want_new_round || asked) return false;
    asked = true;
    return true;
  }
  bool is_closed() override { return closed_by_peer || real_->is_closed(); }
  void set_closed() override {
    closed = true;
    real_->set_closed();
  }
  bool exit_barrier(std::chrono::milliseconds t) override {
    if (block_exit_barrier) return block_until_interrupted("exit barrier");
    return real_->exit_barrier(t);
  }
  std::string run_id() const override { return real_->run_id(); }
  std::string backend_name() const override { return real_->backend_name(); }
  void shutdown() override {
    shut_down = true;
    real_->shutdown();
  }
  void interrupt() override {
    std::lock_guard lock(mu);
    interrupted = true;
    cv.notify_all();
  }

  // Blocks (at most 60 s, so that an Agent that never interrupts fails the test instead
  // of hanging it) until interrupt(); `raise_on_block` is raised once blocked. Returns
  // false when interrupted.
  bool block_until_interrupted(const std::string& what) {
    std::unique_lock lock(mu);
    blocked_in = what;
    if (raise_on_block) raise_on_block();
    return !cv.wait_for(lock, 60s, [&] { return interrupted; });
  }

  int rounds = 0;
  int fail_at_round = 0;
  int peer_restarts_at_round = 0;  // that round's RendezvousInfo::restart_count is ...
  int peer_restarts = 0;           // ... this (0: the real handler's)
  std::vector<int> published;      // set_restarts_spent() before each round
  bool block_rendezvous = false;
  bool block_exit_barrier = false;
  std::function<void()> raise_on_block;
  std::mutex mu;
  std::condition_variable cv;
  bool interrupted = false;                 // guarded by mu
  std::string blocked_in;                   // guarded by mu
  std::atomic<bool> want_new_round{false};  // set by a worker; asked for once
  std::atomic<bool> closed_by_peer{false};  // a peer's agent ended the job (set_closed)
  bool asked = false;
  bool closed = false;
  bool shut_down = false;

 private:
  std::unique_ptr<ddprun::rdzv::RendezvousHandler> real_;
};

}  // namespace

TEST_CASE("agent: success on the real supervisor, torchrun's environment in `sh` workers",
          "[agent]") {
  TempDir dir;
  const std::string out = (dir.path / "env").string();
  LaunchConfig c = sh_job(2, "echo $RANK/$WORLD_SIZE/$MASTER_PORT >> " + out, dir);
  ProcessSupervisor sup(options());
  Agent agent(c, base_env(), sup, local_handler(c));
  const RunResult r = agent.run();
  CHECK(r.outcome == RunResult::Outcome::kSucceeded);
  CHECK(r.exit_code == 0);
  const std::string text = slurp(out);
  CHECK(text.find("0/2/") != std::string::npos);
  CHECK(text.find("1/2/") != std::string::npos);
  CHECK(fs::path(agent.run_log_dir()).parent_path() == dir.path / "logs");
}

TEST_CASE("agent: failures restart within the budget, then report", "[agent]") {
  TempDir dir;
  LaunchConfig c = program_job(2, dir);
  c.max_restarts = 2;
  // Rank 1 fails on every attempt; rank 0 would run on and is stopped.
  std::mutex mu;
  std::multiset<std::string> counts;
  ThreadSupervisor sup;
  sup.install("program", [&](ThreadSupervisor::Worker& w) {
    {
      std::lock_guard lock(mu);
      counts.insert(w.env("TORCHELASTIC_RESTART_COUNT"));
    }
    if (w.env("RANK") == "1") return 4;
    return -w.wait_for_stop();
  });
  Agent agent(c, base_env(), sup, local_handler(c));
  const RunResult r = agent.run();
  CHECK(r.outcome == RunResult::Outcome::kFailed);
  CHECK(r.exit_code == 1);
  CHECK(r.restart_count == 2);
  // The failed worker first, then (torchrun 2.x) rank 0, which the agent stopped.
  REQUIRE(r.failures.size() == 2);
  CHECK(r.failures[0].global_rank == 1);
  CHECK(r.failures[0].exitcode == 4);
  CHECK(r.failures[1].global_rank == 0);
  CHECK(r.failures[1].exitcode == -SIGTERM);
  CHECK(r.failures[root_cause_index(r.failures)].global_rank == 1);
  CHECK(counts == std::multiset<std::string>{"0", "0", "1", "1", "2", "2"});
  for (const char* a : {"attempt_0", "attempt_1", "attempt_2"}) {
    CHECK(fs::is_directory(fs::path(agent.run_log_dir()) / a / "1"));
  }
}

namespace {

// One worker whose first round asks the handler for a new round and then is stopped by
// the agent or, `first_round_fails`, exits 1; in the second round it exits 0. The run
// must succeed in two rounds without spending a restart (--max-restarts 0).
void check_new_round_spends_no_restart(bool first_round_fails) {
  TempDir dir;
  LaunchConfig c = program_job(1, dir);
  auto handler = std::make_unique<Steered>(local_handler(c));
  Steered* steered = handler.get();
  std::vector<std::string> counts;  // one worker at a time: no lock needed
  ThreadSupervisor sup;
  sup.install("program", [&](ThreadSupervisor::Worker& w) {
    counts.push_back(w.env("TORCHELASTIC_RESTART_COUNT"));
    if (counts.size() > 1) return 0;
    steered->want_new_round = true;
    return first_round_fails ? 1 : -w.wait_for_stop();
  });
  Agent agent(c, base_env(), sup, std::move(handler));
  const RunResult r = agent.run();
  CHECK(r.outcome == RunResult::Outcome::kSucceeded);
  CHECK(r.restart_count == 0);
  CHECK(steered->rounds == 2);
  CHECK(counts == std::vector<std::string>{"0", "0"});
}

}  // namespace

TEST_CASE("agent: a membership change restarts without spending a restart", "[agent]") {
  check_new_round_spends_no_restart(false);  // stopped by the agent
}

TEST_CASE("agent: a failure during a membership change spends no restart", "[agent]") {
  // As if a peer had already left for the new round and broke a collective.
  check_new_round_spends_no_restart(true);
}

namespace {

// One worker exits 3 just as a peer's agent ends the job (its own worker broke on this
// one's exit): the handler then says a new round is needed. `seen_closed`: the close is
// visible; else the peer's store is already gone, so the next rendezvous fails. Either
// way this node's failure is the job's, reported, not lost in a rendezvous error.
void check_failure_as_peer_ends_job(bool seen_closed) {
  TempDir dir;
  LaunchConfig c = program_job(1, dir);
  auto handler = std::make_unique<Steered>(local_handler(c));
  Steered* steered = handler.get();
  handler->fail_at_round = 2;
  ThreadSupervisor sup;
  sup.install("program", [&](ThreadSupervisor::Worker&) {
    steered->closed_by_peer = seen_closed;
    steered->want_new_round = true;
    return 3;
  });
  Agent agent(c, base_env(), sup, std::move(handler));
  const RunResult r = agent.run();
  CHECK(r.outcome == RunResult::Outcome::kFailed);
  CHECK(r.exit_code == 1);
  CHECK(steered->rounds == (seen_closed ? 1 : 2));
  REQUIRE(r.failures.size() == 1);
  CHECK(r.failures[0].exitcode == 3);
  CHECK(steered->closed);
}

}  // namespace

TEST_CASE("agent: a failure as a peer ends the job is reported - close seen", "[agent]") {
  check_failure_as_peer_ends_job(true);
}

TEST_CASE("agent: a failure as a peer ends the job is reported - its store already gone",
          "[agent]") {
  check_failure_as_peer_ends_job(false);
}

TEST_CASE("agent: the round's restart count is adopted, with the budget it leaves", "[agent]") {
  // Two nodes: a peer spent a restart on a real failure; this node only followed it into
  // the new round (no restart of its own). Both must tell the workers the same count
  // (1.13 workers put it into their store keys), and it counts restarts, not rounds.
  TempDir dir;
  LaunchConfig c = program_job(1, dir);
  c.max_restarts = 2;
  auto handler = std::make_unique<Steered>(local_handler(c));
  handler->peer_restarts_at_round = 2;
  handler->peer_restarts = 1;
  Steered* steered = handler.get();
  std::vector<std::string> counts;  // one worker at a time
  std::vector<std::string> error_files;
  ThreadSupervisor sup;
  sup.install("program", [&](ThreadSupervisor::Worker& w) {
    counts.push_back(w.env("TORCHELASTIC_RESTART_COUNT"));
    error_files.push_back(w.env("TORCHELASTIC_ERROR_FILE"));
    if (counts.size() == 1) {
      steered->want_new_round = true;  // the peer left for a new round
      return -w.wait_for_stop();
    }
    return 1;  // fails in every later attempt: the budget left is 2 - 1 = 1 restart
  });
  Agent agent(c, base_env(), sup, std::move(handler));
  const RunResult r = agent.run();
  CHECK(r.outcome == RunResult::Outcome::kFailed);
  CHECK(r.restart_count == 2);
  CHECK(steered->rounds == 3);
  CHECK(counts == std::vector<std::string>{"0", "1", "2"});
  CHECK(steered->published == std::vector<int>{0, 0, 2});
  REQUIRE(error_files.size() == 3);
  CHECK(error_files[1].find("/attempt_1/0/") != std::string::npos);
  CHECK(error_files[2].find("/attempt_2/0/") != std::string::npos);
}

TEST_CASE("agent: a rendezvous error fails the run with exit 1", "[agent]") {
  TempDir dir;
  LaunchConfig c = program_job(1, dir);
  auto handler = std::make_unique<Steered>(local_handler(c));
  handler->fail_at_round = 1;
  ThreadSupervisor sup;
  sup.install("program", [](ThreadSupervisor::Worker&) { return 0; });
  Agent agent(c, base_env(), sup, std::move(handler));
  const RunResult r = agent.run();
  CHECK(r.outcome == RunResult::Outcome::kFailed);
  CHECK(r.exit_code == 1);
  CHECK(sup.starts() == 0);
}

TEST_CASE("agent: a signal during a blocked rendezvous interrupts it - run returns", "[agent]") {
  TempDir dir;
  LaunchConfig c = program_job(1, dir);
  auto handler = std::make_unique<Steered>(local_handler(c));
  handler->block_rendezvous = true;
  Steered* steered = handler.get();  // owned by the Agent, which outlives these checks
  ThreadSupervisor sup;
  sup.install("program", [](ThreadSupervisor::Worker&) { return 0; });
  handler->raise_on_block = [&] { sup.raise(SIGTERM); };  // arrives while it blocks
  Agent agent(c, base_env(), sup, std::move(handler));
  const RunResult r = agent.run();
  CHECK(r.outcome == RunResult::Outcome::kStopped);
  CHECK(r.exit_code == 1);
  CHECK(sup.starts() == 0);
  // run() returned through interrupt(): the rendezvous thread has been joined, and the
  // handler was shut down (it leaves its round and stops any store it hosts).
  std::lock_guard lock(steered->mu);
  CHECK(steered->blocked_in == "rendezvous");
  CHECK(steered->interrupted);
  CHECK(steered->shut_down);
}

TEST_CASE("agent: a signal during the exit barrier interrupts it - stopped, not closed",
          "[agent]") {
  TempDir dir;
  LaunchConfig c = program_job(2, dir);
  auto handler = std::make_unique<Steered>(local_handler(c));
  handler->block_exit_barrier = true;
  Steered* steered = handler.get();
  ThreadSupervisor sup;
  sup.install("program", [](ThreadSupervisor::Worker&) { return 0; });
  handler->raise_on_block = [&] { sup.raise(SIGINT); };
  Agent agent(c, base_env(), sup, std::move(handler));
  const RunResult r = agent.run();
  CHECK(r.outcome == RunResult::Outcome::kStopped);
  CHECK(r.exit_code == 1);
  CHECK(sup.starts() == 1);
  std::lock_guard lock(steered->mu);
  CHECK(steered->blocked_in == "exit barrier");
  CHECK(steered->interrupted);
  CHECK_FALSE(steered->closed);  // the peers still run: late joiners are not turned away
  CHECK(steered->shut_down);
}

TEST_CASE("agent: a handled SIGUSR1 is forwarded by stopping the workers with it", "[agent]") {
  // torchrun 2.11: every handled signal (SignalException) stops the workers with that
  // signal and ends the run; no restart is spent on it.
  TempDir dir;
  LaunchConfig c = program_job(2, dir);
  c.max_restarts = 3;
  ThreadSupervisor sup;
  std::atomic<int> running{0};
  std::mutex mu;
  std::vector<int> got;
  sup.install("program", [&](ThreadSupervisor::Worker& w) {
    if (++running == 2) sup.raise(SIGUSR1);
    const int signo = w.wait_for_stop();
    std::lock_guard lock(mu);
    got.push_back(signo);
    return -signo;
  });
  Agent agent(c, base_env(), sup, local_handler(c));
  const RunResult r = agent.run();
  CHECK(r.outcome == RunResult::Outcome::kStopped);
  CHECK(r.exit_code == 1);
  CHECK(r.failures.empty());
  CHECK(r.restart_count == 0);
  CHECK(sup.starts() == 1);
  CHECK(got == std::vector<int>{SIGUSR1, SIGUSR1});
}

TEST_CASE("agent: an unstartable worker fails the run", "[agent]") {
  TempDir dir;
  LaunchConfig c = program_job(2, dir);
  c.training_script = "no-such-program-for-ddprun-agent-test";
  ThreadSupervisor sup;
  sup.install("program", [](ThreadSupervisor::Worker&) { return 0; });
  Agent agent(c, base_env(), sup, local_handler(c));
  const RunResult r = agent.run();
  CHECK(r.outcome == RunResult::Outcome::kFailed);
  CHECK(r.exit_code == 1);
  CHECK(sup.starts() == 1);
}

TEST_CASE("agent: rendezvous parameters from the command line", "[agent]") {
  LaunchConfig c;
  c.rdzv_backend = ddprun::rdzv::Backend::kStatic;
  c.rdzv_id = "j";
  c.min_nodes = 2;
  c.max_nodes = 3;
  c.nproc_per_node = 4;
  c.node_rank = 1;
  c.master_port = 29511;
  c.rdzv_conf = ddprun::rdzv::parse_rdzv_conf("timeout=5");
  const auto p = make_rendezvous_params(c, {});
  CHECK(p.backend == ddprun::rdzv::Backend::kStatic);
  CHECK(p.run_id == "j");
  CHECK(p.min_nodes == 2);
  CHECK(p.max_nodes == 3);
  CHECK(p.local_world_size == 4);
  CHECK(p.node_rank == 1);
  CHECK(p.master_port == 29511);
  CHECK_FALSE(p.master_addr);
  CHECK(p.conf.timeout == 5s);
  CHECK_FALSE(make_rendezvous_params(LaunchConfig{}, {}).node_rank);
}

TEST_CASE("the job's fingerprint is its entry point, without the script's arguments") {
  // Nodes of one job may pass per-node arguments (`--output_dir=$(hostname)`, issue 21).
  LaunchConfig c;
  c.training_script = "train.py";
  c.script_args = {"--out=/logs/node0"};
  using Cmd = std::vector<std::string>;
  CHECK(make_rendezvous_params(c, {}).job_command == Cmd{"train.py"});
  c.entry = EntryKind::kPythonModule;
  c.training_script = "pkg.train";
  CHECK(make_rendezvous_params(c, {}).job_command == Cmd{"-m", "pkg.train"});
  c.entry = EntryKind::kExecutable;
  c.training_script = "./run.sh";
  CHECK(make_rendezvous_params(c, {}).job_command == Cmd{"--no-python", "run.sh"});
}

TEST_CASE("the job's fingerprint names the script by its file name, not the path as typed") {
  // Issue 31 item 1: `train.py` on one node and `$PWD/train.py`, `~/p/train.py` or
  // `p/train.py` (another working directory) on the next are one job, as under torchrun.
  LaunchConfig c;
  using Cmd = std::vector<std::string>;
  for (const char* typed : {"train.py", "/home/u/p/train.py", "~/p/train.py", "p/train.py",
                            "./train.py", "p/../q/train.py"}) {
    c.training_script = typed;
    CHECK(make_rendezvous_params(c, {}).job_command == Cmd{"train.py"});
  }
  c.training_script = "/srv/app/";  // a directory run by its __main__.py
  CHECK(make_rendezvous_params(c, {}).job_command == Cmd{"app"});
  c.training_script = "eval.py";  // another program is still another job
  CHECK(make_rendezvous_params(c, {}).job_command == Cmd{"eval.py"});
  c.entry = EntryKind::kExecutable;
  c.training_script = "/opt/bin/run.sh";
  CHECK(make_rendezvous_params(c, {}).job_command == Cmd{"--no-python", "run.sh"});
}

TEST_CASE("USE_LIBUV=0 selects use_agent_store=0 unless --rdzv-conf says otherwise") {
  LaunchConfig c;
  const EnvMap off = {{"USE_LIBUV", "0"}};
  CHECK(make_rendezvous_params(c, off).conf.use_agent_store == false);
  c.rdzv_conf.use_agent_store = true;
  CHECK(make_rendezvous_params(c, off).conf.use_agent_store == true);
  CHECK_FALSE(make_rendezvous_params(LaunchConfig{}, {{"USE_LIBUV", "1"}}).conf.use_agent_store);
  CHECK_FALSE(make_rendezvous_params(LaunchConfig{}, {}).conf.use_agent_store);
}

namespace {

std::vector<std::string> torchelastic_dirs(const fs::path& dir) {
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("torchelastic_", 0) == 0) found.push_back(name);
  }
  return found;
}

}  // namespace

TEST_CASE(
    "agent: the default torchelastic_ directory goes at the end of a successful run, stays "
    "after a failure (as torchrun's, with the error files), after the report",
    "[agent]") {
  TempDir dir;
  const bool fail = GENERATE(false, true);
  INFO((fail ? "a failing run" : "a successful run"));
  LaunchConfig c = program_job(2, dir);
  c.log_dir.clear();
  ThreadSupervisor sup;
  sup.install("program", [&](ThreadSupervisor::Worker& w) {
    if (!fail) return 0;
    // Rank 0 runs until stopped: ThreadSupervisor may report kAllSucceeded when rank 0
    // exits 0 before rank 1's thread is registered.
    if (w.env("RANK") != "1") return -w.wait_for_stop();
    std::ofstream(w.env("TORCHELASTIC_ERROR_FILE"))
        << R"({"message": {"message": "ValueError: boom", "extraInfo": )"
           R"({"py_callstack": "Traceback: boom", "timestamp": "1700000000"}}})";
    return 3;
  });
  EnvMap env = base_env();
  env["TMPDIR"] = dir.path.string();  // the Agent makes its torchelastic_XXXXXX there
  const fs::path agent_error = dir.path / "agent_error.json";
  env["TORCHELASTIC_ERROR_FILE"] = agent_error.string();
  Agent agent(c, env, sup, local_handler(c));
  const RunResult r = agent.run();
  CHECK(r.exit_code == (fail ? 1 : 0));
  CHECK(fs::path(agent.run_log_dir()).parent_path().filename().string().rfind("torchelastic_", 0) ==
        0);
  CHECK(torchelastic_dirs(dir.path).size() == (fail ? 1u : 0u));
  if (fail) {
    // The root cause's error file was there when the report copied it, and still is,
    // in the attempt's folders of both ranks.
    CHECK(slurp(agent_error).find("Traceback: boom") != std::string::npos);
    CHECK(fs::is_regular_file(fs::path(agent.run_log_dir()) / "attempt_0" / "1" / "error.json"));
    CHECK(fs::is_directory(fs::path(agent.run_log_dir()) / "attempt_0" / "0"));
  }
}

TEST_CASE("agent: a default log directory holding the only copy of output is kept", "[agent]") {
  TempDir dir;
  LaunchConfig c = program_job(1, dir);
  c.log_dir.clear();
  c.redirects.all = StdStreams::kOut;  // -r 1: stdout only in stdout.log
  ThreadSupervisor sup;
  sup.install("program", [](ThreadSupervisor::Worker&) { return 0; });
  EnvMap env = base_env();
  env["TMPDIR"] = dir.path.string();
  Agent agent(c, env, sup, local_handler(c));
  CHECK(agent.run().exit_code == 0);
  CHECK(torchelastic_dirs(dir.path).size() == 1);
  CHECK(fs::is_directory(agent.run_log_dir()));
}

TEST_CASE("agent: --log-dir is never removed", "[agent]") {
  TempDir dir;
  LaunchConfig c = program_job(1, dir);
  ThreadSupervisor sup;
  sup.install("program", [](ThreadSupervisor::Worker&) { return 0; });
  Agent agent(c, base_env(), sup, local_handler(c));
  CHECK(agent.run().exit_code == 0);
  CHECK(fs::is_directory(fs::path(agent.run_log_dir()) / "attempt_0" / "0"));
}
