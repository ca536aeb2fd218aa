// output_router.cpp: OutputRouter (see output_router.h): the workers' pipes, console
// back-pressure, held events and stderr tails. Used by ProcessSupervisor.
#include "launcher/process/output_router.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace ddprun::launcher {
namespace {

using Clock = std::chrono::steady_clock;

// Per readable event, at most this much is read from one pipe, so one chatty worker
// cannot starve the others or the exit handling (epoll is level-triggered).
constexpr std::size_t kReadChunk = 64 * 1024;
constexpr int kReadsPerWakeup = 4;
// An exit event waits for the console output queued before it at most this long: a
// console that stopped reading must not keep a failure from the agent (never a hang).
constexpr std::chrono::milliseconds kHoldLimit{1000};

// A pipe whose read end (returned in `read_end`) is non-blocking; both ends close-on-exec
// (the child gets its end through dup2, which clears the flag there).
UniqueFd make_pipe(UniqueFd* read_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("pipe2");
  read_end->reset(fds[0]);
  // Only our read end is non-blocking (a separate open file description).
  ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
  return UniqueFd(fds[1]);
}

// A pty standing in for a pipe: the master (returned in `read_end`, non-blocking,
// close-on-exec) is read like a pipe's read end; the slave is returned (close-on-exec,
// not a controlling terminal). Output processing is off (no "\n" -> "\r\n"), so the
// bytes arrive as written; the window size is the console's. Invalid when no pty can be
// had (then the caller uses a pipe).
UniqueFd make_pty(int console_fd, UniqueFd* read_end) {
  UniqueFd master(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
  char name[128];
  if (!master || ::grantpt(master.get()) != 0 || ::unlockpt(master.get()) != 0 ||
      ::ptsname_r(master.get(), name, sizeof name) != 0) {
    return UniqueFd();
  }
  UniqueFd slave(::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!slave) return UniqueFd();
  termios t{};
  if (::tcgetattr(slave.get(), &t) == 0) {
    t.c_oflag &= ~static_cast<tcflag_t>(OPOST);
    ::tcsetattr(slave.get(), TCSANOW, &t);
  }
  winsize ws{};
  if (::ioctl(console_fd, TIOCGWINSZ, &ws) == 0) ::ioctl(slave.get(), TIOCSWINSZ, &ws);
  ::fcntl(master.get(), F_SETFL, O_NONBLOCK);
  *read_end = std::move(master);
  return slave;
}

}  // namespace

OutputRouter::OutputRouter(EventLoop& loop, int console_stdout_fd, int console_stderr_fd,
                           Deliver deliver)
    : loop_(loop),
      out_tty_(::isatty(console_stdout_fd) == 1),
      err_tty_(::isatty(console_stderr_fd) == 1),
      out_(console_stdout_fd),
      err_(console_stderr_fd),
      deliver_(std::move(deliver)) {
  // stdout and stderr on one terminal or file: one console line position for both.
  struct stat a {};
  struct stat b {};
  if (::fstat(console_stdout_fd, &a) == 0 && ::fstat(console_stderr_fd, &b) == 0 &&
      a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
    out_.writer.share_line_with(err_.writer);
  }
}

OutputRouter::~OutputRouter() { loop_.cancel_timer(timer_); }

OutputRouter::ChildEnds OutputRouter::add(const WorkerSpec& spec) {
  // Only tee'd streams carry the prefix on the console, as torchrun's (-t 1 prefixes
  // stdout lines and leaves stderr lines bare), unless the spec asks for it everywhere.
  auto make = [&](const StreamSpec& s, Console& console, UniqueFd* child_end) {
    auto pipe = std::make_unique<Pipe>();
    const bool tty = &console == &out_ ? out_tty_ : err_tty_;
    // A pty only for a stream that goes to the console alone: a worker that sees a
    // terminal writes colours and '\r' progress bars, which a tee'd log file (-t) would
    // keep; there it writes to a pipe, as under torchrun.
    if (spec.terminal && tty && s.show_on_console && s.mode == StreamMode::kConsole) {
      *child_end = make_pty(console.writer.fd(), &pipe->fd);
      pipe->tty = child_end->valid();
      if (!pipe->tty) spdlog::debug("no pty for a worker ({}); using a pipe", errno_text(errno));
    }
    if (!pipe->tty) *child_end = make_pipe(&pipe->fd);
    const std::string prefix =
        s.mode == StreamMode::kTee || spec.prefix_all ? spec.line_prefix : std::string();
    pipe->route = std::make_unique<StreamRoute>(s, prefix, &console.writer);
    pipe->console = &console.writer;
    return pipe;
  };
  ChildEnds ends;
  auto out = make(spec.out, out_, &ends.out);
  auto err = make(spec.err, err_, &ends.err);
  err->tail_limit = WorkerExit::kStderrTailBytes;
  pipes_.push_back(std::move(out));
  pipes_.push_back(std::move(err));
  watch(*pipes_[pipes_.size() - 2]);
  watch(*pipes_.back());
  return ends;
}

void OutputRouter::watch(Pipe& pipe) {
  pipe.id = loop_.add(pipe.fd.get(), EPOLLIN, [this, &pipe](std::uint32_t events) {
    if (pipe.fd && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) read(pipe, false);
  });
}

void OutputRouter::drain(std::size_t index) {
  for (std::size_t i : {2 * index, 2 * index + 1}) {
    read(*pipes_.at(i), true);
    pipes_[i]->route->unpark();
  }
}

void OutputRouter::close_all() {
  for (auto& pipe : pipes_) {
    // Every writer in the group is dead; take what is left, but never wait for writers
    // outside the group (a grandchild that called setsid itself).
    read(*pipe, true);
    if (pipe->fd) {
      pipe->route->on_eof();
      close(*pipe);
    }
  }
  pipes_.clear();
}

void OutputRouter::take_stderr_tail(std::size_t index, WorkerExit& exit) const {
  const Pipe& pipe = *pipes_.at(2 * index + 1);
  const std::size_t keep = std::min(pipe.tail.size(), pipe.tail_limit);
  exit.stderr_tail = pipe.tail.substr(pipe.tail.size() - keep);
  exit.stderr_tail_cut = pipe.tail_cut || keep < pipe.tail.size();
}

std::uint64_t OutputRouter::bytes_read(std::size_t index) const {
  return pipes_.at(2 * index)->bytes + pipes_.at(2 * index + 1)->bytes;
}

bool OutputRouter::held_back(std::size_t index) const {
  const auto held = [](const Pipe& p) { return p.fd && p.paused; };
  return held(*pipes_.at(2 * index)) || held(*pipes_.at(2 * index + 1));
}

void OutputRouter::keep_tail(Pipe& pipe, std::string_view chunk) {
  pipe.tail.append(chunk);
  // Trimmed back to tail_limit once it holds twice that: each byte is copied at most twice.
  if (pipe.tail.size() >= 2 * pipe.tail_limit) {
    pipe.tail.erase(0, pipe.tail.size() - pipe.tail_limit);
    pipe.tail_cut = true;
  }
}

void OutputRouter::read(Pipe& pipe, bool drain) {
  if (!pipe.fd) return;
  if (!drain && pipe.paused) return;
  // A drain takes what is in the pipe now (all of an exited worker's output) plus one
  // byte to see EOF, and no more: a grandchild that keeps writing must not keep the
  // supervisor in this loop.
  std::size_t budget = kReadsPerWakeup * kReadChunk;
  if (drain) {
    int avail = 0;
    budget = ::ioctl(pipe.fd.get(), FIONREAD, &avail) == 0 ? std::size_t(avail) + 1 : budget;
    // A pty's count leaves out bytes still in its flip buffer (a read takes them).
    if (pipe.tty) budget = std::max<std::size_t>(budget, kReadsPerWakeup * kReadChunk);
  }
  char buf[kReadChunk];
  while (budget > 0) {
    ssize_t n = ::read(pipe.fd.get(), buf, std::min(sizeof buf, budget));
    if (n > 0) {
      budget -= static_cast<std::size_t>(n);
      const std::string_view chunk(buf, static_cast<std::size_t>(n));
      pipe.bytes += static_cast<std::size_t>(n);
      pipe.route->on_data(chunk);
      if (pipe.tail_limit > 0) keep_tail(pipe, chunk);
      if (!pipe.route->has_partial()) {
        pipe.partial_at = Clock::time_point::max();
      } else if (pipe.partial_at == Clock::time_point::max()) {
        pipe.partial_at = Clock::now() + kPartialWait;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    // EOF (or a read error, treated alike): flush the last partial line.
    pipe.route->on_eof();
    close(pipe);
    return;
  }
}

void OutputRouter::close(Pipe& pipe) {
  if (!pipe.fd) return;
  loop_.remove(pipe.id);
  pipe.id = 0;
  pipe.fd.reset();
  pipe.partial_at = Clock::time_point::max();
}

void OutputRouter::hold(const SupervisorEvent& event) {
  held_.push_back(
      Held{event, out_.writer.enqueued(), err_.writer.enqueued(), Clock::now() + kHoldLimit});
}

void OutputRouter::release_ready() {
  const auto now = Clock::now();
  while (!held_.empty() && ((out_.writer.written() >= held_.front().out_mark &&
                             err_.writer.written() >= held_.front().err_mark) ||
                            now >= held_.front().deadline)) {
    const SupervisorEvent event = held_.front().event;
    held_.pop_front();
    deliver_(event);
  }
}

std::vector<SupervisorEvent> OutputRouter::take_held() {
  std::vector<SupervisorEvent> taken;
  for (const Held& h : held_) taken.push_back(h.event);
  held_.clear();
  return taken;
}

void OutputRouter::rearm() {
  auto next = std::min(out_.writer.wait_deadline(), err_.writer.wait_deadline());
  if (!held_.empty()) next = std::min(next, held_.front().deadline);
  for (const auto& pipe : pipes_) next = std::min(next, pipe->partial_at);
  if (next == timer_at_) return;
  loop_.cancel_timer(timer_);
  timer_ = 0;
  timer_at_ = next;
  if (next == Clock::time_point::max()) return;
  // The work is after_wakeup's (release_ready, sync): the timer only wakes the loop.
  timer_ = loop_.add_timer(next, [this] {
    timer_ = 0;
    timer_at_ = Clock::time_point::max();
  });
}

void OutputRouter::sync_console(Console& console) {
  const int fd = console.writer.poll_fd();
  if (fd >= 0 && console.writer.backlog() > 0 && console.id == 0) {
    console.id =
        loop_.add(fd, EPOLLOUT, [&console](std::uint32_t) { console.writer.on_writable(); });
  } else if (console.id != 0 && console.writer.backlog() == 0) {
    loop_.remove(console.id);
    console.id = 0;
  }
}

void OutputRouter::sync() {
  const auto now = Clock::now();
  for (auto& pipe : pipes_) {
    if (pipe->partial_at > now) continue;
    pipe->partial_at = Clock::time_point::max();
    pipe->route->flush_partial();
  }
  out_.writer.on_timer(now);
  err_.writer.on_timer(now);
  sync_console(out_);
  sync_console(err_);
  rearm();
  // Back-pressure: stop reading console-bound pipes while their console is over its mark.
  for (auto& pipe : pipes_) {
    if (!pipe->fd || !pipe->route->uses_console()) continue;
    const bool pause = pipe->console->over_high_water();
    if (pause == pipe->paused) continue;
    pipe->paused = pause;
    // Removed rather than set to no events: epoll reports EPOLLHUP regardless of the
    // mask, which would spin the loop on a paused pipe whose writer has gone.
    if (pause) {
      loop_.remove(pipe->id);
      pipe->id = 0;
    } else {
      watch(*pipe);
    }
  }
}

void OutputRouter::flush_consoles(std::chrono::milliseconds limit) {
  out_.writer.flush(limit);
  err_.writer.flush(limit);
}

}  // namespace ddprun::launcher
