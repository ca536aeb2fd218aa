// silent_peer.h: the one place that bounds how long the kernel keeps a TCP connection to
// a silent peer: a cut link, a powered-off host, a rebooted one whose old connections
// stay half-open (no reset, no end of file: by Linux's defaults ~15 minutes with data
// outstanding, never for an idle connection). Keepalive probes an idle connection and
// TCP_USER_TIMEOUT ends one whose data stays unacknowledged; both at `bound`. Used by the
// store server (each client it accepts) and the store client (each connection of an
// agent to the rendezvous store). Thread-safety: a pure function of the descriptor.
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>

namespace ddprun {

// After `bound` of silence the connection errs (ETIMEDOUT): an idle one is probed from
// bound/2 on, every bound/6 (1 s at least), three probes; one with unacknowledged data is
// given up `bound` after the oldest unacknowledged byte. bound <= 0 leaves the kernel's
// defaults. False when an option could not be set (not a TCP socket).
inline bool bound_silent_peer(int fd, std::chrono::milliseconds bound) {
  if (bound.count() <= 0) return true;
  const auto secs = [](std::chrono::milliseconds d) {
    return static_cast<int>(std::clamp<long long>(d.count() / 1000, 1, 32767));
  };
  const int on = 1;
  const int idle = secs(bound / 2);
  const int interval = secs(bound / 6);
  const int probes = 3;
  const auto user_timeout = static_cast<unsigned>(std::min<long long>(bound.count(), 1 << 30));
  return ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on) == 0 &&
         ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle) == 0 &&
         ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval) == 0 &&
         ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes) == 0 &&
         ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout) == 0;
}

}  // namespace ddprun
