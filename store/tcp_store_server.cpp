// tcp_store_server.cpp: TcpStoreServer on Boost.Asio. One io_context on one thread owns
// the KvState; a Session per connection turns bytes into requests (parse_request),
// requests into replies (handle_request) and delivers what a request released in other
// connections. Sessions never time out: c10d clients keep idle connections for hours,
// and a 1.13 client's callback connection never sends a byte.
//
// Memory stays bounded per connection: idle sockets own no buffer (reads land in one
// shared chunk and only an incomplete request is copied aside), an incomplete request
// may not exceed Limits::max_request_bytes, and a session stops reading while more than
// kMaxQueuedReplyBytes of replies wait to be written (back-pressure).
#include "store/tcp_store_server.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <future>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "store/handler.h"
#include "store/kv_state.h"

namespace ddprun::store {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

constexpr std::size_t kReadChunk = 64 * 1024;
// A session stops taking new requests while this much reply data is queued.
constexpr std::size_t kMaxQueuedReplyBytes = 4 * 1024 * 1024;
// A watcher that lets WATCH_KEY notifications pile up beyond this is closed.
constexpr std::size_t kMaxPushBacklogBytes = 64 * 1024 * 1024;
// Below this many pending connects the kernel may drop SYNs during a job's start-up burst.
constexpr int kLowSomaxconn = 1024;
constexpr auto kAcceptRetryDelay = std::chrono::milliseconds(100);
// Connections closed for bad input are logged one by one up to kRejectLogBurst per
// kRejectLogWindow; the rest are counted and summarised in one line when the window ends
// (a fuzzer or a port scanner must not flood the log).
constexpr std::size_t kRejectLogBurst = 10;
constexpr auto kRejectLogWindow = std::chrono::seconds(5);

std::string format_endpoint(const tcp::endpoint& ep) {
  asio::ip::address addr = ep.address();
  if (addr.is_v6() && addr.to_v6().is_v4_mapped()) {
    addr = asio::ip::make_address_v4(asio::ip::v4_mapped, addr.to_v6());
  }
  std::string host = addr.to_string();
  if (addr.is_v6()) host = "[" + host + "]";
  return host + ":" + std::to_string(ep.port());
}

int read_somaxconn() {
  std::ifstream in("/proc/sys/net/core/somaxconn");
  int value = 0;
  if (in >> value) return value;
  return -1;
}

class Session;

// The server's state; TcpStoreServer::Impl is this under the header's name.
struct ServerState {
  explicit ServerState(ServerOptions opts) : options(std::move(opts)), read_buf(kReadChunk, '\0') {}

  void do_accept();
  void on_accept(const error_code& ec, tcp::socket socket);
  // Sends each released client its `00` and each watcher its notification.
  void deliver(KvState::Effects& effects);
  void session_closed(KvState::ClientId id);
  // Logs that the connection from `peer` is closed for `reason`, rate-limited.
  void log_rejected(const tcp::endpoint& peer, std::string_view reason);
  void flush_rejected();
  std::shared_ptr<Session> find(KvState::ClientId id) const;  // null once closed
  void close_all_sessions();
  void listen_or_throw();
  bool try_listen(const tcp::endpoint& ep, error_code& ec);

  ServerOptions options;
  // Everything below up to `ioc` belongs to the io thread once it runs. These members
  // outlive the io_context (declared first), so sessions destroyed with it find them.
  KvState kv;
  KvState::Effects fx;
  std::unordered_map<KvState::ClientId, std::weak_ptr<Session>> sessions;
  std::string read_buf;  // the shared read chunk
  KvState::ClientId next_id = 1;
  bool stopping = false;
  std::size_t refused_in_burst = 0;  // connections over max_connections since last logged
  bool accept_error_logged = false;
  std::chrono::steady_clock::time_point reject_window_start{};
  std::size_t rejects_logged = 0;      // in the current window
  std::size_t rejects_suppressed = 0;  // since the last summary
  std::string last_suppressed;         // "peer: reason" of the latest one

  std::atomic<std::size_t> connections{0};
  std::atomic<std::uint16_t> port{0};

  asio::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  asio::steady_timer accept_retry{ioc};
  asio::steady_timer reject_summary{ioc};
  std::thread thread;
  std::mutex lifecycle_mu;  // start/stop/reset callers
  bool running = false;     // guarded by lifecycle_mu
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(ServerState& server, tcp::socket socket, KvState::ClientId id, tcp::endpoint peer)
      : server_(server), socket_(std::move(socket)), id_(id), peer_(peer) {}
  ~Session() {
    if (!closed_) server_.session_closed(id_);
  }

  void start() { do_read(); }

  // A WAIT or BARRIER of this client completed: one byte per registration, so bounded.
  void push_release() {
    encode_release(out_);
    do_write();
  }
  // A key this (legacy) client watches changed. A watcher that lets these pile up
  // unread is closed rather than buffered without limit.
  void push_notification(const KvState::Notification& n) {
    encode_notification(n, out_);
    if (out_.size() > kMaxPushBacklogBytes) {
      return close("it does not read its WATCH_KEY notifications (" + std::to_string(out_.size()) +
                   " bytes queued)");
    }
    do_write();
  }

  // Closes the connection (idempotent). A non-empty `reason` is logged as a warning.
  void close(std::string_view reason) {
    if (closed_) return;
    closed_ = true;
    if (!reason.empty()) server_.log_rejected(peer_, reason);
    error_code ignored;
    socket_.close(ignored);  // pending operations complete with operation_aborted
    server_.session_closed(id_);
  }

 private:
  void do_read() {
    if (reading_ || closed_ || paused_) return;
    reading_ = true;
    // Waiting for readability instead of reading into a per-session buffer keeps idle
    // connections free of any buffer. Its cost: Boost 1.74's epoll reactor re-arms every
    // wait with EPOLL_CTL_MOD (one syscall per request). async_read_some would avoid the
    // MOD but always tries a recv first (1.74 clears that only at EOF): re-armed before
    // the reply it is an EAGAIN recv instead of the MOD; re-armed after, it can take a
    // client's next request ahead of requests that reached other connections earlier
    // (tests rely on arrival order across connections).
    socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](const error_code& ec) {
      self->on_readable(ec);
    });
  }

  void on_readable(const error_code& ec) {
    reading_ = false;
    if (closed_) return;
    if (ec) return close(ec == asio::error::operation_aborted ? "" : ec.message());
    std::string& chunk = server_.read_buf;
    error_code rec;
    std::size_t n = socket_.read_some(asio::buffer(chunk.data(), chunk.size()), rec);
    if (rec == asio::error::would_block || rec == asio::error::try_again) return do_read();
    if (rec == asio::error::eof || rec == asio::error::connection_reset) return close("");
    if (rec) return close(rec.message());
    if (in_.empty()) {
      std::string_view data(chunk.data(), n);
      std::size_t used = consume(data);
      if (closed_) return;
      in_.assign(data.substr(used));
    } else {
      in_.append(chunk.data(), n);
      std::size_t used = consume(in_);
      if (closed_) return;
      in_.erase(0, used);
    }
    after_consume();
  }

  void after_consume() {
    if (!paused_ && in_.size() > server_.options.limits.max_request_bytes) {
      return close("request larger than " +
                   std::to_string(server_.options.limits.max_request_bytes) + " bytes");
    }
    do_read();
  }

  // Handles every complete request at the front of `data`, in order, until the reply
  // queue is full. Returns the bytes used.
  std::size_t consume(std::string_view data) {
    std::size_t pos = 0;
    while (!closed_) {
      if (out_.size() >= kMaxQueuedReplyBytes) {
        do_write();
        // Still queued only while a write is in flight: its completion resumes reading.
        if (out_.size() >= kMaxQueuedReplyBytes) {
          paused_ = true;
          break;
        }
      }
      std::string_view rest = data.substr(pos);
      if (!dialect_) {
        std::string error;
        DetectResult d = detect_dialect(rest, server_.options.limits, error);
        if (d == DetectResult::kNeedMore) break;
        if (d == DetectResult::kBad) {
          close(error);
          break;
        }
        dialect_ = d == DetectResult::kModern ? Dialect::kModern : Dialect::kLegacy;
      }
      ParseResult parsed = parse_request(rest, *dialect_, server_.options.limits, req_);
      if (parsed.status == ParseStatus::kNeedMore) break;
      if (parsed.status == ParseStatus::kBad) {
        close(parsed.error);
        break;
      }
      pos += parsed.consumed;
      KvState::Effects& fx = server_.fx;
      fx.clear();
      HandleResult result = handle_request(server_.kv, id_, *dialect_, req_, out_, fx);
      server_.deliver(fx);
      if (result.kind == HandleResult::Kind::kClose) {
        close(result.error);
        break;
      }
    }
    do_write();
    return pos;
  }

  void do_write() {
    if (writing_ || closed_ || out_.empty()) return;
    // Most replies are a few bytes and the socket has room for them: send now (the socket
    // is non-blocking) and start an asynchronous write only for what is left, sparing the
    // operation and its completion handler. An error is left for async_write to report:
    // never close here, where a caller may be delivering to several sessions.
    error_code ec;
    std::size_t sent = 0;
    if (socket_.non_blocking()) {  // set at accept; a blocking send would stall the io thread
      sent = socket_.write_some(asio::buffer(out_), ec);
      if (ec) sent = 0;
    }
    if (sent == out_.size()) {
      out_.clear();
      return;
    }
    writing_ = true;
    pending_.swap(out_);
    out_.clear();
    asio::async_write(
        socket_, asio::buffer(pending_) + sent,
        [self = shared_from_this()](const error_code& ec, std::size_t) { self->on_write(ec); });
  }

  void on_write(const error_code& ec) {
    writing_ = false;
    if (closed_) return;
    if (ec)
      return close(ec == asio::error::broken_pipe || ec == asio::error::connection_reset
                       ? ""
                       : ec.message());
    pending_.clear();
    do_write();
    if (paused_ && out_.size() < kMaxQueuedReplyBytes) {
      paused_ = false;
      std::size_t used = consume(in_);
      if (closed_) return;
      in_.erase(0, used);
      after_consume();
    }
  }

  ServerState& server_;
  tcp::socket socket_;
  KvState::ClientId id_;
  tcp::endpoint peer_;
  std::optional<Dialect> dialect_;  // decided by the first bytes
  std::string in_;                  // an incomplete request (or requests held back while paused)
  std::string out_;                 // replies not yet handed to the socket
  std::string pending_;             // the one write in flight
  Request req_;                     // reused, so steady-state requests allocate little
  bool reading_ = false;
  bool writing_ = false;
  bool paused_ = false;
  bool closed_ = false;
};

}  // namespace

struct TcpStoreServer::Impl : ServerState {
  using ServerState::ServerState;
};

namespace {

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
  std::string shown = options.host.empty() ? "*" : options.host;
  if (options.host.empty()) {
    if (try_listen(tcp::endpoint(asio::ip::address_v6::any(), options.port), ec)) return;
    if (try_listen(tcp::endpoint(asio::ip::address_v4::any(), options.port), ec)) return;
  } else {
    tcp::resolver resolver(ioc);
    auto results = resolver.resolve(options.host, std::to_string(options.port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service, ec);
    if (ec) {
      throw std::runtime_error("cannot listen on " + shown + ":" + std::to_string(options.port) +
                               ": cannot resolve host: " + ec.message());
    }
    for (const auto& entry : results) {
      if (try_listen(entry.endpoint(), ec)) return;
    }
  }
  throw std::runtime_error("cannot listen on " + shown + ":" + std::to_string(options.port) + ": " +
                           ec.message());
}

}  // namespace

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

std::size_t TcpStoreServer::pending_waits() {
  std::lock_guard lock(impl_->lifecycle_mu);
  Impl* impl = impl_.get();
  if (!impl->running) return impl->kv.pending_waits();
  std::promise<std::size_t> count;
  asio::post(impl->ioc, [impl, &count] { count.set_value(impl->kv.pending_waits()); });
  return count.get_future().get();
}

std::uint16_t TcpStoreServer::port() const { return impl_->port.load(); }

std::size_t TcpStoreServer::connection_count() const {
  return impl_->connections.load(std::memory_order_relaxed);
}

}  // namespace ddprun::store
