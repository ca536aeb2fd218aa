// unique_fd_test.cpp: base/unique_fd.h's UniqueFd on real descriptors (pipe ends): it
// closes its fd when destroyed or reset, never the one it gave away (move, release), and
// a moved-to or reset owner closes what it held before.
#include "base/unique_fd.h"

#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <utility>

namespace ddprun {
namespace {

bool is_open(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

// fcntl on a closed descriptor fails with EBADF (nothing else opens one in between).
bool is_closed(int fd) { return ::fcntl(fd, F_GETFD) == -1 && errno == EBADF; }

struct Pipe {
  int read = -1;
  int write = -1;
  Pipe() {
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    read = fds[0];
    write = fds[1];
  }
};

TEST_CASE("UniqueFd: empty by default, closes its fd when destroyed", "[unique_fd]") {
  const UniqueFd empty;
  CHECK(empty.get() == -1);
  CHECK_FALSE(empty.valid());
  CHECK_FALSE(static_cast<bool>(empty));

  const Pipe p;
  {
    const UniqueFd r(p.read);
    const UniqueFd w(p.write);
    CHECK(r.get() == p.read);
    CHECK(r.valid());
    CHECK(static_cast<bool>(w));
    CHECK(is_open(p.read));
    CHECK(is_open(p.write));
  }
  CHECK(is_closed(p.read));
  CHECK(is_closed(p.write));
}

TEST_CASE("UniqueFd: a move hands the fd over, only the new owner closes it", "[unique_fd]") {
  const Pipe p;
  UniqueFd w(p.write);
  UniqueFd r(p.read);
  {
    UniqueFd moved(std::move(r));
    CHECK(moved.get() == p.read);
    CHECK(r.get() == -1);  // a moved-from owner is empty
    {
      const UniqueFd gone(std::move(r));
      CHECK_FALSE(gone.valid());
    }
    CHECK(is_open(p.read));  // the moved-from owner closed nothing

    // Move assignment closes what the target held and takes the other's fd.
    w = std::move(moved);
    CHECK(is_closed(p.write));
    CHECK(w.get() == p.read);
    CHECK_FALSE(moved.valid());
  }
  CHECK(is_open(p.read));

  // Assigning an owner to itself keeps the fd open.
  UniqueFd& same = w;
  w = std::move(same);
  CHECK(w.get() == p.read);
  CHECK(is_open(p.read));
  w = UniqueFd();
  CHECK(is_closed(p.read));
}

TEST_CASE("UniqueFd: release gives the fd up unclosed, reset closes and takes another",
          "[unique_fd]") {
  const Pipe p;
  int released = -1;
  {
    UniqueFd r(p.read);
    released = r.release();
    CHECK_FALSE(r.valid());
  }
  CHECK(released == p.read);
  CHECK(is_open(p.read));

  UniqueFd owner(p.write);
  owner.reset(released);  // closes the write end, owns the read end
  CHECK(is_closed(p.write));
  CHECK(owner.get() == p.read);
  owner.reset();
  CHECK(is_closed(p.read));
  CHECK_FALSE(owner.valid());
  owner.reset();  // nothing to close: no error, still empty
  CHECK(owner.get() == -1);
}

}  // namespace
}  // namespace ddprun
