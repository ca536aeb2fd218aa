// tcp_store_accept.cpp: TcpStoreServer's listeners: binding (dual-stack "::" or each
// resolved address), the backlog (SO_REUSEPORT listeners enough for a connect storm),
// and the accept loop that drains them until EAGAIN, pausing on the open-files limit. Part of
// ServerState (tcp_store_session.h); runs on the io thread except listen_or_throw, which start()
// calls before the thread exists.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "base/sys_error.h"
#include "store/core/host_port.h"
#include "store/store.h"
#include "store/tcp_store_session.h"

namespace ddprun::store::server_detail {
namespace {

// Below this many pending connects the kernel may drop SYNs during a job's start-up burst.
constexpr int kLowSomaxconn = 1024;
constexpr auto kAcceptRetryDelay = std::chrono::milliseconds(100);
// Connects a burst may bring at once (a job's workers and agents starting together) that the
// accept queues hold without dropping a SYN, however busy the io thread is: a dropped SYN
// costs its client a 1 s (then 3 s ...) retransmission.
constexpr int kStormConnections = 16384;

std::string format_peer(const sockaddr_storage& addr) {
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(addr);
    ::inet_ntop(AF_INET, &a.sin_addr, text, sizeof text);
    return format_host_port(text, ntohs(a.sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(addr);
    if (IN6_IS_ADDR_V4MAPPED(&a.sin6_addr)) {
      ::inet_ntop(AF_INET, &a.sin6_addr.s6_addr[12], text, sizeof text);
    } else {
      ::inet_ntop(AF_INET6, &a.sin6_addr, text, sizeof text);
    }
    return format_host_port(text, ntohs(a.sin6_port));
  }
  return "?";
}

int read_somaxconn() {
  std::ifstream in("/proc/sys/net/core/somaxconn");
  int value = 0;
  if (in >> value) return value;
  return -1;
}

}  // namespace

void epoll_set(int epfd, int op, int fd, std::uint32_t events, std::uint64_t tag) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = tag;
  if (::epoll_ctl(epfd, op, fd, &ev) != 0 && op != EPOLL_CTL_DEL) throw_errno("epoll_ctl");
}

void ServerState::watch_listeners(bool on) {
  for (std::size_t i = 0; i < listen_fds.size(); ++i) {
    epoll_set(epfd, EPOLL_CTL_MOD, listen_fds[i], on ? std::uint32_t{EPOLLIN} : 0U,
              kFirstListenTag + i);
  }
}

// The listeners are level-triggered: accept until EAGAIN, so a storm of connects drains
// the backlog in one turn instead of one accept per turn.
void ServerState::accept_all(int listen_fd) {
  while (!stopping && !accept_retry_at) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      if (err == EINTR || err == ECONNABORTED || err == EPROTO) continue;
      if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
        // The pending connections stay in the backlog; listening on at once would spin.
        if (!accept_error_logged) {
          spdlog::error(
              "store: cannot accept connections: {} ({} open); raise the open-files limit "
              "(ulimit -n). Retrying every {} ms",
              errno_text(err), connections.load(), kAcceptRetryDelay.count());
          accept_error_logged = true;
        }
        watch_listeners(false);
        accept_retry_at = Clock::now() + kAcceptRetryDelay;
        return;
      }
      spdlog::debug("store: accept failed: {}", errno_text(err));
      return;
    }
    if (accept_error_logged) {
      spdlog::info("store: accepting connections again");
      accept_error_logged = false;
    }
    accept_one(fd, format_peer(addr));
  }
}

void ServerState::accept_one(int fd, const std::string& peer) {
  if (connections.load(std::memory_order_relaxed) >= options.max_connections) {
    if (refused_in_burst++ == 0) {
      spdlog::warn("store: {} connections open (--max-connections); refusing new ones",
                   options.max_connections);
    }
    ::close(fd);
    return;
  }
  if (refused_in_burst > 0) {
    spdlog::warn("store: refused {} connections over the limit of {}", refused_in_burst,
                 options.max_connections);
    refused_in_burst = 0;
  }
  // TCP_NODELAY (small replies) comes from the listener: Linux copies it to accepted sockets.
  const KvState::ClientId id = next_id++;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.u64 = id;
  if (::epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
    spdlog::warn("store: cannot watch the connection from {}: {}", peer, errno_text(errno));
    ::close(fd);
    return;
  }
  sessions.emplace(id, std::make_shared<Session>(*this, fd, id, peer));
  connections.fetch_add(1, std::memory_order_relaxed);
}

namespace {

// A listening socket on `addr` (its port), or -1 with `err` set.
int open_listener(const sockaddr* addr, socklen_t len, bool dual_stack, bool reuseport, int backlog,
                  int& err) {
  const int fd = ::socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    err = errno;
    return -1;
  }
  const int zero = 0;
  const int one = 1;
  bool ok = true;
  if (dual_stack) {  // IPv4 clients too
    ok = ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero) == 0;
  }
  ok = ok && ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0;
  if (reuseport) ok = ok && ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) == 0;
  ok = ok && ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0;
  ok = ok && ::bind(fd, addr, len) == 0;
  // backlog < 0: a probe that only binds.
  ok = ok && (backlog < 0 || ::listen(fd, backlog) == 0);
  if (!ok) {
    err = errno;
    ::close(fd);
    return -1;
  }
  return fd;
}

std::uint16_t bound_port(int fd) {
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof bound;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_len) != 0) return 0;
  // The port is where v6 has it too.
  return ntohs(reinterpret_cast<const sockaddr_in&>(bound).sin_port);
}

}  // namespace

// One accept queue holds net.core.somaxconn connections (4096 by default); a storm of more
// that arrives while the io thread is busy would overflow it and wait for SYN retries. So
// the server listens with as many SO_REUSEPORT sockets on its port as it takes to hold
// kStormConnections (the kernel spreads connects over them by address hash). SO_REUSEPORT
// would also let a second server of the same user bind the port silently: a plain probe
// bind first fails with "address in use" wherever anything listens on the port already.
bool ServerState::try_listen(const sockaddr* addr, socklen_t len, bool dual_stack, int& err) {
  const int somaxconn = read_somaxconn();
  // The kernel caps the backlog at net.core.somaxconn; ask for the most it allows.
  const int backlog = std::max({SOMAXCONN, somaxconn, 65535});
  const int queue = somaxconn > 0 ? somaxconn : SOMAXCONN;
  const std::size_t count = std::clamp<std::size_t>(
      static_cast<std::size_t>((kStormConnections + queue - 1) / queue), 1, kMaxListeners);
  sockaddr_storage where{};
  std::memcpy(&where, addr, len);
  auto* where_port = addr->sa_family == AF_INET6 ? &reinterpret_cast<sockaddr_in6&>(where).sin6_port
                                                 : &reinterpret_cast<sockaddr_in&>(where).sin_port;
  if (count > 1 && *where_port != 0) {
    const int probe = open_listener(addr, len, dual_stack, false, -1, err);
    if (probe < 0) return false;
    ::close(probe);
  }
  std::vector<int> fds;
  for (std::size_t i = 0; i < count; ++i) {
    const auto* at = reinterpret_cast<const sockaddr*>(&where);
    const int fd = open_listener(at, len, dual_stack, count > 1, backlog, err);
    if (fd < 0) {
      for (int open : fds) ::close(open);
      return false;
    }
    fds.push_back(fd);
    if (i == 0) *where_port = htons(bound_port(fd));  // the others join the first's port
  }
  if (somaxconn >= 0 && somaxconn < kLowSomaxconn) {
    spdlog::warn(
        "store: net.core.somaxconn is {}: a burst of more connects than that may be slowed by "
        "SYN retries; raise it (sysctl -w net.core.somaxconn=4096)",
        somaxconn);
  }
  listen_fds = std::move(fds);
  port.store(bound_port(listen_fds.front()));
  return true;
}

void ServerState::listen_or_throw() {
  int err = 0;
  const std::string shown =
      format_host_port(options.host.empty() ? std::string_view("*") : options.host, options.port);
  if (options.host.empty()) {
    sockaddr_in6 v6{};
    v6.sin6_family = AF_INET6;
    v6.sin6_addr = in6addr_any;
    v6.sin6_port = htons(options.port);
    if (try_listen(reinterpret_cast<sockaddr*>(&v6), sizeof v6, true, err)) return;
    sockaddr_in v4{};
    v4.sin_family = AF_INET;
    v4.sin_addr.s_addr = htonl(INADDR_ANY);
    v4.sin_port = htons(options.port);
    if (try_listen(reinterpret_cast<sockaddr*>(&v4), sizeof v4, false, err)) return;
  } else {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* results = nullptr;
    const int rc =
        ::getaddrinfo(options.host.c_str(), std::to_string(options.port).c_str(), &hints, &results);
    if (rc != 0) {
      throw StoreError("cannot listen on " + shown +
                       ": cannot resolve host: " + ::gai_strerror(rc));
    }
    bool ok = false;
    for (addrinfo* ai = results; ai != nullptr && !ok; ai = ai->ai_next) {
      ok = try_listen(ai->ai_addr, ai->ai_addrlen, false, err);
    }
    ::freeaddrinfo(results);
    if (ok) return;
  }
  throw StoreError("cannot listen on " + shown + ": " + errno_text(err));
}

}  // namespace ddprun::store::server_detail
