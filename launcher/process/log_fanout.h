// log_fanout.h: the worker-output path. Each worker stream (a pipe read by the supervisor
// thread) has a StreamRoute: LineSplitter -> whole lines -> the per-rank file and/or a
// ConsoleWriter (the agent's stdout or stderr), one write() per line (or per batch of
// whole lines), so lines of different workers never interleave mid-line.
// Used by OutputRouter (output_router.h); StreamSpec also by WorkerSpec and the Agent.
// Thread-safety: none; everything runs on the supervisor thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "launcher/process/line_splitter.h"
#include "launcher/process/unique_fd.h"

namespace ddprun::launcher {

// Where one of a worker's output streams goes (torchrun's -r/--redirects and -t/--tee).
enum class StreamMode {
  kConsole,   // to the agent's own stdout/stderr, whole lines, unprefixed (torchrun default)
  kRedirect,  // to `file` only
  kTee,       // to `file`, and to the console with the line prefix
};

struct StreamSpec {
  StreamMode mode = StreamMode::kConsole;
  std::string file;             // kRedirect/kTee: created (truncated) before spawning
  bool show_on_console = true;  // false for local ranks filtered out by --local-ranks-filter
};

// The agent's stdout or stderr as seen by worker lines.
// If the fd is a pipe or a terminal, the writer reopens it through /proc/self/fd as a
// private non-blocking open file description (setting O_NONBLOCK on fd 1 itself would
// change the description shared with the shell and every other process using it) and
// queues lines while the reader is slow; the supervisor then waits for EPOLLOUT on
// poll_fd(). Otherwise (regular file, socket, /dev/null, or the reopen fails) lines are
// written at once with blocking writes.
class ConsoleWriter {
 public:
  // Above this many queued bytes the supervisor stops reading console-bound worker pipes,
  // so a slow console slows the workers (as with torchrun, whose workers share its
  // stdout) instead of growing memory. Pipes of an exited worker are still drained.
  static constexpr std::size_t kHighWater = 1 << 20;

  explicit ConsoleWriter(int fd);  // `fd` is not owned and must outlive the writer

  void write_line(std::string_view prefix, const Line& line);

  // -1 when writes are blocking; else the fd to watch for EPOLLOUT while backlog() > 0.
  int poll_fd() const { return queued_ ? private_fd_.get() : -1; }
  std::size_t backlog() const { return queue_.size() - head_; }
  bool over_high_water() const { return backlog() > kHighWater; }
  // Writes queued bytes until the fd would block (call on EPOLLOUT).
  void on_writable();
  // Blocks until the backlog is written or `limit` passes (what is left is dropped, with a
  // warning: a console that accepts nothing for that long must not hang the agent).
  void flush(std::chrono::milliseconds limit);

  // Byte counters: an event that must not overtake the output queued before it waits
  // until written() reaches the enqueued() value taken when it was queued.
  std::uint64_t enqueued() const { return enqueued_; }
  std::uint64_t written() const { return written_; }

 private:
  void drop_backlog(const char* why);

  int fd_;
  UniqueFd private_fd_;  // non-blocking reopen of fd_, when queued_
  bool queued_ = false;
  bool broken_ = false;  // a write failed (EPIPE...): output to this console is dropped
  std::string queue_;
  std::size_t head_ = 0;
  std::uint64_t enqueued_ = 0;
  std::uint64_t written_ = 0;
};

// One worker stream (stdout or stderr) as its StreamSpec asks: kConsole -> console only;
// kRedirect -> file only; kTee -> both. Console lines carry `prefix` (if non-empty);
// file lines never do. show_on_console=false drops the console part.
class StreamRoute {
 public:
  // Creates (truncates) spec.file for kRedirect/kTee, and its parent directories.
  // Throws std::system_error naming the file.
  StreamRoute(const StreamSpec& spec, std::string prefix, ConsoleWriter* console);

  void on_data(std::string_view chunk);
  void on_eof();  // flushes a final unterminated line
  bool uses_console() const { return console_ != nullptr; }

 private:
  void emit(const Line& line);

  LineSplitter splitter_;
  std::string prefix_;
  ConsoleWriter* console_ = nullptr;  // null: not shown on the console
  UniqueFd file_;
  std::string file_name_;
  bool file_broken_ = false;
};

}  // namespace ddprun::launcher
