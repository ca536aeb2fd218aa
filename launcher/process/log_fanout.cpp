// log_fanout.cpp: see log_fanout.h.
#include "launcher/process/log_fanout.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include <spdlog/spdlog.h>

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

void ConsoleWriter::write_line(std::string_view prefix, const Line& line) {
  if (broken_) return;
  std::size_t size = prefix.size() + line.text.size() + line.end.size();
  enqueued_ += size;
  if (!queued_) {
    iovec iov[3] = {{const_cast<char*>(prefix.data()), prefix.size()},
                    {const_cast<char*>(line.text.data()), line.text.size()},
                    {const_cast<char*>(line.end.data()), line.end.size()}};
    if (!write_all(fd_, iov, 3)) {
      broken_ = true;
      spdlog::warn("worker output to fd {} dropped: write failed: {}", fd_, errno_text(errno));
    }
    written_ = enqueued_;
    return;
  }
  bool was_idle = backlog() == 0;
  queue_.append(prefix).append(line.text).append(line.end);
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
                                      std::make_reverse_iterator(data), is_line_end).base();
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

void ConsoleWriter::flush(std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (queued_ && !broken_ && backlog() > 0) {
    on_writable();
    if (backlog() == 0) break;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      drop_backlog("the console accepted nothing");
      return;
    }
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
  if (spec.mode == StreamMode::kConsole) return;
  if (spec.file.empty()) throw std::invalid_argument("redirected worker stream has no log file");
  std::filesystem::path path(spec.file);
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  file_.reset(::open(spec.file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC,
                     0644));
  if (!file_) throw_errno("cannot create log file '" + spec.file + "'");
}

void StreamRoute::on_data(std::string_view chunk) {
  for (const Line& line : splitter_.feed(chunk)) emit(line);
}

void StreamRoute::on_eof() {
  for (const Line& line : splitter_.finish()) emit(line);
}

void StreamRoute::emit(const Line& line) {
  if (console_ != nullptr) console_->write_line(prefix_, line);
  if (file_ && !file_broken_) {
    iovec iov[2] = {{const_cast<char*>(line.text.data()), line.text.size()},
                    {const_cast<char*>(line.end.data()), line.end.size()}};
    if (!write_all(file_.get(), iov, 2)) {
      file_broken_ = true;
      spdlog::warn("cannot write log file '{}': {}", file_name_, errno_text(errno));
    }
  }
}

}  // namespace ddprun::launcher
