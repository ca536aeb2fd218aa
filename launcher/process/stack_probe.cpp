// stack_probe.cpp: StackProbe (see stack_probe.h) and the Python hook it installs.
#include "launcher/process/stack_probe.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <utility>

#include "launcher/process/descendants.h"
#include "launcher/process/stack_probe_hook.h"

namespace ddprun::launcher {
namespace {

// "<file>:<line> <function>" as "<file>:<line> in <function>".
std::string frame_text(const std::string& frame) {
  const std::size_t last = frame.rfind(' ');
  return last == std::string::npos ? frame
                                   : frame.substr(0, last) + " in " + frame.substr(last + 1);
}

// Takes "<number> " from the front of `rest`.
template <typename T>
bool next_number(std::string_view& rest, T& out) {
  const auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), out);
  if (ec != std::errc() || p == rest.data() || p == rest.data() + rest.size() || *p != ' ') {
    return false;
  }
  rest.remove_prefix(static_cast<std::size_t>(p - rest.data()) + 1);
  return true;
}

}  // namespace

StackProbe::StackProbe(EventLoop& loop, std::chrono::milliseconds interval)
    : loop_(loop), interval_(interval) {
  // A TMPDIR with ':' cannot be a PYTHONPATH entry: /tmp then.
  const char* tmp = std::getenv("TMPDIR");
  const std::string_view base = tmp != nullptr ? tmp : "";
  std::string pattern = std::string(base.empty() || base.find(':') != base.npos ? "/tmp" : base) +
                        "/ddprun_stack_XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    spdlog::warn("stall watchdog: cannot create {} ({}); judging workers by CPU time only", pattern,
                 errno_text(errno));
    return;
  }
  std::ofstream f(pattern + "/sitecustomize.py");
  f << stack_probe_hook();
  f.close();
  if (!f) {
    spdlog::warn(
        "stall watchdog: cannot write {}/sitecustomize.py; judging workers by CPU "
        "time only",
        pattern);
    std::error_code ec;
    std::filesystem::remove_all(pattern, ec);
    return;
  }
  dir_ = pattern;
}

StackProbe::~StackProbe() {
  clear();
  if (dir_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

UniqueFd StackProbe::add(std::vector<std::string>& env, FrDump dump) {
  auto w = std::make_unique<Worker>();
  Worker& worker = *w;
  worker.dump = std::move(dump);
  worker.position.startup.spawned = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count();
  workers_.push_back(std::move(w));
  if (dir_.empty()) return UniqueFd();
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return UniqueFd();
  worker.fd.reset(fds[0]);
  UniqueFd write_end(fds[1]);
  ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
  // Above 2, so that the child's dup2 of its stdio can never land on it.
  if (write_end.get() <= 2) write_end.reset(::fcntl(write_end.get(), F_DUPFD_CLOEXEC, 3));
  const auto user_path = find_env_entry(env, "PYTHONPATH");
  const std::string path(user_path.value_or(""));
  // The flight recorder on, with a small buffer, unless the user set its size (0: off).
  if (!find_env_entry(env, "TORCH_FR_BUFFER_SIZE") &&
      !find_env_entry(env, "TORCH_NCCL_TRACE_BUFFER_SIZE")) {
    set_env_entry(env, "TORCH_FR_BUFFER_SIZE", std::to_string(kFlightRecorderEntries));
  }
  recorder_off_ = fr_recorder_off(env);
  if (!recorder_off_.empty()) worker.dump.file.clear();
  if (!worker.dump.file.empty()) set_env_entry(env, "DDPRUN_STACK_FR_FILE", worker.dump.file);
  if (user_path) set_env_entry(env, "DDPRUN_STACK_PYTHONPATH", path);
  set_env_entry(env, "PYTHONPATH", path.empty() ? dir_ : dir_ + ":" + path);
  set_env_entry(env, "DDPRUN_STACK_DIR", dir_);
  set_env_entry(env, "DDPRUN_STACK_FD", std::to_string(write_end.get()));
  set_env_entry(env, "DDPRUN_STACK_INTERVAL",
                fmt::format("{:g}", static_cast<double>(interval_.count()) / 1000));
  worker.id = loop_.add(worker.fd.get(), EPOLLIN, [this, &worker](std::uint32_t) { read(worker); });
  return write_end;
}

void StackProbe::read(Worker& w) {
  char buf[4096];
  while (w.fd) {
    const ssize_t n = ::read(w.fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) {  // every writer gone: the sampled process exec'd or ended
      loop_.remove(w.id);
      w.id = 0;
      w.fd.reset();
      // Its last position is frozen, not the worker's: from now on judged without it.
      w.position.sampled = false;
      w.position.collectives.clear();
      return;
    }
    w.partial.append(buf, static_cast<std::size_t>(n));
  }
  // Reports: "<moves> <pid> <file>:<line> <function>[\t<file>:<line> <function>]\n" (the
  // innermost frame, then the innermost outside the Python library and installed
  // packages, when that is another); only the last whole one counts. Before it, from the
  // flight recorder, "F <pg> <entered> <completed> <op>\n" per group and "A <pg>
  // <seq>:<ns> ...\n", the group's new arrivals; "I\n" when the main
  // thread is importing a module. Once, "N <why>\n": its torch has no recorder to dump
  // (the answer to a question not asked).
  std::size_t end;
  while ((end = w.partial.find('\n')) != std::string::npos) {
    std::string_view rest(w.partial.data(), end);
    if (rest.starts_with("D ")) {  // the answer to request_dumps()
      if (w.asked) parse_fr_answer(rest.substr(2), w.dump);
      w.partial.erase(0, end + 1);
      continue;
    }
    if (rest.starts_with("N ") && rest.size() > 2) {  // no recorder: never asked (below)
      if (!w.asked && !w.dump.file.empty()) {
        w.dump.answered = true;
        w.dump.written = false;
        w.dump.why = std::string(rest.substr(2, 300));
      }
      w.partial.erase(0, end + 1);
      continue;
    }
    if (rest == "I") {  // the next position is inside an import
      w.importing = true;
      w.partial.erase(0, end + 1);
      continue;
    }
    if (rest.starts_with("F ") || rest.starts_with("A ") || rest.starts_with("S ")) {
      record_line(w, rest);
      w.partial.erase(0, end + 1);
      continue;
    }
    std::uint64_t moves = 0;
    pid_t pid = 0;
    const bool ok = next_number(rest, moves) && next_number(rest, pid);
    const std::string where(rest);
    w.partial.erase(0, end + 1);
    if (!ok) continue;
    const std::size_t tab = where.find('\t');
    w.position.sampled = true;
    w.position.moves = moves;
    w.position.pid = pid;
    w.position.where = frame_text(where.substr(0, tab));
    w.position.user_where = tab == std::string::npos ? "" : frame_text(where.substr(tab + 1));
    w.position.collectives = std::move(w.collectives);
    w.collectives.clear();
    w.position.importing = std::exchange(w.importing, false);
  }
  if (w.partial.size() > 8192) w.partial.clear();  // not a report
}

void StackProbe::record_line(Worker& w, std::string_view line) {
  const char kind = line[0];
  line.remove_prefix(2);
  if (kind == 'S') {  // "S <up> <torch> <group> <first collective>"
    std::int64_t v[4];
    for (int i = 0; i < 4; ++i) {
      const char* end = line.data() + line.size();
      const auto [p, ec] = std::from_chars(line.data(), end, v[i]);
      if (ec != std::errc() || (i < 3 ? p == end || *p != ' ' : p != end)) return;
      line.remove_prefix(static_cast<std::size_t>(p - line.data()) + (i < 3 ? 1 : 0));
    }
    StartupTimes& t = w.position.startup;
    t.up = v[0];
    t.torch = v[1];
    t.group = v[2];
    t.first_collective = v[3];
    return;
  }
  const bool state = kind == 'F';
  int pg = 0;
  if (!next_number(line, pg)) return;
  if (state) {
    CollectiveState c;
    c.pg = pg;
    if (!next_number(line, c.entered) || !next_number(line, c.completed) || line.empty()) return;
    c.op = std::string(line.substr(0, 64));
    if (w.collectives.size() < 8) w.collectives.push_back(std::move(c));
    return;
  }
  // " <seq>:<ns>" each
  while (!line.empty()) {
    Arrival a;
    a.pg = pg;
    const char* end = line.data() + line.size();
    auto [p, ec] = std::from_chars(line.data(), end, a.seq);
    if (ec != std::errc() || p == end || *p != ':') return;
    auto [q, ec2] = std::from_chars(p + 1, end, a.t_ns);
    if (ec2 != std::errc() || (q != end && *q != ' ')) return;
    w.arrivals.push_back(a);
    line.remove_prefix(static_cast<std::size_t>(q - line.data()) + (q != end ? 1 : 0));
  }
  if (w.arrivals.size() > kMaxArrivals) {
    w.arrivals.erase(
        w.arrivals.begin(),
        w.arrivals.begin() + static_cast<std::ptrdiff_t>(w.arrivals.size() - kMaxArrivals));
  }
}

std::vector<Arrival> StackProbe::take_arrivals(std::size_t index) {
  if (index >= workers_.size()) return {};
  return std::exchange(workers_[index]->arrivals, {});
}

std::size_t StackProbe::request_dumps(const std::vector<std::size_t>& indices) {
  std::size_t asked = 0;
  for (const std::size_t i : indices) {
    if (i >= workers_.size() || dir_.empty()) continue;
    Worker& w = *workers_[i];
    if (w.dump.file.empty() || w.asked || w.dump.answered) continue;
    if (!w.fd || !w.position.sampled) {
      w.dump.answered = true;
      w.dump.why = "no report from ddprun's sampler in the worker (not Python, or -S/-I)";
      continue;
    }
    w.asked = true;  // the hook makes the file's folder when it has a dump
    ++asked;
  }
  if (asked == 0) return 0;
  // The question: a file the hooks look for (each 20 ms sample). Made whole by rename, so a
  // hook never sees half of it (its content is not read).
  const std::string question = dir_ + "/fr_dump";
  std::ofstream(question + ".tmp") << "dump\n";
  std::error_code ec;
  std::filesystem::rename(question + ".tmp", question, ec);
  if (ec) {
    for (auto& w : workers_) {
      if (!w->asked || w->dump.answered) continue;
      w->dump.answered = true;
      w->dump.why = fmt::format("cannot write {}: {}", question, ec.message());
    }
    return 0;
  }
  return asked;
}

void StackProbe::no_dump(std::size_t index, std::string why) {
  if (index >= workers_.size() || workers_[index]->dump.file.empty()) return;
  workers_[index]->dump.answered = true;
  workers_[index]->dump.why = std::move(why);
}

bool StackProbe::dumps_answered() const {
  return std::all_of(workers_.begin(), workers_.end(),
                     [](const auto& w) { return !w->asked || w->dump.answered; });
}

bool StackProbe::dumps_written() const {
  return std::any_of(workers_.begin(), workers_.end(),
                     [](const auto& w) { return w->dump.written; });
}

std::vector<FrDump> StackProbe::dumps() const {
  std::vector<FrDump> out;
  for (const auto& w : workers_) {
    out.push_back(w->dump);
    if (!w->asked && !w->dump.answered) out.back().file.clear();
  }
  return out;
}

void StackProbe::clear() {
  for (auto& w : workers_) {
    if (w->id != 0) loop_.remove(w->id);
  }
  workers_.clear();
  if (dir_.empty()) return;
  std::error_code ec;
  std::filesystem::remove(dir_ + "/fr_dump", ec);  // the next attempt's workers are not asked
}

const StackProbe::Position& StackProbe::position(std::size_t index) const {
  static const Position kNone;
  return index < workers_.size() ? workers_[index]->position : kNone;
}

}  // namespace ddprun::launcher
