// tcp_store_server.cpp: TcpStoreServer on Boost.Asio. One io_context on one thread owns
// the KvState; a Session per connection turns bytes into requests (parse_request),
// requests into replies (handle_request) and delivers what a request released in other
// connections. Sessions never time out: c10d clients keep idle connections for hours,
// and a 1.13 client's callback connection never sends a byte.
//
// Memory stays bounded (docs/protocol.md "Output limits"). Input: idle sockets own no
// buffer (reads land in one shared chunk and only an incomplete request is copied aside)
// and an incomplete request may not exceed Limits::max_request_bytes. Output: a request
// is sized before it is handled (reply_size); one whose reply would exceed
// ServerOptions::max_reply_bytes closes the connection; a session stops reading while
// max_connection_output_bytes of its replies wait to be written; and a reply that would
// take the unsent bytes of all sessions over max_output_bytes waits (its session reads
// nothing more) until enough has been written, unless it is small and its session has
// nothing unsent. Deferred sessions resume in arrival order. A GET or MULTI_GET reply
// over kStreamPieceBytes is a ReplyStream: built piece by piece as the socket drains,
// so no turn of the event loop copies more than a piece and an unread reply holds one.
#include "store/tcp_store_server.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <deque>
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
#include "store/host_port.h"
#include "store/kv_state.h"
#include "store/reply_stream.h"

namespace ddprun::store {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

constexpr std::size_t kReadChunk = 64 * 1024;
// A reply this small is built even over max_output_bytes when its session has nothing
// unsent, so that a client that reads its replies is served while others hold the budget.
constexpr std::size_t kSmallReplyBytes = 64 * 1024;
// GET and MULTI_GET replies larger than this are built and sent in pieces of this size.
constexpr std::size_t kStreamPieceBytes = 1024 * 1024;
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
  return format_host_port(addr.to_string(), ep.port());
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
  // Unsent reply bytes of all sessions: `delta` is a session's change.
  void output_changed(std::ptrdiff_t delta);
  // Whether a session with `own` bytes unsent may build a reply of `need` bytes now.
  bool output_admits(std::size_t own, std::size_t need) const;
  // Queues a session whose reply of `need` bytes did not fit; resumed in order.
  // A deferred session has no operation in flight, so this queue is what keeps it alive.
  void defer_output(std::shared_ptr<Session> session, std::size_t need);
  void resume_deferred();
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
  std::size_t output_bytes = 0;        // unsent reply bytes, all sessions
  std::deque<std::pair<std::shared_ptr<Session>, std::size_t>> deferred;  // (session, need)
  bool resume_posted = false;

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
      : server_(server), socket_(std::move(socket)), id_(id), peer_(std::move(peer)) {}
  ~Session() {
    if (!closed_) server_.session_closed(id_);
    account(0);
  }

  void start() { do_read(); }

  // A WAIT or BARRIER of this client completed: one byte per registration, so bounded.
  void push_release() {
    encode_release(out_);
    do_write();
    account(unsent());
  }
  // A key this (legacy) client watches changed. A watcher that lets these pile up
  // unread is closed rather than buffered without limit.
  void push_notification(const KvState::Notification& n) {
    encode_notification(n, out_);
    do_write();
    account(unsent());
    if (out_.size() > kMaxPushBacklogBytes ||
        (!out_.empty() && server_.output_bytes > server_.options.max_output_bytes)) {
      close("it does not read its WATCH_KEY notifications (" + std::to_string(unsent()) +
            " bytes unsent)");
    }
  }

  // Deferred for output budget (ServerState::defer_output), now let go: try again.
  void resume_output() {
    if (closed_ || !deferred_) return;
    deferred_ = false;
    resume();
  }

  // Closes the connection (idempotent). A non-empty `reason` is logged as a warning.
  void close(std::string_view reason) {
    if (closed_) return;
    closed_ = true;
    if (!reason.empty()) server_.log_rejected(peer_, reason);
    error_code ignored;
    socket_.close(ignored);  // pending operations complete with operation_aborted
    server_.session_closed(id_);
    stream_.reset();  // lets go of the values it still held
    out_.clear();
    out_.shrink_to_fit();
    account(0);  // pending_ is the write's until it completes, but is no longer counted
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

  // Handles every complete request at the front of `data`, in order, until this
  // connection's or the server's output budget is used up. Returns the bytes used.
  std::size_t consume(std::string_view data) {
    std::size_t pos = 0;
    const ServerOptions& opts = server_.options;
    while (!closed_) {
      if (unsent() >= opts.max_connection_output_bytes) {
        do_write();
        account(unsent());
        // Still over only while a write is in flight: its completion resumes reading.
        if (unsent() >= opts.max_connection_output_bytes) {
          paused_ = true;
          break;
        }
      }
      std::string_view rest = data.substr(pos);
      if (!dialect_) {
        std::string error;
        DetectResult d = detect_dialect(rest, opts.limits, error);
        if (d == DetectResult::kNeedMore) break;
        if (d == DetectResult::kBad) {
          close(error);
          break;
        }
        dialect_ = d == DetectResult::kModern ? Dialect::kModern : Dialect::kLegacy;
      }
      ParseResult parsed = parse_request(rest, *dialect_, opts.limits, req_);
      if (parsed.status == ParseStatus::kNeedMore) break;
      if (parsed.status == ParseStatus::kBad) {
        close(parsed.error);
        break;
      }
      const std::size_t need = reply_size(server_.kv, req_);
      if (need > opts.max_reply_bytes) {
        close(std::string(op_name(req_.op)) + ": reply of " + std::to_string(need) +
              " bytes exceeds the limit of " + std::to_string(opts.max_reply_bytes) +
              " bytes (--max-reply-bytes)");
        break;
      }
      // A large GET or MULTI_GET is sent in pieces, one built each time the socket has
      // taken the last: only a piece counts against the budget.
      const bool stream =
          need > kStreamPieceBytes && (req_.op == Op::kGet || req_.op == Op::kMultiGet);
      if (!server_.output_admits(unsent(), stream ? kStreamPieceBytes : need)) {
        // Not consumed: parsed again when the budget lets this session go on.
        paused_ = deferred_ = true;
        server_.defer_output(shared_from_this(), stream ? kStreamPieceBytes : need);
        break;
      }
      pos += parsed.consumed;
      if (stream) {
        // Requests behind it wait until it is all out (paused_, resumed by on_write).
        stream_.emplace(server_.kv, req_);
        paused_ = true;
        break;
      }
      KvState::Effects& fx = server_.fx;
      fx.clear();
      HandleResult result = handle_request(server_.kv, id_, req_, out_, fx);
      account(unsent());
      server_.deliver(fx);
      if (result.kind == HandleResult::Kind::kClose) {
        close(result.error);
        break;
      }
    }
    if (stream_) {
      fill_from_stream();
    } else {
      do_write();
    }
    account(unsent());
    return pos;
  }

  // Tops the output up with the next piece of the reply being streamed and writes it.
  // When the socket takes it all at once, the next piece comes in a later turn of the
  // event loop (posted), so that one fast reader cannot hold the loop.
  void fill_from_stream() {
    if (closed_ || !stream_) return;
    if (out_.size() < kStreamPieceBytes) stream_->next(out_, kStreamPieceBytes - out_.size());
    if (stream_->done()) stream_.reset();
    do_write();
    account(unsent());
    // A write in flight continues in on_write; otherwise go on in a later turn (never
    // from here, where a caller may be in the middle of consume()).
    if (!writing_ && !stream_posted_) {
      stream_posted_ = true;
      asio::post(socket_.get_executor(), [self = shared_from_this()] {
        self->stream_posted_ = false;
        if (self->stream_) {
          self->fill_from_stream();
        } else {
          self->finish_stream();
        }
      });
    }
  }

  // The streamed reply is all written: requests held back behind it go on.
  void finish_stream() {
    if (closed_) return;
    if (paused_ && !deferred_ && unsent() < server_.options.max_connection_output_bytes) {
      resume();
    }
  }

  // Takes up requests held back while paused.
  void resume() {
    paused_ = false;
    std::size_t used = consume(in_);
    if (closed_) return;
    in_.erase(0, used);
    after_consume();
  }

  std::size_t unsent() const { return out_.size() + pending_.size(); }

 public:
  std::size_t unsent_bytes() const { return unsent(); }
  bool is_closed() const { return closed_; }

 private:
  // Tells the server this session now has `now` bytes unsent.
  void account(std::size_t now) {
    if (now == accounted_) return;
    const auto delta = static_cast<std::ptrdiff_t>(now) - static_cast<std::ptrdiff_t>(accounted_);
    accounted_ = now;
    server_.output_changed(delta);
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
      if (out_.capacity() > kReadChunk) out_.shrink_to_fit();  // a big reply is gone
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
    if (pending_.capacity() > kReadChunk) pending_.shrink_to_fit();
    if (stream_) return fill_from_stream();
    do_write();
    account(unsent());
    finish_stream();
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
  bool paused_ = false;                // reads nothing and handles nothing more for now
  bool deferred_ = false;              // paused_ until the server's output budget lets it go on
  std::optional<ReplyStream> stream_;  // a large reply being sent piece by piece
  bool stream_posted_ = false;
  std::size_t accounted_ = 0;  // this session's share of ServerState::output_bytes
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
