// log_fanout.h: the worker-output path: per stream a StreamRoute (bytes to the per-rank
// file, byte-exact; lines to a ConsoleWriter, never interleaved mid-line with another
// worker's). Used by OutputRouter (output_router.h); StreamSpec also by WorkerSpec and the
// Agent. Thread-safety: none; everything runs on the supervisor thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/unique_fd.h"
#include "launcher/process/line_splitter.h"

namespace ddprun::launcher {

// Each worker stream (a pipe read by the supervisor thread) has a StreamRoute: the bytes
// as read -> the per-rank file (byte-exact), and LineSplitter -> lines -> a ConsoleWriter
// (the agent's stdout or stderr). The console gets every byte of every worker unchanged
// (plus the prefix at the start of each line, when tee'd), and lines of different workers
// never interleave mid-line: a line longer than the splitter's 64 KiB piece holds the
// console until its end (see ConsoleWriter).

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
  // torchrun's --duplicate-std*-filters: the lines that contain any of these strings are
  // also appended, with the console prefix, to `duplicate_file` (shared by every rank of
  // the attempt; opened O_APPEND, one write per line, a newline added after an
  // unterminated last line). Empty: none.
  std::vector<std::string> duplicate_filters{};
  std::string duplicate_file{};
};

// The agent's stdout or stderr as seen by worker lines.
// If the fd is a pipe or a terminal, the writer reopens it through /proc/self/fd as a
// private non-blocking open file description (setting O_NONBLOCK on fd 1 itself would
// change the description shared with the shell and every other process using it) and
// queues lines while the reader is slow; the supervisor then waits for EPOLLOUT on
// poll_fd(). Otherwise (regular file, socket, /dev/null, or the reopen fails) lines are
// written at once with blocking writes.
//
// Lines in progress. A stream that writes an incomplete piece (the first 64 KiB of a
// longer line) holds the console until it writes the line's end, so the line comes out
// whole under one prefix; the complete lines of other streams wait meanwhile, in order.
// They wait at most kMaxWait, or until kHighWater bytes wait, or until their worker exits
// (unpark): then the line in progress is cut, i.e. a newline goes to the console, the
// waiting lines follow, and the rest of the cut line later starts a new console line
// under the same prefix. Likewise a stream that ends in an unterminated line is followed
// by a newline only if another stream writes to the console after it, and so is a
// piece ended by a lone '\r' (a progress bar's segment: the console is still on its
// line). Only these newlines are ever added; each tells one worker's bytes from another's.
class ConsoleWriter {
 public:
  // Above this many queued bytes the supervisor stops reading console-bound worker pipes,
  // so a slow console slows the workers (as with torchrun, whose workers share its
  // stdout) instead of growing memory. Pipes of an exited worker are still drained.
  // Also the most bytes of other streams that wait behind a line in progress.
  static constexpr std::size_t kHighWater = 1 << 20;
  // The longest other streams' lines wait behind a line in progress.
  static constexpr std::chrono::milliseconds kMaxWait{1000};

  explicit ConsoleWriter(int fd);  // `fd` is not owned and must outlive the writer

  // `other` writes to the same terminal or file (the agent's stdout and stderr both a
  // terminal, or `2>&1`): a lone '\r' piece of one writer's stream, or a piece that
  // leaves the console mid-line (a prompt), is followed by a newline before the other
  // writer's next piece too (and the interrupted line resumes under its prefix).
  void share_line_with(ConsoleWriter& other) {
    other.after_cr_ = after_cr_;
    other.mid_shared_ = mid_shared_;
  }

  // A new stream (a StreamRoute) writing to this console.
  std::uint64_t open_stream() { return ++last_stream_; }
  // One line or piece of `stream`; `prefix` goes before the first piece of each line.
  void write_line(std::uint64_t stream, std::string_view prefix, const Line& line);
  // End of `stream` (after its last line): a line it left open no longer holds the console.
  void close_stream(std::uint64_t stream);
  // Lets `stream`'s waiting lines out now, cutting the line in progress if need be (its
  // worker exited: its last words must reach the console before its exit is reported).
  void unpark(std::uint64_t stream);
  // When the lines waiting behind a line in progress must be let out (time_point::max()
  // when none wait); on_timer() does it once that time has come.
  std::chrono::steady_clock::time_point wait_deadline() const;
  void on_timer(std::chrono::steady_clock::time_point now);

  int fd() const { return fd_; }
  // -1 when writes are blocking; else the fd to watch for EPOLLOUT while backlog() > 0.
  int poll_fd() const { return queued_ ? private_fd_.get() : -1; }
  std::size_t backlog() const { return queue_.size() - head_; }
  bool over_high_water() const { return backlog() > kHighWater; }
  // Writes queued bytes until the fd would block (call on EPOLLOUT).
  void on_writable();
  // Lets every waiting line out, then blocks until the backlog is written, or until the
  // console has accepted nothing for `stuck` (what is left is dropped, with a warning: a
  // console that stopped reading must not hang the agent). A slow console that still
  // reads (a loaded machine, a terminal scrolling) gets its output, at most 8 x `stuck`.
  void flush(std::chrono::milliseconds stuck);

  // Byte counters: an event that must not overtake the output queued before it waits
  // until written() reaches the enqueued() value taken when it was queued.
  std::uint64_t enqueued() const { return enqueued_; }
  std::uint64_t written() const { return written_; }

 private:
  // A line or piece of a stream other than the one holding the console, or its end.
  struct Waiting {
    std::uint64_t stream;
    std::string prefix;
    std::string text;
    std::string end;
    bool continued;
    bool end_of_stream;
  };

  void drop_backlog(const char* why);
  // Writes one piece now: the separating newline if another stream left the console
  // mid-line, the prefix where a line starts, the bytes; updates who holds the console.
  void emit(std::uint64_t stream, std::string_view prefix, std::string_view text,
            std::string_view end, bool continued);
  void end_stream(std::uint64_t stream);
  bool must_wait(std::uint64_t stream) const { return owner_ != 0 && owner_ != stream; }
  // The line in progress stops holding the console; waiting lines go out.
  void cut();
  void let_waiting_out();
  void put(std::string_view a, std::string_view b, std::string_view c, std::string_view d);

  int fd_;
  UniqueFd private_fd_;  // non-blocking reopen of fd_, when queued_
  bool queued_ = false;
  bool broken_ = false;  // a write failed (EPIPE...): output to this console is dropped
  std::string queue_;
  std::size_t head_ = 0;
  std::uint64_t enqueued_ = 0;
  std::uint64_t written_ = 0;
  // Lines in progress.
  std::uint64_t last_stream_ = 0;
  std::uint64_t owner_ = 0;       // the stream whose line holds the console, or 0
  std::uint64_t mid_line_ = 0;    // the stream whose bytes end the console mid-line
  bool mid_line_closed_ = false;  // ... and that stream has ended
  // The stream whose last piece ended with a lone '\r' (and its writer), shared with the
  // writer of the same terminal or file when there is one (share_line_with).
  struct AfterCr {
    const ConsoleWriter* writer = nullptr;  // nullptr: no piece ended so
    std::uint64_t stream = 0;
  };
  std::shared_ptr<AfterCr> after_cr_ = std::make_shared<AfterCr>();
  // The writer whose last piece left the console mid-line, shared likewise.
  struct MidLine {
    ConsoleWriter* writer = nullptr;  // nullptr: the console is at a line start
    std::uint64_t stream = 0;
  };
  std::shared_ptr<MidLine> mid_shared_ = std::make_shared<MidLine>();
  std::vector<std::uint64_t> cut_;  // open streams whose line in progress was cut
  std::deque<Waiting> waiting_;
  std::size_t waiting_bytes_ = 0;
  std::chrono::steady_clock::time_point waiting_since_;
};

// One worker stream (stdout or stderr) as its StreamSpec asks: kConsole -> console only;
// kRedirect -> file only; kTee -> both. Console lines carry `prefix` (if non-empty);
// the file gets exactly the bytes read, as soon as they are read. show_on_console=false
// drops the console part.
class StreamRoute {
 public:
  // Creates (truncates) spec.file for kRedirect/kTee, and its parent directories.
  // Throws std::system_error naming the file.
  StreamRoute(const StreamSpec& spec, std::string prefix, ConsoleWriter* console);

  void on_data(std::string_view chunk);
  void on_eof();  // the last, unterminated line; the stream's end to the console
  // A partial line waits for the console (a prompt without a newline).
  bool has_partial() const { return console_ != nullptr && splitter_.flushable() > 0; }
  // Lets it out now as a piece of its line (the line's continuation gets no second
  // prefix unless another stream's output came in between).
  void flush_partial();
  bool uses_console() const { return console_ != nullptr; }
  // The worker exited: its lines waiting behind another's long line go out now.
  void unpark();

 private:
  LineSplitter splitter_;
  std::string prefix_;
  ConsoleWriter* console_ = nullptr;  // null: not shown on the console
  std::uint64_t stream_ = 0;          // this stream's id at console_
  UniqueFd file_;
  std::string file_name_;
  bool file_broken_ = false;
  // --duplicate-std*-filters (StreamSpec): a splitter of its own, the line so far (kept
  // up to kMaxDuplicateLine bytes), the shared file.
  static constexpr std::size_t kMaxDuplicateLine = 1 << 20;
  void duplicate(const Line& line, bool last = false);
  std::vector<std::string> filters_;
  LineSplitter dup_splitter_;
  std::string dup_line_;
  UniqueFd dup_file_;
};

}  // namespace ddprun::launcher
