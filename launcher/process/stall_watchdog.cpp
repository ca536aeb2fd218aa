// stall_watchdog.cpp: the --stall-timeout policy (see stall_watchdog.h): sample, warn,
// dump, kill, collect. Used by ProcessSupervisor.
#include "launcher/process/stall_watchdog.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <iterator>
#include <optional>
#include <utility>

#include "launcher/process/descendants.h"

namespace ddprun::launcher {
namespace {

// How often the watchdog looks for the hooks' answers while it waits for the dumps.
constexpr std::chrono::milliseconds kAnswerPoll{20};

// "30", "0.3": seconds to a tenth.
std::string seconds(std::chrono::milliseconds ms) {
  return fmt::format("{:g}", std::round(static_cast<double>(ms.count()) / 100) / 10);
}

}  // namespace

StallWatchdog::StallWatchdog(EventLoop& loop, WorkerGroup& group, OutputRouter& router,
                             std::chrono::milliseconds timeout)
    : loop_(loop),
      group_(group),
      router_(router),
      timeout_(timeout),
      detector_(timeout),
      probe_(loop, detector_.sample_interval()) {}

StallWatchdog::~StallWatchdog() { loop_.cancel_timer(timer_); }

void StallWatchdog::arm(Clock::time_point when) {
  loop_.cancel_timer(timer_);
  timer_ = loop_.add_timer(when, [this] {
    timer_ = 0;
    tick();
  });
}

void StallWatchdog::start_attempt(std::size_t workers) {
  const auto now = Clock::now();
  gate_.reset();
  detector_.reset(workers, now);
  warned_.clear();
  sampling_ = true;
  next_sample_ = now;  // the baseline sample
  arm(next_sample_);
}

void StallWatchdog::end_attempt() {
  probe_.clear();
  dump_ = Dump{};
  sampling_ = false;
  loop_.cancel_timer(timer_);
  timer_ = 0;
}

void StallWatchdog::tick() {
  if (group_.alive() == 0) return;
  const auto now = Clock::now();
  if (dump_.active) {
    if (dump_.asking) {
      // Several nodes: the whole wait once a rank here dumped, for the other nodes' dumps
      // (fr_dump.h); without a recorder here there is none to wait for.
      if (now < dump_.deadline &&
          (!probe_.dumps_answered() || (gate_.judged() && probe_.dumps_written()))) {
        return arm(std::min(now + kAnswerPoll, dump_.deadline));
      }
      dumps_done();
      abort_workers(now);
      return arm(dump_.deadline);
    }
    if (dump_.killed) return;
    if (now < dump_.deadline) return arm(dump_.deadline);
    dump_.killed = true;
    spdlog::warn("stall: {} worker(s) still alive {} s after SIGABRT; killing them",
                 dump_.pending.size(), kStallDumpWait.count() / 1000);
    for (std::size_t i : dump_.pending) ::kill(-group_.pid(i), SIGKILL);
    return;
  }
  if (!sampling_) return;
  if (now < next_sample_) return arm(next_sample_);
  for (std::size_t i = 0; i < group_.size(); ++i) {
    if (group_.reaped(i)) continue;
    const StackProbe::Position& pos = probe_.position(i);
    // The sampled process's own CPU time says nothing its stack does not, but while it
    // imports (one C call loading a library can take seconds).
    const pid_t own = pos.sampled && !pos.importing ? pos.pid : 0;
    detector_.observe(i, now, process_tree_cpu_seconds(group_.pid(i), own), router_.bytes_read(i),
                      pos.sampled ? std::optional<std::uint64_t>(pos.moves) : std::nullopt);
    if (router_.held_back(i)) detector_.held_back(i, now);
  }
  next_sample_ = now + detector_.sample_interval();
  for (std::size_t i = 0; i < group_.size(); ++i) {
    if (gate_.wants_arrivals()) gate_.add_arrivals(group_.local_rank(i), probe_.take_arrivals(i));
    gate_.set_startup(group_.local_rank(i), probe_.position(i).startup);
  }
  const auto stalled = detector_.stalled(now);
  const bool all_idle = !stalled.empty() && detector_.all_stalled(now);
  // Only a judge or the status reads the samples: a node alone without them pays no /proc
  // reads for them.
  if (gate_.judged() || gate_.wants_samples()) publish(now, all_idle);
  // With a job-wide judge, this node's workers all idle is a stall only when the judge
  // says the whole job is stuck (ranks elsewhere may be working while these wait).
  if (all_idle && gate_.judged()) {
    if (const auto verdict = gate_.decision()) return fire(stalled, now, *verdict);
    return arm(next_sample_);  // the judge says what this node's quiet means
  }
  if (all_idle) return fire(stalled, now, {});
  arm(next_sample_);
  // Some workers idle while others still progress: most often ranks waiting for a slower
  // peer (a long import, a checkpoint), so it is said once per idle spell, not acted on.
  for (std::size_t i : stalled) {
    if (!warned_.insert(i).second) continue;
    spdlog::warn(
        "stall: local rank {} (pid {}){} has made no progress ({}) for {} s while other "
        "workers still progress",
        group_.local_rank(i), group_.pid(i), where(i),
        probe_.position(i).sampled ? "Python stack or output" : "CPU time or output",
        seconds(detector_.idle_for(i, now)));
  }
  for (auto it = warned_.begin(); it != warned_.end();) {
    it = std::find(stalled.begin(), stalled.end(), *it) == stalled.end() ? warned_.erase(it)
                                                                         : std::next(it);
  }
}

void StallWatchdog::publish(Clock::time_point now, bool all_idle) {
  NodeSample sample;
  sample.all_idle = all_idle;
  sample.last_progress = detector_.last_progress();
  for (std::size_t i = 0; i < group_.size(); ++i) {
    if (group_.reaped(i)) continue;
    const StackProbe::Position& pos = probe_.position(i);
    WorkerPosition w;
    w.local_rank = group_.local_rank(i);
    w.pid = pos.sampled ? pos.pid : group_.pid(i);
    w.sampled = pos.sampled;
    w.where = pos.where;
    w.user_where = pos.user_where;
    w.collectives = pos.collectives;
    stopped(i, &w.state);
    w.idle_s = static_cast<double>(detector_.idle_for(i, now).count()) / 1000.0;
    sample.workers.push_back(std::move(w));
  }
  gate_.publish(std::move(sample));
}

void StallWatchdog::fire(const std::vector<std::size_t>& stalled, Clock::time_point now,
                         const std::vector<std::string>& verdict) {
  std::string who;
  dump_ = Dump{};
  dump_.notes.assign(group_.size(), "");
  for (std::size_t i : stalled) {  // every live worker (all_stalled)
    who += fmt::format("{}local rank {} (pid {}){}", who.empty() ? "" : ", ", group_.local_rank(i),
                       group_.pid(i), where(i));
    const std::string idle = seconds(detector_.idle_for(i, now));
    const StackProbe::Position& pos = probe_.position(i);
    const std::string at = pos.sampled ? ", at " + pos.where : "";
    char state = '?';
    if (stopped(i, &state)) {
      // A stopped process takes SIGABRT only once continued; a traced one ('t') cannot be.
      dump_.notes[i] =
          state == 'T'
              ? fmt::format(
                    "stalled: the process was stopped (state T in /proc/{}/stat: SIGSTOP or "
                    "Ctrl-Z) for {} s{}; continued (SIGCONT) for the stall watchdog to dump its "
                    "stacks (SIGABRT)",
                    group_.pid(i), idle, at)
              : fmt::format(
                    "stalled: the process was stopped by a debugger (state t in /proc/{}/stat) "
                    "for {} s{}; no stacks (SIGABRT cannot reach it), then killed",
                    group_.pid(i), idle, at);
      if (state == 'T') dump_.to_continue.push_back(i);
    } else {
      dump_.notes[i] = fmt::format(
          "stalled: no progress ({}) for {} s{}; stacks dumped by the stall watchdog (SIGABRT)",
          pos.sampled ? "Python stack or output" : "CPU time or output", idle, at);
    }
    // The job-wide verdict's headline first: where the culprit is, not just this rank.
    if (!verdict.empty()) dump_.notes[i] = verdict.front() + "; " + dump_.notes[i];
    dump_.pending.push_back(i);
  }
  spdlog::error(
      "stall: {} for {} s: {}; dumping their Python stacks (SIGABRT) and ending the attempt",
      verdict.empty() ? "no worker made progress" : "the job made no progress (job-wide verdict)",
      seconds(timeout_), who);
  dump_.active = true;
  if (!ask_for_dumps(now)) abort_workers(now);
  arm(dump_.asking ? std::min(now + kAnswerPoll, dump_.deadline) : dump_.deadline);
}

bool StallWatchdog::ask_for_dumps(Clock::time_point now) {
  if (!probe_.recorder_off().empty()) {
    if (!std::exchange(said_no_dumps_, true)) {
      spdlog::warn(
          "stall: no flight recorder dumps: the workers' environment switches PyTorch's "
          "flight recorder off ({})",
          probe_.recorder_off());
    }
    return false;
  }
  // Not the stopped ones: their hook is stopped too.
  std::vector<std::size_t> ask;
  for (std::size_t i : dump_.pending) {
    char state = '?';
    if (stopped(i, &state)) {
      probe_.no_dump(i, fmt::format("the process is stopped (state {})", state));
    } else {
      ask.push_back(i);
    }
  }
  if (probe_.request_dumps(ask) == 0) {
    dumps_done();
    return false;
  }
  dump_.asking = true;
  dump_.deadline = now + kFrDumpWait;
  return true;
}

void StallWatchdog::dumps_done() {
  dump_.asking = false;
  dump_.dumps_folder = fr_dump_folder(probe_.dumps());
  const std::string line = fr_dump_summary(probe_.dumps(), gate_.judged());
  if (line.empty()) return;
  // Without any dump the reason is the same each stall: said once a run.
  if (!probe_.dumps_written() && std::exchange(said_no_dumps_, true)) return;
  spdlog::warn("{}", line);
}

void StallWatchdog::abort_workers(Clock::time_point now) {
  dump_.deadline = now + kStallDumpWait;
  // The worker process only, not its group: faulthandler prints its own stacks, and its
  // children (data loaders) would add theirs to the same stderr. The group dies at the
  // attempt's end.
  for (std::size_t i : dump_.pending) ::kill(group_.pid(i), SIGABRT);
  for (std::size_t i : dump_.to_continue) ::kill(group_.pid(i), SIGCONT);
}

bool StallWatchdog::stopped(std::size_t index, char* state) const {
  const auto st =
      parse_proc_stat(read_proc_file("/proc/" + std::to_string(group_.pid(index)) + "/stat"));
  if (state != nullptr && st) *state = st->state;
  return st && (st->state == 'T' || st->state == 't');
}

std::string StallWatchdog::where(std::size_t index) const {
  std::string text;
  char state = '?';
  if (stopped(index, &state)) text += fmt::format(" (stopped: state {})", state);
  const StackProbe::Position& pos = probe_.position(index);
  if (pos.sampled) text += " at " + pos.where;
  // From the flight recorder, against this node's other workers: a collective it never
  // entered, or the one it waits in.
  std::vector<std::vector<CollectiveState>> all;
  for (std::size_t i = 0; i < group_.size(); ++i) all.push_back(probe_.position(i).collectives);
  const Standing s = collective_standing(pos.collectives, collective_fronts(all));
  if (!s.text.empty()) text += ", " + s.text;
  return text;
}

bool StallWatchdog::collect(std::size_t index, const WorkerExit& exit) {
  detector_.forget(index);
  if (!dump_.active) return false;
  const auto it = std::find(dump_.pending.begin(), dump_.pending.end(), index);
  if (it == dump_.pending.end()) return false;
  dump_.pending.erase(it);
  WorkerExit e = exit;
  router_.take_stderr_tail(index, e);
  e.note = dump_.notes[index];
  dump_.exits.push_back(std::move(e));
  if (dump_.pending.empty()) {
    if (dump_.asking) dumps_done();  // every worker exited before the answers were in
    SupervisorEvent ev;
    ev.kind = SupervisorEvent::Kind::kStalled;
    ev.exits = std::move(dump_.exits);
    ev.flight_recorder_dir = dump_.dumps_folder;
    router_.hold(ev);
    dump_ = Dump{};
    if (sampling_) arm(next_sample_);
  }
  return true;
}

}  // namespace ddprun::launcher
