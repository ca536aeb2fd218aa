// reserved_port.cpp: ReservedPort (see reserved_port.h).
#include "tests/support/reserved_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace ddprun::test {

ReservedPort::ReservedPort(const std::string& host) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    len = sizeof *v4;
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    len = sizeof *v6;
  } else {
    throw std::system_error(EINVAL, std::generic_category(), "ReservedPort: bad address " + host);
  }
  fd_ = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "ReservedPort: socket");
  const int one = 1;
  if (::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      ::bind(fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    const int err = errno;
    ::close(fd_);
    throw std::system_error(err, std::generic_category(), "ReservedPort: bind on " + host);
  }
  port_ = ntohs(ss.ss_family == AF_INET ? v4->sin_port : v6->sin6_port);
}

ReservedPort::~ReservedPort() { ::close(fd_); }

}  // namespace ddprun::test
