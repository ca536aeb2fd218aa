// stack_probe.cpp: StackProbe (see stack_probe.h) and the Python hook it installs.
#include "launcher/process/stack_probe.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <utility>

#include "launcher/process/descendants.h"

namespace ddprun::launcher {
namespace {

// "<file>:<line> <function>" as "<file>:<line> in <function>".
std::string frame_text(const std::string& frame) {
  const std::size_t last = frame.rfind(' ');
  return last == std::string::npos ? frame
                                   : frame.substr(0, last) + " in " + frame.substr(last + 1);
}

// The hook. Runs at interpreter start (site.py imports sitecustomize); must never break
// the worker: every failure leaves it without the sampler.
constexpr const char* kHook =
    R"PY(# Written by ddprun for --stall-timeout (launcher/process/stack_probe.cpp); removed
# when ddprun ends. A thread samples where the main thread is and reports it to ddprun.
import os as _os
import sys as _sys


# Never found again (the chained import below would find this file).
_here = _os.path.dirname(_os.path.abspath(__file__))
_sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or ".") != _here]


def _ddprun_stack_probe():
    here = _os.environ.pop("DDPRUN_STACK_DIR", None)
    fd = _os.environ.pop("DDPRUN_STACK_FD", None)
    interval = float(_os.environ.pop("DDPRUN_STACK_INTERVAL", "1"))
    # The program and its children see the user's PYTHONPATH, without this directory.
    if "DDPRUN_STACK_PYTHONPATH" in _os.environ:
        _os.environ["PYTHONPATH"] = _os.environ.pop("DDPRUN_STACK_PYTHONPATH")
    elif here:
        _os.environ.pop("PYTHONPATH", None)
    if fd is None:
        return
    fd = int(fd)
    _os.set_inheritable(fd, False)
    _os.set_blocking(fd, False)
    import _thread
    import time

    main = _thread.get_ident()
    pid = _os.getpid()
    # The start-up timeline (ns since the epoch; 0: not yet): this interpreter up, torch
    # imported, the process group formed, the first collective entered.
    start = [time.time_ns(), 0, 0, 0]
    start_sent = [False]

    def startup():
        if not start[1]:
            torch = _sys.modules.get("torch")
            # importlib sets __spec__._initializing while the module runs.
            if torch is not None and not getattr(getattr(torch, "__spec__", None),
                                                 "_initializing", False):
                start[1] = time.time_ns()
        if start[1] and not start[2]:
            dist = _sys.modules.get("torch.distributed")
            if dist is not None and getattr(dist, "is_initialized", lambda: False)():
                start[2] = time.time_ns()
    period = min(0.02, interval)
    # Frames of the interpreter's library and installed packages (torch's all_reduce,
    # threading) are not the user's: the report also names the innermost frame outside.
    lib = _os.path.dirname(_os.__file__) + _os.sep

    def library(name):
        return (name.startswith(lib) or name.startswith("<") or "/site-packages/" in name
                or "/dist-packages/" in name)

    def joined(frame):
        # The thread whose Thread.join the stack of `frame` waits in (None: none). The
        # threading module is never imported here: imported first by this thread, it
        # would take this thread for the main one.
        threading = _sys.modules.get("threading")
        join = getattr(getattr(threading, "Thread", None), "join", None)
        code = getattr(join, "__code__", None)
        while code is not None and frame is not None:
            if frame.f_code is code:
                return getattr(frame.f_locals.get("self"), "ident", None)
            frame = frame.f_back
        return None

    def work(frames):
        # The main thread's innermost frame, or, while it joins a thread (training in a
        # thread), that thread's (followed a few levels).
        ident = main
        for _ in range(4):
            nxt = joined(frames.get(ident))
            if nxt is None or nxt == ident or nxt not in frames:
                break
            ident = nxt
        return ident, frames.get(ident)

    # PyTorch's flight recorder (2.14+, on when TORCH_FR_BUFFER_SIZE > 0): per process
    # group, the last collective this rank entered and completed, and when it entered each
    # new one. Any failure switches this part off, never the worker.
    rec = {"dump": None, "off": False, "sent": {}}

    def recorder():
        # Not before torch's import is done (its modules are half made until then).
        dist = _sys.modules.get("torch.distributed")
        initialized = getattr(dist, "is_initialized", None)
        if rec["off"] or not start[1] or initialized is None or not initialized():
            return ""
        if rec["dump"] is None:
            dump = getattr(_sys.modules.get("torch._C._distributed_c10d"), "_dump_fr_trace_json",
                           None)
            if dump is None:
                rec["off"] = True
                return ""
            import json
            rec["dump"], rec["json"] = dump, json
        trace = rec["json"].loads(rec["dump"](True, False))
        status = trace.get("pg_status") or {}
        last, new = {}, {}
        for e in trace.get("entries") or ():
            if e.get("is_p2p"):
                continue
            pg, seq = int(e["pg_id"]), int(e["collective_seq_id"])
            if seq > last.get(pg, (-1, ""))[0]:
                last[pg] = (seq, str(e.get("profiling_name") or "?").replace(" ", "_"))
            if seq > rec["sent"].get(pg, 0):
                new.setdefault(pg, []).append((seq, int(e["time_created_ns"])))
        lines = []
        if new and not start[3]:
            start[3] = min(t for arrivals in new.values() for _, t in arrivals)
        for pg in sorted(last)[:8]:
            st = status.get(str(pg)) or {}
            seq, op = last[pg]
            entered = max(seq, int(st.get("last_enqueued_collective", -1)))
            lines.append("F %d %d %d %s\n" % (pg, entered, int(st.get("last_completed_collective",
                                                                          -1)), op[:64]))
        size = sum(map(len, lines))
        for pg in sorted(new)[:8]:
            arrivals = sorted(new[pg])[-64:]
            rec["sent"][pg] = arrivals[-1][0]
            line = "A %d%s\n" % (pg, "".join(" %d:%d" % a for a in arrivals))
            if size + len(line) <= 4000:  # one atomic write (PIPE_BUF): a few are dropped
                lines.append(line)
                size += len(line)
        return "".join(lines)

    def run():
        # The innermost frame is held until the next sample, so that a new call (a loop
        # calling a function, seen at the same back edge each time) is a new object.
        last, last_frame, moves, report = None, None, 0, 0.0
        while True:
            time.sleep(period)
            frames = _sys._current_frames()
            if main not in frames:
                return
            ident, frame = work(frames)
            frames = None
            if not start[2]:
                startup()
            key, f = [ident], frame
            while f is not None:
                key.append((id(f.f_code), f.f_lasti))
                f = f.f_back
            if key != last or frame is not last_frame:
                moves += last is not None
                last = key
            last_frame = frame
            now = time.monotonic()
            if now >= report:
                report = now + interval
                code = frame.f_code
                where = "%s:%s %s" % (code.co_filename, frame.f_lineno, code.co_name)
                f = frame
                while f is not None and library(f.f_code.co_filename):
                    f = f.f_back
                if f is not None and f is not frame:
                    where += "\t%s:%s %s" % (f.f_code.co_filename, f.f_lineno, f.f_code.co_name)
                f = None
                data = ("%d %d %s\n" % (moves, pid, where)).encode("utf-8", "replace")
                if len(data) > 2048:
                    data = b"%d %d ?\n" % (moves, pid)
                try:
                    # Before the position line, which ends the report; written apart, each
                    # write at most PIPE_BUF bytes (whole or not at all).
                    records = recorder().encode("ascii", "replace")
                except Exception:
                    rec["off"], records = True, b""
                if not start_sent[0]:
                    # Until every phase is known (the last once the recorder is off).
                    start_sent[0] = all(start) or (rec["off"] and start[2] > 0)
                    records = (b"S %d %d %d %d\n" % tuple(start)) + records
                try:
                    if records:
                        _os.write(fd, records)
                    _os.write(fd, data)
                except BlockingIOError:
                    pass
                except OSError:
                    return
            frame = None

    _thread.start_new_thread(run, ())


try:
    _ddprun_stack_probe()
except Exception:
    pass
del _ddprun_stack_probe

# Load the sitecustomize this one hides, as site.py would have (this module stays in
# sys.modules when there is none: the import system expects an entry).
_self = _sys.modules.pop("sitecustomize", None)
try:
    import sitecustomize  # noqa: F401
except ImportError as _e:
    if _e.name != "sitecustomize":
        raise
finally:
    if _self is not None:
        _sys.modules.setdefault("sitecustomize", _self)
)PY";

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
  f << kHook;
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

UniqueFd StackProbe::add(std::vector<std::string>& env) {
  auto w = std::make_unique<Worker>();
  Worker& worker = *w;
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
  std::string path;
  bool had_path = false;
  for (const std::string& kv : env) {
    if (kv.starts_with("PYTHONPATH=")) {
      path = kv.substr(11);
      had_path = true;
    }
  }
  // The flight recorder on, with a small buffer, unless the user set its size (0: off).
  bool recorder_set = false;
  for (const std::string& kv : env) {
    recorder_set = recorder_set || kv.starts_with("TORCH_FR_BUFFER_SIZE=") ||
                   kv.starts_with("TORCH_NCCL_TRACE_BUFFER_SIZE=");
  }
  if (!recorder_set) {
    set_env_entry(env, "TORCH_FR_BUFFER_SIZE", std::to_string(kFlightRecorderEntries));
  }
  if (had_path) set_env_entry(env, "DDPRUN_STACK_PYTHONPATH", path);
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
  // <seq>:<ns> ...\n", the group's new arrivals.
  std::size_t end;
  while ((end = w.partial.find('\n')) != std::string::npos) {
    std::string_view rest(w.partial.data(), end);
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

void StackProbe::clear() {
  for (auto& w : workers_) {
    if (w->id != 0) loop_.remove(w->id);
  }
  workers_.clear();
}

const StackProbe::Position& StackProbe::position(std::size_t index) const {
  static const Position kNone;
  return index < workers_.size() ? workers_[index]->position : kNone;
}

}  // namespace ddprun::launcher
