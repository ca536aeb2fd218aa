// log_fanout.cpp: StreamRoute and ConsoleWriter, the worker-output path (see
// log_fanout.h). Used by OutputRouter.
#include "launcher/process/log_fanout.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

namespace ddprun::launcher {
namespace {

constexpr std::size_t kMaxWrite = 64 * 1024;

bool is_line_end(char c) { return c == '\n' || c == '\r'; }

// Writes all of `iov` with writev, retrying on EINTR and partial writes. Returns false
// (errno set) on error.
bool write_all(int fd, iovec* iov, int count) {
  while (count > 0) {
    ssize_t n = ::writev(fd, iov, count);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    auto left = static_cast<std::size_t>(n);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return true;
}

}  // namespace

ConsoleWriter::ConsoleWriter(int fd) : fd_(fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    broken_ = true;  // closed stdout: worker console output has nowhere to go
    return;
  }
  if (S_ISFIFO(st.st_mode) || ::isatty(fd)) {
    std::string path = "/proc/self/fd/" + std::to_string(fd);
    UniqueFd reopened(::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (reopened) {
      private_fd_ = std::move(reopened);
      queued_ = true;
    }
  }
}

void ConsoleWriter::write_line(std::uint64_t stream, std::string_view prefix, const Line& line) {
  if (broken_) return;
  if (!must_wait(stream)) {
    emit(stream, prefix, line.text, line.end, line.continued);
    if (owner_ == 0) let_waiting_out();
    return;
  }
  if (waiting_.empty()) waiting_since_ = std::chrono::steady_clock::now();
  Waiting w{
      stream, std::string(prefix), std::string(line.text), std::string(line.end), line.continued,
      false};
  waiting_bytes_ += w.prefix.size() + w.text.size() + w.end.size();
  waiting_.push_back(std::move(w));
  if (waiting_bytes_ > kHighWater) cut();
}

void ConsoleWriter::close_stream(std::uint64_t stream) {
  if (!must_wait(stream)) {
    end_stream(stream);
    if (owner_ == 0) let_waiting_out();
    return;
  }
  if (waiting_.empty()) waiting_since_ = std::chrono::steady_clock::now();
  waiting_.push_back(Waiting{stream, {}, {}, {}, false, true});
}

void ConsoleWriter::unpark(std::uint64_t stream) {
  auto has = [&] {
    return std::any_of(waiting_.begin(), waiting_.end(),
                       [&](const Waiting& w) { return w.stream == stream; });
  };
  // Each cut lets at least the first waiting entry out, so this ends.
  while (has()) cut();
}

std::chrono::steady_clock::time_point ConsoleWriter::wait_deadline() const {
  return waiting_.empty() ? std::chrono::steady_clock::time_point::max()
                          : waiting_since_ + kMaxWait;
}

void ConsoleWriter::on_timer(std::chrono::steady_clock::time_point now) {
  if (!waiting_.empty() && now >= wait_deadline()) cut();
}

void ConsoleWriter::emit(std::uint64_t stream, std::string_view prefix, std::string_view text,
                         std::string_view end, bool continued) {
  std::string_view separator;
  if (MidLine& m = *mid_shared_; m.writer != nullptr && m.writer != this) {
    // The other writer of this terminal or file left it mid-line (a prompt on stdout,
    // this a line on stderr): a newline first; that line resumes under its prefix.
    separator = "\n";
    ConsoleWriter& other = *m.writer;
    if (other.mid_line_ == m.stream) {
      if (!other.mid_line_closed_) other.cut_.push_back(m.stream);
      other.mid_line_ = 0;
    }
    m = MidLine{};
  } else if (mid_line_ != 0 && mid_line_ != stream) {
    // Another stream's bytes end the console mid-line (a cut line, or an unterminated
    // last line): a newline keeps this line off it; a cut line resumes under its prefix.
    separator = "\n";
    if (!mid_line_closed_) cut_.push_back(mid_line_);
    mid_line_ = 0;
  } else if (after_cr_->writer != nullptr &&
             (after_cr_->writer != this || after_cr_->stream != stream)) {
    // Another stream's progress segment ended in a lone '\r': the console (a file, a
    // pipe, grep) is still on that line. A newline keeps this line off it.
    separator = "\n";
  }
  *after_cr_ = end == "\r" ? AfterCr{this, stream} : AfterCr{};
  bool starts_line = !continued;
  if (auto it = std::find(cut_.begin(), cut_.end(), stream); it != cut_.end()) {
    starts_line = true;
    cut_.erase(it);
  }
  put(separator, starts_line ? prefix : std::string_view(), text, end);
  *mid_shared_ = end.empty() ? MidLine{this, stream} : MidLine{};
  if (end.empty()) {
    owner_ = mid_line_ = stream;
    mid_line_closed_ = false;
  } else {
    if (owner_ == stream) owner_ = 0;
    if (mid_line_ == stream) mid_line_ = 0;
  }
}

void ConsoleWriter::end_stream(std::uint64_t stream) {
  cut_.erase(std::remove(cut_.begin(), cut_.end(), stream), cut_.end());
  if (owner_ == stream) owner_ = 0;
  if (mid_line_ == stream) mid_line_closed_ = true;
}

void ConsoleWriter::cut() {
  owner_ = 0;
  let_waiting_out();
}

void ConsoleWriter::let_waiting_out() {
  // In order; an entry of a stream other than a new holder of the console waits on. When
  // the console is released again, the scan restarts (earlier entries may go now).
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (must_wait(it->stream)) {
      ++it;
      continue;
    }
    Waiting w = std::move(*it);
    it = waiting_.erase(it);
    waiting_bytes_ -= w.prefix.size() + w.text.size() + w.end.size();
    if (w.end_of_stream) {
      end_stream(w.stream);
    } else {
      emit(w.stream, w.prefix, w.text, w.end, w.continued);
    }
    if (owner_ == 0) it = waiting_.begin();
  }
  if (!waiting_.empty()) waiting_since_ = std::chrono::steady_clock::now();
}

void ConsoleWriter::put(std::string_view a, std::string_view b, std::string_view c,
                        std::string_view d) {
  const std::size_t size = a.size() + b.size() + c.size() + d.size();
  if (broken_ || size == 0) return;
  enqueued_ += size;
  if (!queued_) {
    iovec iov[4] = {{const_cast<char*>(a.data()), a.size()},
                    {const_cast<char*>(b.data()), b.size()},
                    {const_cast<char*>(c.data()), c.size()},
                    {const_cast<char*>(d.data()), d.size()}};
    if (!write_all(fd_, iov, 4)) {
      broken_ = true;
      spdlog::warn("worker output to fd {} dropped: write failed: {}", fd_, errno_text(errno));
    }
    written_ = enqueued_;
    return;
  }
  bool was_idle = backlog() == 0;
  queue_.append(a).append(b).append(c).append(d);
  if (was_idle) on_writable();
}

void ConsoleWriter::on_writable() {
  while (!broken_ && backlog() > 0) {
    const char* data = queue_.data() + head_;
    std::size_t left = backlog();
    // Batches of whole lines of at most PIPE_BUF bytes: a pipe writes those atomically,
    // so the agent's own log lines (written to the same fd by spdlog) cannot land inside
    // a worker line. A single longer line is written alone.
    std::size_t chunk = left;
    if (left > PIPE_BUF) {
      const char* stop = data + PIPE_BUF;
      const char* last = std::find_if(std::make_reverse_iterator(stop),
                                      std::make_reverse_iterator(data), is_line_end)
                             .base();
      if (last != data) {
        chunk = static_cast<std::size_t>(last - data);
      } else {
        const char* first = std::find_if(data, data + left, is_line_end);
        chunk = std::min<std::size_t>(first == data + left ? left : first - data + 1, kMaxWrite);
      }
    }
    ssize_t n = ::write(private_fd_.get(), data, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return;
      spdlog::warn("worker output to fd {} dropped: write failed: {}", fd_, errno_text(errno));
      broken_ = true;
      drop_backlog(nullptr);
      return;
    }
    head_ += static_cast<std::size_t>(n);
    written_ += static_cast<std::uint64_t>(n);
  }
  if (backlog() == 0) {
    queue_.clear();
    head_ = 0;
  } else if (head_ > kMaxWrite && head_ > queue_.size() / 2) {
    queue_.erase(0, head_);
    head_ = 0;
  }
}

void ConsoleWriter::flush(std::chrono::milliseconds stuck) {
  while (!waiting_.empty()) cut();
  using Clock = std::chrono::steady_clock;
  const auto last_call = Clock::now() + 8 * stuck;
  auto deadline = Clock::now() + stuck;
  while (queued_ && !broken_ && backlog() > 0) {
    const std::size_t before = backlog();
    on_writable();
    if (backlog() == 0) break;
    const auto now = Clock::now();
    if (backlog() < before) deadline = std::min(now + stuck, last_call);  // it still reads
    if (now >= deadline) {
      drop_backlog(now >= last_call ? "the console read too slowly"
                                    : "the console accepted nothing");
      return;
    }
    // Rounded up: a wait truncated to whole milliseconds woke before the deadline, and the
    // console was given up to a millisecond early (a TSan run saw 299.8 ms of 300).
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
    pollfd p{private_fd_.get(), POLLOUT, 0};
    ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 1000)));
  }
}

void ConsoleWriter::drop_backlog(const char* why) {
  if (why != nullptr && backlog() > 0) {
    spdlog::warn("dropped {} bytes of worker output for fd {}: {}", backlog(), fd_, why);
  }
  queue_.clear();
  head_ = 0;
  written_ = enqueued_;
}

StreamRoute::StreamRoute(const StreamSpec& spec, std::string prefix, ConsoleWriter* console)
    : prefix_(std::move(prefix)), file_name_(spec.file) {
  bool to_console = spec.mode != StreamMode::kRedirect && spec.show_on_console;
  console_ = to_console ? console : nullptr;
  if (console_ != nullptr) stream_ = console_->open_stream();
  if (!spec.duplicate_filters.empty() && !spec.duplicate_file.empty()) {
    const std::filesystem::path dup(spec.duplicate_file);
    std::error_code dec;
    if (dup.has_parent_path()) std::filesystem::create_directories(dup.parent_path(), dec);
    dup_file_.reset(
        ::open(spec.duplicate_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (!dup_file_) throw_errno("cannot create log file '" + spec.duplicate_file + "'");
    filters_ = spec.duplicate_filters;
  }
  if (spec.mode == StreamMode::kConsole) return;
  if (spec.file.empty()) throw std::invalid_argument("redirected worker stream has no log file");
  std::filesystem::path path(spec.file);
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  file_.reset(::open(spec.file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644));
  if (!file_) throw_errno("cannot create log file '" + spec.file + "'");
}

void StreamRoute::on_data(std::string_view chunk) {
  if (file_ && !file_broken_) {
    // The file gets the bytes as read: nothing to split, nothing added.
    iovec iov{const_cast<char*>(chunk.data()), chunk.size()};
    if (!write_all(file_.get(), &iov, 1)) {
      file_broken_ = true;
      spdlog::warn("cannot write log file '{}': {}", file_name_, errno_text(errno));
    }
  }
  if (dup_file_) {
    for (const Line& line : dup_splitter_.feed(chunk)) duplicate(line);
  }
  if (console_ == nullptr) return;
  for (const Line& line : splitter_.feed(chunk)) console_->write_line(stream_, prefix_, line);
}

void StreamRoute::on_eof() {
  if (dup_file_) {
    const std::vector<Line>& rest = dup_splitter_.finish();
    for (std::size_t i = 0; i < rest.size(); ++i) duplicate(rest[i], i + 1 == rest.size());
  }
  if (console_ == nullptr) return;
  for (const Line& line : splitter_.finish()) console_->write_line(stream_, prefix_, line);
  console_->close_stream(stream_);
}

void StreamRoute::duplicate(const Line& line, bool last) {
  if (!line.continued) dup_line_.clear();
  dup_line_.append(
      line.text.substr(0, kMaxDuplicateLine - std::min(kMaxDuplicateLine, dup_line_.size())));
  if (!line.complete() && !last) return;  // the stream's unterminated end counts as a line
  const bool match = std::any_of(filters_.begin(), filters_.end(), [&](const std::string& f) {
    return dup_line_.find(f) != std::string::npos;
  });
  if (match) {
    // A whole line per write (O_APPEND: lines of different workers never mix), and a
    // newline after an unterminated last line, so the next worker's line starts its own.
    std::string out = prefix_ + dup_line_ + std::string(line.end.empty() ? "\n" : line.end);
    iovec iov{out.data(), out.size()};
    if (!write_all(dup_file_.get(), &iov, 1)) {
      spdlog::warn("cannot write log file: {}", errno_text(errno));
      dup_file_.reset();
    }
  }
  dup_line_.clear();
}

void StreamRoute::flush_partial() {
  if (console_ == nullptr) return;
  for (const Line& line : splitter_.flush_partial()) console_->write_line(stream_, prefix_, line);
}

void StreamRoute::unpark() {
  if (console_ != nullptr) console_->unpark(stream_);
}

}  // namespace ddprun::launcher
