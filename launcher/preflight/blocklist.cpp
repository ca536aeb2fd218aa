// blocklist.cpp: the block-list file (see blocklist.h).
#include "launcher/preflight/blocklist.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <sstream>

#include "base/unique_fd.h"

namespace ddprun::launcher::preflight {
namespace {

constexpr off_t kMaxBytes = 1 << 20;

BlocklistError error(const std::string& path, const std::string& what) {
  return BlocklistError("--blocklist " + path + ": " + what);
}

std::vector<BlockEntry> parse(const std::string& text) {
  std::vector<BlockEntry> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    BlockEntry e;
    if (!(fields >> e.host) || e.host[0] == '#') continue;
    fields >> e.when;
    std::getline(fields >> std::ws, e.why);
    out.push_back(std::move(e));
  }
  return out;
}

// The whole file behind `fd` (a regular file of at most kMaxBytes).
std::string read_fd(int fd, const std::string& path) {
  struct stat st {};
  if (fstat(fd, &st) != 0) throw error(path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw error(path, "not a regular file");
  if (st.st_size > kMaxBytes) throw error(path, "larger than 1 MiB");
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = pread(fd, text.data() + got, text.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw error(path, std::strerror(errno));
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  text.resize(got);
  return text;
}

}  // namespace

std::vector<BlockEntry> read_blocklist(const std::string& path) {
  // O_NONBLOCK: a FIFO named by mistake must not block the open.
  const UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd) {
    if (errno == ENOENT) return {};
    throw error(path, std::strerror(errno));
  }
  return parse(read_fd(fd.get(), path));
}

std::optional<BlockEntry> find_host(const std::vector<BlockEntry>& entries,
                                    const std::string& host) {
  for (const auto& e : entries) {
    if (e.host == host) return e;
  }
  return std::nullopt;
}

int add_to_blocklist(const std::string& path, const std::vector<BlockEntry>& entries) {
  const UniqueFd fd(open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644));
  if (!fd) throw error(path, std::strerror(errno));
  while (flock(fd.get(), LOCK_EX) != 0) {
    if (errno != EINTR) throw error(path, std::strerror(errno));
  }
  const std::vector<BlockEntry> listed = parse(read_fd(fd.get(), path));
  std::string text;
  std::vector<BlockEntry> added;
  for (const auto& e : entries) {
    if (find_host(listed, e.host) || find_host(added, e.host)) continue;
    text += e.host + " " + (e.when.empty() ? utc_now() : e.when) + " " + e.why + "\n";
    added.push_back(e);
  }
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw error(path, std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
  return static_cast<int>(added.size());  // the lock goes with the descriptor
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace ddprun::launcher::preflight
