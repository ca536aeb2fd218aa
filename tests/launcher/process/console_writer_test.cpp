// ConsoleWriter's flush at a supervisor's end, against a real pipe whose reader is slow or
// has stopped: a console that still reads gets every byte; one that reads nothing is given
// up after the stated time, the rest dropped.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "base/unique_fd.h"
#include "launcher/process/log_fanout.h"

using ddprun::UniqueFd;
using ddprun::launcher::ConsoleWriter;
using ddprun::launcher::Line;
using namespace std::chrono_literals;

namespace {

struct Pipe {
  Pipe() {
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    read.reset(fds[0]);
    write.reset(fds[1]);
  }
  UniqueFd read, write;
};

// Queues `lines` lines of 99 bytes and a newline on `writer` (more than a pipe holds).
std::size_t queue_lines(ConsoleWriter& writer, int lines) {
  const std::uint64_t stream = writer.open_stream();
  const std::string text(99, 'z');
  for (int i = 0; i < lines; ++i) writer.write_line(stream, "", Line{text, "\n"});
  writer.close_stream(stream);
  return static_cast<std::size_t>(lines) * 100;
}

}  // namespace

TEST_CASE("console writer: a slow console that still reads gets every byte at the end",
          "[console_writer]") {
  Pipe pipe;
  ConsoleWriter writer(pipe.write.get());
  const std::size_t want = queue_lines(writer, 6000);  // 600 kB
  REQUIRE(writer.backlog() > 0);
  // 64 KiB every 150 ms: about 1.5 s in all, three times the flush's 500 ms without
  // progress (which, as a bound on the whole flush, dropped most of it).
  std::atomic<std::size_t> got{0};
  std::thread reader([&] {
    std::string buf(64 * 1024, '\0');
    while (got < want) {
      std::this_thread::sleep_for(150ms);
      const ssize_t n = ::read(pipe.read.get(), buf.data(), buf.size());
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
  });
  writer.flush(500ms);
  pipe.write.reset();  // the reader's end of file, whatever was dropped
  reader.join();
  CHECK(got == want);
  CHECK(writer.backlog() == 0);
}

TEST_CASE("console writer: a console that reads nothing is given up, its backlog dropped",
          "[console_writer]") {
  Pipe pipe;
  ConsoleWriter writer(pipe.write.get());
  queue_lines(writer, 6000);
  REQUIRE(writer.backlog() > 0);
  const auto t0 = std::chrono::steady_clock::now();
  writer.flush(300ms);
  CHECK(std::chrono::steady_clock::now() - t0 >= 300ms);
  CHECK(std::chrono::steady_clock::now() - t0 < 30s);  // against a hang, not a speed
  CHECK(writer.backlog() == 0);
  CHECK(writer.written() == writer.enqueued());
}
