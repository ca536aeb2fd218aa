// tcp_store_server.cpp: TcpStoreServer on Boost.Asio: the listener and accept loop, the
// output budget shared by the connections, rate-limited rejection logs and the io thread
// (ServerState). One io_context on one thread owns the KvState; a Session per connection
// (tcp_store_session.cpp) turns bytes into requests and requests into replies. Memory
// stays bounded on input and output (docs/protocol.md "Output limits"): idle sockets own
// no buffer, replies are sized before they are built, and large ones are streamed.
#include "store/tcp_store_server.h"

#include <malloc.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <future>
#include <stdexcept>

#include "store/core/host_port.h"
#include "store/store.h"
#include "store/tcp_store_session.h"

namespace ddprun::store {
namespace server_detail {
namespace {

// Below this many pending connects the kernel may drop SYNs during a job's start-up burst.
constexpr int kLowSomaxconn = 1024;
constexpr auto kAcceptRetryDelay = std::chrono::milliseconds(100);
// Connections closed for bad input are logged one by one up to kRejectLogBurst per
// kRejectLogWindow; the rest are counted and summarised in one line when the window ends
// (a fuzzer or a port scanner must not flood the log).
constexpr std::size_t kRejectLogBurst = 10;
constexpr auto kRejectLogWindow = std::chrono::seconds(5);
// Freed store memory goes back to the OS once this much was freed, kTrimDelay later
// (further frees in between join the same trim).
constexpr std::uint64_t kTrimAfterBytes = std::uint64_t{1} << 20;
constexpr auto kTrimDelay = std::chrono::milliseconds(200);

std::string format_endpoint(const tcp::endpoint& ep) {
  asio::ip::address addr = ep.address();
  if (addr.is_v6() && addr.to_v6().is_v4_mapped()) {
    addr = asio::ip::make_address_v4(asio::ip::v4_mapped, addr.to_v6());
  }
  return format_host_port(addr.to_string(), ep.port());
}

int read_somaxconn() {
  std::ifstream in("/proc/sys/net/core/somaxconn");
  int value = 0;
  if (in >> value) return value;
  return -1;
}

}  // namespace
}  // namespace server_detail

struct TcpStoreServer::Impl : server_detail::ServerState {
  using ServerState::ServerState;
};

namespace server_detail {

std::shared_ptr<Session> ServerState::find(KvState::ClientId id) const {
  auto it = sessions.find(id);
  return it == sessions.end() ? nullptr : it->second.lock();
}

void ServerState::deliver(KvState::Effects& effects) {
  for (KvState::ClientId id : effects.released) {
    if (std::shared_ptr<Session> s = find(id)) s->push_release();
  }
  for (const KvState::Notification& n : effects.notifications) {
    if (std::shared_ptr<Session> s = find(n.watcher)) s->push_notification(n);
  }
}

void ServerState::note_freed() {
  if (trim_armed || stopping || kv.freed_bytes() - trimmed_at < kTrimAfterBytes) return;
  trim_armed = true;
  trim_timer.expires_after(kTrimDelay);
  trim_timer.async_wait([this](const error_code& ec) {
    trim_armed = false;
    if (ec || stopping) return;
    trimmed_at = kv.freed_bytes();
    // glibc keeps freed small chunks in its arenas; this hands their whole pages back
    // (madvise), wherever they lie in the heap. It walks the free lists: milliseconds.
    ::malloc_trim(0);
  });
}

void ServerState::output_changed(std::ptrdiff_t delta) {
  output_bytes = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(output_bytes) + delta);
  if (delta < 0 && !deferred.empty() && !resume_posted) {
    // Posted, not called: the caller may be in the middle of its own bookkeeping.
    resume_posted = true;
    asio::post(ioc, [this] { resume_deferred(); });
  }
}

bool ServerState::output_admits(std::size_t own, std::size_t need) const {
  return output_bytes == 0 || output_bytes + need <= options.max_output_bytes ||
         (own == 0 && need <= kSmallReplyBytes);
}

void ServerState::defer_output(std::shared_ptr<Session> session, std::size_t need) {
  deferred.emplace_back(std::move(session), need);
}

void ServerState::resume_deferred() {
  resume_posted = false;
  // In order: the first deferred reply waits until it fits, and those behind it too
  // (a small one of a session with nothing unsent is never deferred). One per turn of the
  // event loop, so that building large replies back to back cannot hold up other clients.
  while (!deferred.empty() && !stopping) {
    auto& [session, need] = deferred.front();
    if (!session->is_closed() && !output_admits(session->unsent_bytes(), need)) return;
    std::shared_ptr<Session> next = std::move(session);
    deferred.pop_front();
    if (next->is_closed()) continue;
    next->resume_output();
    if (!deferred.empty() && !resume_posted) {
      resume_posted = true;
      asio::post(ioc, [this] { resume_deferred(); });
    }
    return;
  }
}

void ServerState::session_closed(KvState::ClientId id) {
  kv.forget(id);
  sessions.erase(id);
  connections.fetch_sub(1, std::memory_order_relaxed);
}

void ServerState::log_rejected(const tcp::endpoint& peer, std::string_view reason) {
  if (stopping) return;  // no timer may outlive stop()
  const auto now = std::chrono::steady_clock::now();
  if (now - reject_window_start >= kRejectLogWindow) {
    reject_window_start = now;
    rejects_logged = 0;
  }
  if (rejects_logged < kRejectLogBurst) {
    ++rejects_logged;
    spdlog::warn("store: closing connection from {}: {}", format_endpoint(peer), reason);
    return;
  }
  last_suppressed = format_endpoint(peer) + ": " + std::string(reason);
  if (rejects_suppressed++ == 0) {
    reject_summary.expires_at(reject_window_start + kRejectLogWindow);
    reject_summary.async_wait([this](const error_code&) { flush_rejected(); });
  }
}

void ServerState::flush_rejected() {
  if (rejects_suppressed == 0) return;
  spdlog::warn(
      "store: closed {} more connections for bad input in {} s without logging each (the last "
      "from {})",
      rejects_suppressed, kRejectLogWindow.count(), last_suppressed);
  rejects_suppressed = 0;
}

void ServerState::close_all_sessions() {
  std::vector<std::shared_ptr<Session>> all;
  all.reserve(sessions.size());
  for (auto& [id, weak] : sessions) {
    if (std::shared_ptr<Session> s = weak.lock()) all.push_back(std::move(s));
  }
  for (auto& s : all) s->close("");
  deferred.clear();  // closed now; this drops the last reference to each
}

void ServerState::do_accept() {
  acceptor.async_accept(
      [this](const error_code& ec, tcp::socket socket) { on_accept(ec, std::move(socket)); });
}

void ServerState::on_accept(const error_code& ec, tcp::socket socket) {
  if (stopping || ec == asio::error::operation_aborted) return;
  if (ec) {
    int err = ec.value();
    if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
      // The pending connection stays in the backlog; retrying at once would spin.
      if (!accept_error_logged) {
        spdlog::error(
            "store: cannot accept connections: {} ({} open); raise the open-files limit "
            "(ulimit -n). Retrying every {} ms",
            ec.message(), connections.load(), kAcceptRetryDelay.count());
        accept_error_logged = true;
      }
      accept_retry.expires_after(kAcceptRetryDelay);
      accept_retry.async_wait([this](const error_code& wec) {
        if (!wec && !stopping) do_accept();
      });
      return;
    }
    spdlog::debug("store: accept failed: {}", ec.message());
    return do_accept();
  }
  if (accept_error_logged) {
    spdlog::info("store: accepting connections again");
    accept_error_logged = false;
  }
  if (connections.load(std::memory_order_relaxed) >= options.max_connections) {
    if (refused_in_burst++ == 0) {
      spdlog::warn("store: {} connections open (--max-connections); refusing new ones",
                   options.max_connections);
    }
    error_code ignored;
    socket.close(ignored);
    return do_accept();
  }
  if (refused_in_burst > 0) {
    spdlog::warn("store: refused {} connections over the limit of {}", refused_in_burst,
                 options.max_connections);
    refused_in_burst = 0;
  }
  error_code opt_ec;
  tcp::endpoint peer = socket.remote_endpoint(opt_ec);
  socket.set_option(tcp::no_delay(true), opt_ec);  // small replies; Nagle only adds delay
  socket.non_blocking(true, opt_ec);
  KvState::ClientId id = next_id++;
  auto session = std::make_shared<Session>(*this, std::move(socket), id, peer);
  sessions.emplace(id, session);
  connections.fetch_add(1, std::memory_order_relaxed);
  session->start();
  do_accept();
}

bool ServerState::try_listen(const tcp::endpoint& ep, error_code& ec) {
  int somaxconn = read_somaxconn();
  // The kernel caps the backlog at net.core.somaxconn; ask for the most it allows.
  int backlog = std::max(SOMAXCONN, somaxconn);
  acceptor.open(ep.protocol(), ec);
  if (!ec && ep.address().is_v6() && ep.address().is_unspecified()) {
    acceptor.set_option(asio::ip::v6_only(false), ec);  // dual-stack: IPv4 clients too
  }
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(backlog, ec);
  if (ec) {
    error_code ignored;
    acceptor.close(ignored);
    return false;
  }
  if (somaxconn >= 0 && somaxconn < kLowSomaxconn) {
    spdlog::warn(
        "store: net.core.somaxconn is {}: a burst of more connects than that may be slowed by "
        "SYN retries; raise it (sysctl -w net.core.somaxconn=4096)",
        somaxconn);
  }
  port.store(acceptor.local_endpoint().port());
  return true;
}

void ServerState::listen_or_throw() {
  error_code ec;
  const std::string shown =
      format_host_port(options.host.empty() ? std::string_view("*") : options.host, options.port);
  if (options.host.empty()) {
    if (try_listen(tcp::endpoint(asio::ip::address_v6::any(), options.port), ec)) return;
    if (try_listen(tcp::endpoint(asio::ip::address_v4::any(), options.port), ec)) return;
  } else {
    tcp::resolver resolver(ioc);
    auto results = resolver.resolve(options.host, std::to_string(options.port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service, ec);
    if (ec) {
      throw StoreError("cannot listen on " + shown + ": cannot resolve host: " + ec.message());
    }
    for (const auto& entry : results) {
      if (try_listen(entry.endpoint(), ec)) return;
    }
  }
  throw StoreError("cannot listen on " + shown + ": " + ec.message());
}

}  // namespace server_detail

namespace asio = boost::asio;
using server_detail::error_code;
using server_detail::ServerState;

TcpStoreServer::TcpStoreServer(ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

TcpStoreServer::~TcpStoreServer() { stop(); }

std::uint16_t TcpStoreServer::start() {
  std::lock_guard lock(impl_->lifecycle_mu);
  if (impl_->running) throw std::logic_error("TcpStoreServer::start called twice");
  if (impl_->stopping) throw std::logic_error("TcpStoreServer::start after stop");
  impl_->listen_or_throw();
  impl_->do_accept();
  impl_->running = true;
  impl_->thread = std::thread([impl = impl_.get()] {
    for (;;) {
      try {
        impl->ioc.run();
        return;
      } catch (const std::exception& e) {
        // A bug, not bad input (handlers report bad input as values); keep serving.
        spdlog::error("store: internal error in the io thread: {}", e.what());
      }
    }
  });
  return impl_->port.load();
}

void TcpStoreServer::stop() {
  std::lock_guard lock(impl_->lifecycle_mu);
  if (!impl_->running) {
    impl_->stopping = true;
    return;
  }
  impl_->running = false;
  Impl* impl = impl_.get();
  asio::post(impl->ioc, [impl] {
    impl->stopping = true;
    error_code ignored;
    impl->acceptor.close(ignored);
    impl->accept_retry.cancel();
    impl->reject_summary.cancel();  // its handler still logs the summary
    impl->trim_timer.cancel();
    impl->close_all_sessions();
  });
  // With the acceptor and every socket closed, no handler re-arms and run() returns.
  impl->thread.join();
}

void TcpStoreServer::reset() {
  std::lock_guard lock(impl_->lifecycle_mu);
  Impl* impl = impl_.get();
  if (!impl->running) {
    impl->kv.clear();
    return;
  }
  std::promise<void> done;
  asio::post(impl->ioc, [impl, &done] {
    impl->close_all_sessions();
    impl->kv.clear();
    done.set_value();
  });
  done.get_future().wait();
}

namespace {

// `fn(state)` run on the io thread (or here while it does not run), for the diagnostics.
template <class Fn>
std::size_t ask_io_thread(ServerState& state, Fn fn) {
  std::lock_guard lock(state.lifecycle_mu);
  if (!state.running) return fn(state);
  std::promise<std::size_t> result;
  asio::post(state.ioc, [&] { result.set_value(fn(state)); });
  return result.get_future().get();
}

}  // namespace

std::size_t TcpStoreServer::pending_waits() {
  return ask_io_thread(*impl_, [](ServerState& s) { return s.kv.pending_waits(); });
}

std::size_t TcpStoreServer::unsent_output_bytes() {
  return ask_io_thread(*impl_, [](ServerState& s) { return s.output_bytes; });
}

std::uint16_t TcpStoreServer::port() const { return impl_->port.load(); }

std::size_t TcpStoreServer::connection_count() const {
  return impl_->connections.load(std::memory_order_relaxed);
}

}  // namespace ddprun::store
