// forked_store.cpp: see forked_store.h.
#include "bench/rdzv_sim/forked_store.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>

namespace ddprun::bench {
namespace {

bool read_all(int fd, void* buf, std::size_t len) {
  auto* p = static_cast<char*>(buf);
  while (len > 0) {
    const ssize_t got = ::read(fd, p, len);
    if (got <= 0) return false;
    p += got;
    len -= static_cast<std::size_t>(got);
  }
  return true;
}

}  // namespace

ForkedStore::ForkedStore(const store::ServerOptions& so) {
  int cmd[2], reply[2];
  if (::pipe(cmd) != 0 || ::pipe(reply) != 0) throw std::runtime_error("pipe() failed");
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork() failed");
  if (pid_ == 0) {
    ::close(cmd[1]);
    ::close(reply[0]);
    serve(so, cmd[0], reply[1]);
  }
  ::close(cmd[0]);
  ::close(reply[1]);
  cmd_ = cmd[1];
  reply_ = reply[0];
  std::uint16_t port = 0;
  if (!read_all(reply_, &port, sizeof port) || port == 0) {
    ::close(cmd_);
    ::close(reply_);
    ::waitpid(pid_, nullptr, 0);
    throw std::runtime_error("the store process did not start");
  }
  port_ = port;
}

ForkedStore::~ForkedStore() {
  ::close(cmd_);
  ::close(reply_);
  ::waitpid(pid_, nullptr, 0);
}

store::ServerStats ForkedStore::stats() const {
  store::ServerStats s;
  const char ask = 's';
  if (::write(cmd_, &ask, 1) != 1 || !read_all(reply_, &s, sizeof s)) {
    throw std::runtime_error("the store process did not answer");
  }
  return s;
}

void ForkedStore::serve(const store::ServerOptions& so, int cmd, int reply) {
  int rc = 0;
  try {
    store::TcpStoreServer server(so);
    const std::uint16_t port = server.start();
    if (::write(reply, &port, sizeof port) != sizeof port) ::_exit(1);
    char c = 0;
    while (::read(cmd, &c, 1) == 1) {
      const store::ServerStats s = server.stats();
      if (::write(reply, &s, sizeof s) != sizeof s) break;
    }
    server.stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddprun-rdzv-sim: store process: %s\n", e.what());
    rc = 1;
  }
  ::_exit(rc);
}

}  // namespace ddprun::bench
