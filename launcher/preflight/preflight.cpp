// preflight.cpp: one round's pre-flight check (see preflight.h).
#include "launcher/preflight/preflight.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <optional>

#include "base/file.h"
#include "base/unique_fd.h"
#include "launcher/preflight/board_exchange.h"
#include "launcher/preflight/preflight_script.h"
#include "launcher/process/signals.h"
#include "launcher/process/spawn.h"

namespace ddprun::launcher::preflight {
namespace {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;
using Kind = SupervisorEvent::Kind;

// How long a node waits for its peers' findings past its own bound: their checks started
// a little later (the round's last nodes) and they share it the moment they end.
constexpr Ms kPeerSlack{10000};
// What the program writes once its local checks are all in the findings (json.dump's form).
constexpr const char* kLocalDone = "\"local_done\": true";

// The check program of this node, as the Supervisor runs it, and what it said so far.
class Program {
 public:
  Program(const Context& c, Clock::time_point deadline) : c_(c), deadline_(deadline) {
    findings_ = fmt::format("{}/preflight_{}.json", c.dir, c.info.round);
    const std::string script = c.dir + "/preflight.py";
    write_script(script);
    ::unlink(findings_.c_str());
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw SpawnError(std::string("pipe: ") + std::strerror(errno));
    UniqueFd read_end(fds[0]);
    go_.reset(fds[1]);
    WorkerSpec spec;
    spec.global_rank = c.info.rank_base;
    spec.argv = {c.python, "-u", script, findings_};
    spec.env = c.env;
    const auto set = [&](const std::string& name, const std::string& value) {
      spec.env.push_back(name + "=" + value);
    };
    set("DDPRUN_PREFLIGHT_NODE", std::to_string(c.info.group_rank));
    set("DDPRUN_PREFLIGHT_NODES", std::to_string(c.info.group_world_size));
    set("DDPRUN_PREFLIGHT_ADDR", c.info.master_addr);
    set("DDPRUN_PREFLIGHT_PORT", std::to_string(c.info.master_port));
    set("DDPRUN_PREFLIGHT_HOST_STORE", c.info.use_agent_store ? "0" : "1");
    set("DDPRUN_PREFLIGHT_BYTES", std::to_string(16 << 20));
    set("DDPRUN_PREFLIGHT_TIMEOUT",
        std::to_string(std::max<long long>(
            1, std::chrono::duration_cast<std::chrono::seconds>(c.timeout).count())));
    const bool has_ifname = std::any_of(c.env.begin(), c.env.end(), [](const std::string& e) {
      return e.rfind("GLOO_SOCKET_IFNAME=", 0) == 0;
    });
    if (!c.info.gloo_socket_ifname.empty() && !has_ifname) {
      set("GLOO_SOCKET_IFNAME", c.info.gloo_socket_ifname);
    }
    spec.stdin_fd = read_end.get();
    spec.out = {StreamMode::kRedirect, "/dev/null"};
    spec.err = {StreamMode::kRedirect, fmt::format("{}/preflight_{}.err", c.dir, c.info.round)};
    c.supervisor.start({spec});
    running_ = true;
    // The stall watchdog (--stall-timeout) must not judge the check, which waits on its
    // peers without progress of its own: a judge that never decides holds it back (the
    // workers' start() resets the gate).
    if (StallGate* gate = c.supervisor.stall_gate()) gate->set_judged(true);
  }
  ~Program() { end(); }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  // Serves the Supervisor for up to `wait`: the program's exit, a signal. False once a
  // signal arrived (signo()).
  bool pump(Ms wait = kBoardPoll) {
    const SupervisorEvent ev = c_.supervisor.next_event(wait);
    switch (ev.kind) {
      case Kind::kWorkerExited:
        if (ev.exit.failed()) exited(ev.exit);
        break;
      case Kind::kAllSucceeded:
        running_ = false;
        break;
      case Kind::kStalled:
        if (!ev.exits.empty()) exited(ev.exits.front());
        break;
      case Kind::kSignal:
        signo_ = ev.signo;
        spdlog::warn("received {} during the pre-flight check; stopping it", signal_name(ev.signo));
        c_.supervisor.stop(ev.signo, c_.grace);
        running_ = false;
        return false;
      case Kind::kTimeout:
        break;
    }
    return true;
  }
  int signo() const { return signo_; }
  bool running() const { return running_; }
  bool late() const { return Clock::now() >= deadline_; }

  // Tells the program whether to run the collective, then waits no more for it there.
  void answer(bool go) {
    if (!go_) return;
    const char* text = go ? "go\n" : "skip\n";
    [[maybe_unused]] const ssize_t n = ::write(go_.get(), text, std::strlen(text));
    go_.reset();
  }

  // The findings written so far (empty result when none), `local` when only the local
  // checks must be there.
  NodeResult findings(bool local) const {
    NodeResult r;
    r.node = c_.info.group_rank;
    r.host = c_.host;
    r.key = c_.key;
    r.address = c_.address;
    r.hosts_store = c_.hosts_store;
    const auto text = read_file(findings_);
    if (!text || !read_findings(*text, r)) {
      r.missing = running_ ? fmt::format("the check found nothing within {} s (with {})",
                                         c_.timeout.count() / 1000, c_.python)
                           : "the check ended without findings (with " + c_.python + ")" + failure_;
      return r;
    }
    if (text->find(kLocalDone) == std::string::npos) {
      // Some checks written, then the program died (a device that crashes it) or hung.
      r.checks.push_back({"the local checks", false, 0,
                          running_
                              ? fmt::format("did not finish within {} s", c_.timeout.count() / 1000)
                              : "the check ended before they did" + failure_});
      return r;
    }
    const bool has_collective = std::any_of(r.checks.begin(), r.checks.end(),
                                            [](const Check& k) { return k.name == "collective"; });
    if (!local && !has_collective) {
      r.checks.push_back({"collective", false, 0,
                          running_
                              ? fmt::format("did not finish within {} s", c_.timeout.count() / 1000)
                              : "the check ended before it" + failure_});
    }
    return r;
  }
  // True once the local checks' findings are complete.
  bool local_done() const {
    const auto text = read_file(findings_);
    return text && text->find(kLocalDone) != std::string::npos;
  }

  // Stops the program if it still runs.
  void end() {
    answer(false);
    if (running_) c_.supervisor.stop(SIGKILL, Ms(0));
    running_ = false;
  }

 private:
  void exited(const WorkerExit& e) {
    running_ = false;
    std::string tail = e.stderr_tail;
    while (!tail.empty() && tail.back() == '\n') tail.pop_back();
    const std::size_t nl = tail.rfind('\n');
    failure_ = e.signal ? fmt::format(": killed by signal {}", e.signal)
                        : fmt::format(": exit {}", e.exit_code);
    if (!tail.empty()) failure_ += ": " + tail.substr(nl == std::string::npos ? 0 : nl + 1);
  }

  const Context& c_;
  Clock::time_point deadline_;
  std::string findings_;
  UniqueFd go_;  // the program's stdin: "go" or "skip"
  bool running_ = false;
  int signo_ = 0;
  std::string failure_;  // ": exit 1: <last stderr line>" once it failed
};

// One step of the board exchange (decide_on_board): shares `mine` as `prefix<node>` and
// returns the step's answer, serving the program (or, without one running, the signals)
// while it waits; nullopt when a signal arrived (`signo`).
std::optional<std::string> exchange(const Context& c, Program* program, const std::string& prefix,
                                    const std::string& mine, Clock::time_point deadline, int& signo,
                                    const Decide& decide) {
  return decide_on_board(
      *c.board, c.info.group_world_size, c.info.group_rank, prefix, mine, deadline,
      [&](Ms look) {
        if (program != nullptr && program->running()) {
          if (program->pump(look)) return true;
          signo = program->signo();
          return false;
        }
        const SupervisorEvent ev = c.supervisor.next_event(look);
        if (ev.kind != Kind::kSignal) return true;
        signo = ev.signo;  // nothing runs: signals only
        return false;
      },
      decide);
}

Outcome signalled(int signo) {
  Outcome o;
  o.kind = Outcome::Kind::kSignal;
  o.signo = signo;
  return o;
}

}  // namespace

Outcome run(const Context& c) {
  Outcome out;
  const auto start = Clock::now();
  const auto deadline = start + c.timeout;
  const auto peers_deadline = deadline + kPeerSlack;
  if (c.board) {
    // A round whose nodes all passed before (a restart, a membership change without a new
    // node) runs nothing.
    const auto need = exchange(c, nullptr, "preflight/need/", c.passed_before ? "0" : "1",
                               peers_deadline, out.signo, need_answer);
    if (!need) return signalled(out.signo);
    if (*need == kSkip) return out;
  }
  out.kind = Outcome::Kind::kVerdict;
  Program program(c, deadline);
  while (program.running() && !program.local_done() && !program.late()) {
    if (!program.pump()) return signalled(program.signo());
  }
  NodeResult mine = program.findings(/*local=*/true);
  if (!c.board) {
    program.end();
    out.nodes = {mine};
    out.verdict = judge(out.nodes, c.settings);
    out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return out;
  }
  // Node 0 reads every node's findings (`read`: its table), the others one answer a step.
  std::vector<NodeResult> read;
  const auto answer_on = [&](bool last) -> Decide {
    return [&, last](const std::vector<std::string>& values) {
      return findings_answer(values, last, c.settings, c.timeout + kPeerSlack, &read);
    };
  };
  std::string prefix = "preflight/local/";
  auto answer =
      exchange(c, &program, prefix, to_json(mine), peers_deadline, out.signo, answer_on(false));
  if (!answer) return signalled(out.signo);
  const bool go = *answer == kGo;
  program.answer(go);
  if (go) {
    while (program.running() && !program.late()) {
      if (!program.pump()) return signalled(program.signo());
    }
    mine = program.findings(/*local=*/false);
    program.end();
    read.clear();
    prefix = "preflight/full/";
    answer =
        exchange(c, &program, prefix, to_json(mine), peers_deadline, out.signo, answer_on(true));
    if (!answer) return signalled(out.signo);
  }
  program.end();
  out.verdict = read_published(*answer, out.nodes);
  if (read.size() == out.nodes.size()) out.nodes = std::move(read);
  if (c.hosts_store) wait_until_read(*c.board, c.info.group_world_size, prefix);
  out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return out;
}

}  // namespace ddprun::launcher::preflight
