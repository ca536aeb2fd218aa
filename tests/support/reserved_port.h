// reserved_port.h: a TCP port number that stays ours while the test needs it. The socket
// is bound (SO_REUSEADDR, never listening) for the object's lifetime: the kernel gives
// that port to no other bind(port 0) and no outgoing connection, yet the code under test
// (or a child process) can still bind and listen on it, since ddprun's store, PyTorch's
// TCPStore and libuv all set SO_REUSEADDR too. Closing a probe socket before handing the
// number over, as a "free_port()" does, lets another test take the port in between.
// Used by every C++ suite that must name a port before the server exists.
// Thread-safety: immutable after construction.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace ddprun::test {

class ReservedPort {
 public:
  // Binds an OS-chosen port on `host` (an IPv4 or IPv6 literal); throws
  // std::system_error when that fails.
  explicit ReservedPort(const std::string& host = "127.0.0.1");
  ~ReservedPort();
  ReservedPort(const ReservedPort&) = delete;
  ReservedPort& operator=(const ReservedPort&) = delete;

  std::uint16_t number() const { return port_; }
  // Usable wherever a port number is expected; the reservation lasts as long as `*this`.
  operator std::uint16_t() const { return port_; }  // NOLINT(google-explicit-constructor)

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
};

inline std::ostream& operator<<(std::ostream& os, const ReservedPort& p) {
  return os << p.number();
}

}  // namespace ddprun::test
