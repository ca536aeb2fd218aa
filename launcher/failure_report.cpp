// failure_report.cpp: torchrun's ChildFailedError text and the end of a failed run (see
// failure_report.h). Used by the Agent.
#include "launcher/failure_report.h"

#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <sstream>
#include <vector>

#include "launcher/error_file.h"
#include "launcher/process/signals.h"
#include "launcher/stderr_excerpt.h"

namespace ddprun::launcher {
namespace {

constexpr const char* kNotAvailable = "<N/A>";
constexpr const char* kNoTracebackHint =
    "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html";
constexpr std::size_t kMaxWidth = 60;

// datetime.fromtimestamp(ts).isoformat(sep="_") for an integer timestamp.
std::string iso_time(std::int64_t ts) {
  const std::time_t t = static_cast<std::time_t>(ts);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d_%H:%M:%S", &tm);
  return buf;
}

// Python's signal.Signals(signo).name on Linux: the classic names, SIGRTMIN and SIGRTMAX;
// "<N/A>" for the other real-time signals (torchrun's ProcessFailure.signal_name()).
std::string python_signal_name(int signo) {
  if (signo == SIGRTMIN) return "SIGRTMIN";
  if (signo == SIGRTMAX) return "SIGRTMAX";
  return signo >= 1 && signo < 32 ? signal_name(signo) : kNotAvailable;
}

std::string format_block(std::size_t idx, const Failure& f, const std::string& host) {
  // torchrun 2.14: "(pid: N) ${signal_name}" with signal_name " (SIGTERM)" or "": two
  // spaces before a signal's name, a trailing space after an exit code.
  const std::string name = f.exitcode < 0 ? python_signal_name(-f.exitcode) : kNotAvailable;
  const std::string signal = name == kNotAvailable ? "" : " (" + name + ")";
  return fmt::format(
      "[{}]:\n"
      "  time      : {}\n"
      "  host      : {}\n"
      "  rank      : {} (local_rank: {})\n"
      "  exitcode  : {} (pid: {}) {}\n"
      "  error_file: {}\n"
      "  traceback : {}",
      idx, iso_time(f.timestamp), host, f.global_rank, f.local_rank, f.exitcode, f.pid, signal,
      f.error_file, f.message);
}

std::size_t widest_line(const std::string& text) {
  std::size_t widest = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) widest = std::max(widest, line.size());
  return widest;
}

}  // namespace

Failure make_failure(const WorkerExit& exit, const std::string& error_file_path) {
  Failure f;
  f.global_rank = exit.global_rank;
  f.local_rank = exit.local_rank;
  f.pid = exit.pid;
  f.exitcode = exit.signal != 0 ? -exit.signal : exit.exit_code;
  f.error_file_path = error_file_path;
  f.error_file = kNotAvailable;
  f.timestamp =
      std::chrono::duration_cast<std::chrono::seconds>(exit.when.time_since_epoch()).count();
  if (!error_file_path.empty()) {
    const ErrorFileInfo info = read_error_file(error_file_path);
    if (info.exists) {
      f.error_file = error_file_path;
      if (info.parsed) {
        f.message = info.display;
        if (info.timestamp) f.timestamp = *info.timestamp;
      } else {
        f.message = fmt::format("<error file not readable: {}>", info.parse_error);
      }
      return f;
    }
  }
  // No error file: torchrun's texts, and what the worker's stderr ended with.
  std::vector<std::string> shown;
  if (!exit.note.empty()) shown.push_back(exit.note);
  if (exit.signal != 0) {
    shown.push_back(fmt::format("Signal {} ({}) received by PID {}", exit.signal,
                                python_signal_name(exit.signal), exit.pid));
  }
  const StderrExcerpt excerpt = excerpt_stderr(exit.stderr_tail, exit.stderr_tail_cut);
  if (excerpt.stack_dump) {
    shown.push_back("Python stacks (faulthandler, most recent call first):");
  } else if (!excerpt.traceback && !excerpt.lines.empty()) {
    shown.push_back(fmt::format("stderr (last {} lines):", excerpt.lines.size()));
  }
  for (const auto& line : excerpt.lines) f.callstack += line + '\n';
  shown.insert(shown.end(), excerpt.lines.begin(), excerpt.lines.end());
  if (shown.empty()) shown.push_back(kNoTracebackHint);
  for (const auto& line : shown) f.message += (f.message.empty() ? "" : "\n  ") + line;
  // @record's "message" is the exception line; else the signal, the last stderr line.
  if (!excerpt.exception.empty()) {
    f.summary = excerpt.exception;
  } else if (exit.signal != 0 || excerpt.lines.empty() || excerpt.stack_dump) {
    f.summary = shown.front();
  } else {
    f.summary = excerpt.lines.back();
  }
  if (f.callstack.empty()) f.callstack = f.summary;
  return f;
}

std::size_t root_cause_index(const std::vector<Failure>& failures) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < failures.size(); ++i) {
    if (failures[i].timestamp < failures[best].timestamp) best = i;
  }
  return best;
}

std::string format_failure_report(const std::string& entrypoint,
                                  const std::vector<Failure>& failures,
                                  const std::string& hostname) {
  const std::string title = entrypoint + " FAILED";
  const std::size_t root = root_cause_index(failures);
  std::string root_block;
  std::vector<std::string> others;
  std::size_t width = title.size();
  for (std::size_t i = 0; i < failures.size(); ++i) {
    std::string block = format_block(i, failures[i], hostname);
    width = std::max(width, widest_line(block));
    if (i == root) {
      root_block = std::move(block);
    } else {
      others.push_back(std::move(block));
    }
  }
  width = std::min(width, kMaxWidth);
  const std::string border(width, '=');
  const std::string section(width, '-');
  std::string other_text;
  for (const auto& b : others) other_text += (other_text.empty() ? "" : "\n") + b;
  if (other_text.empty()) other_text = "  <NO_OTHER_FAILURES>";
  return fmt::format("{}\n{}\n{}\nFailures:\n{}\n{}\nRoot Cause (first observed failure):\n{}\n{}",
                     border, title, section, other_text, section, root_block, border);
}

std::string failed_log_line(const Failure& first, const std::string& binary) {
  return fmt::format("failed (exitcode: {}) local_rank: {} (pid: {}) of binary: {}", first.exitcode,
                     first.local_rank, first.pid, binary);
}

std::string failure_hint(const Failure& failure, const std::string& worker_python) {
  if (failure.exitcode == -SIGKILL) {
    return fmt::format(
        "rank {} (pid {}) was killed by SIGKILL, possibly by the OOM killer (check dmesg)",
        failure.global_rank, failure.pid);
  }
  if (!worker_python.empty() &&
      failure.message.find("No module named 'torch'") != std::string::npos) {
    return fmt::format(
        "the workers ran {}, which has no torch: set PYTHON_EXEC to the python that has it "
        "(or run the ddprun installed in that environment)",
        worker_python);
  }
  return {};
}

std::string node_label(const std::optional<std::string>& local_addr) {
  std::string label = host_fqdn();
  if (local_addr && *local_addr != label) label += " (" + *local_addr + ")";
  return label;
}

void report_failures(const std::string& entrypoint, const std::vector<Failure>& failures,
                     const std::string& agent_error_file, const std::string& worker_python) {
  const std::string text = format_failure_report(entrypoint, failures, host_fqdn());
  // torchrun ends with the ChildFailedError's traceback, whose last line is this one
  // (the message begins with a newline), what log scrapers and alerting match.
  std::fprintf(stderr, "%s\n%s\n", kChildFailedErrorLine, text.c_str());
  const Failure& root = failures[root_cause_index(failures)];
  if (const std::string hint = failure_hint(root, worker_python); !hint.empty()) {
    std::fprintf(stderr, "ddprun: hint: %s\n", hint.c_str());
  }
  std::fflush(stderr);
  if (agent_error_file.empty()) return;
  std::string why;
  const bool ok = root.error_file == root.error_file_path
                      ? copy_error_file(root.error_file_path, agent_error_file, root.exitcode, &why)
                      : write_error_file(agent_error_file, root.summary, root.callstack,
                                         root.timestamp, root.exitcode, &why);
  if (!ok) spdlog::warn("could not write the agent error file: {}", why);
}

}  // namespace ddprun::launcher
