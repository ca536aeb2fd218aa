// tcp_store_accept.cpp: TcpStoreServer's listener: binding (dual-stack "::" or each
// resolved address), the backlog, and the accept loop (a bounded batch per turn of the
// event loop), pausing on the open-files limit. Part of ServerState (tcp_store_session.h); runs on
// the io thread except listen_or_throw, which start() calls before the thread exists.
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
#include <fstream>

#include "base/silent_peer.h"
#include "base/sys_error.h"
#include "store/core/host_port.h"
#include "store/store.h"
#include "store/tcp_store_session.h"

namespace ddprun::store::server_detail {
namespace {

// Below this many pending connects the kernel may drop SYNs during a job's start-up burst.
constexpr int kLowSomaxconn = 1024;
constexpr auto kAcceptRetryDelay = std::chrono::milliseconds(100);
// Accepts per turn of the event loop. Connects that arrive as fast as a starved io thread
// accepts them (a thousand agents retrying their handshakes) would otherwise keep it in
// the accept loop, never reading the connections it has: nobody is answered, every
// handshake times out and is retried, and the store looks dead while it works.
constexpr int kAcceptsPerTurn = 64;

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

// The listener is level-triggered: up to kAcceptsPerTurn accepts per turn, so a storm of
// connects drains the backlog in few turns, and the connections already accepted are
// read and answered in between (the listener is reported again while any is pending).
void ServerState::accept_all() {
  for (int accepted = 0; !stopping && !accept_retry_at && accepted < kAcceptsPerTurn; ++accepted) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    UniqueFd fd(::accept4(listen_fd.get(), reinterpret_cast<sockaddr*>(&addr), &len,
                          SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd) {
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
        epoll_set(epfd.get(), EPOLL_CTL_MOD, listen_fd.get(), 0, kListenTag);
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
    accept_one(std::move(fd), format_peer(addr));
  }
}

void ServerState::accept_one(UniqueFd fd, const std::string& peer) {
  if (connections.load(std::memory_order_relaxed) >= options.max_connections) {
    if (refused_in_burst++ == 0) {
      spdlog::warn("store: {} connections open (--max-connections); refusing new ones",
                   options.max_connections);
    }
    return;  // fd closes here
  }
  if (refused_in_burst > 0) {
    spdlog::warn("store: refused {} connections over the limit of {}", refused_in_burst,
                 options.max_connections);
    refused_in_burst = 0;
  }
  const int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // small replies
  bound_silent_peer(fd.get(), options.silent_peer_timeout);
  const KvState::ClientId id = next_id++;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.u64 = id;
  if (::epoll_ctl(epfd.get(), EPOLL_CTL_ADD, fd.get(), &ev) != 0) {
    spdlog::warn("store: cannot watch the connection from {}: {}", peer, errno_text(errno));
    return;  // fd closes here
  }
  sessions.emplace(id, std::make_shared<Session>(*this, std::move(fd), id, peer));
  connections.fetch_add(1, std::memory_order_relaxed);
}

bool ServerState::try_listen(const sockaddr* addr, socklen_t len, bool dual_stack, int& err) {
  const int somaxconn = read_somaxconn();
  // The kernel caps the backlog at net.core.somaxconn; ask for the most it allows.
  const int backlog = std::max({SOMAXCONN, somaxconn, 65535});
  UniqueFd fd(::socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) {
    err = errno;
    return false;
  }
  const int zero = 0;
  const int one = 1;
  bool ok = true;
  if (dual_stack) {  // IPv4 clients too
    ok = ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero) == 0;
  }
  ok = ok && ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0;
  ok = ok && ::bind(fd.get(), addr, len) == 0;
  ok = ok && ::listen(fd.get(), backlog) == 0;
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof bound;
  ok = ok && ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &bound_len) == 0;
  if (!ok) {
    err = errno;
    return false;  // fd closes here, after errno is read
  }
  if (somaxconn >= 0 && somaxconn < kLowSomaxconn) {
    spdlog::warn(
        "store: net.core.somaxconn is {}: a burst of more connects than that may be slowed by "
        "SYN retries; raise it (sysctl -w net.core.somaxconn=4096)",
        somaxconn);
  }
  listen_fd = std::move(fd);
  const auto& b = reinterpret_cast<const sockaddr_in&>(bound);  // the port is where v6 has it
  port.store(ntohs(b.sin_port));
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
  if (err == EADDRINUSE) {
    throw StoreAddressInUseError("cannot listen on " + shown + ": " + errno_text(err));
  }
  throw StoreError("cannot listen on " + shown + ": " + errno_text(err));
}

}  // namespace ddprun::store::server_detail
