// tcp_store_session.h: the inside of TcpStoreServer, shared by its two files:
// ServerState (the listener, the accept loop, the KvState, the output budget across
// connections, rate-limited rejection logs, the io thread; tcp_store_server.cpp) and
// Session (one connection; tcp_store_session.cpp). Internal to ddprun_store: included
// by those two files only. Thread-safety: everything here runs on the server's io
// thread, except `connections`, `port` and what `lifecycle_mu` guards.
#pragma once

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
// clang-format off
#include <utility>
// clang-format on

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "store/core/kv_state.h"
#include "store/core/protocol.h"
#include "store/core/reply_stream.h"
#include "store/tcp_store_server.h"

namespace ddprun::store::server_detail {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

inline constexpr std::size_t kReadChunk = 64 * 1024;
// A reply this small is built even over max_output_bytes when its session has nothing
// unsent, so that a client that reads its replies is served while others hold the budget.
inline constexpr std::size_t kSmallReplyBytes = 64 * 1024;
// GET and MULTI_GET replies larger than this are built and sent in pieces of this size.
inline constexpr std::size_t kStreamPieceBytes = 1024 * 1024;
// A watcher that lets WATCH_KEY notifications pile up beyond this is closed.
inline constexpr std::size_t kMaxPushBacklogBytes = 64 * 1024 * 1024;

class Session;

// The server's state; TcpStoreServer::Impl is this under the header's name.
struct ServerState {
  explicit ServerState(ServerOptions opts) : options(std::move(opts)), read_buf(kReadChunk, '\0') {}

  void do_accept();
  void on_accept(const error_code& ec, tcp::socket socket);
  // Sends each released client its `00` and each watcher its notification.
  void deliver(KvState::Effects& effects);
  // Once kv has freed kTrimAfterBytes since the last trim, arms trim_timer: memory goes
  // back to the OS (malloc_trim) at most once per kTrimDelay, never per request.
  void note_freed();
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
  std::uint64_t trimmed_at = 0;  // kv.freed_bytes() at the last trim
  bool trim_armed = false;

  std::atomic<std::size_t> connections{0};
  std::atomic<std::uint16_t> port{0};

  asio::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  asio::steady_timer accept_retry{ioc};
  asio::steady_timer reject_summary{ioc};
  asio::steady_timer trim_timer{ioc};
  std::thread thread;
  std::mutex lifecycle_mu;  // start/stop/reset callers
  bool running = false;     // guarded by lifecycle_mu
};

// One client connection: turns bytes into requests (parse_request), requests into
// replies (handle_request), keeps one write in flight, pauses reading while its own or
// the server's output budget is used up, and streams large GET / MULTI_GET replies.
// Lives on the io thread only (shared_ptr held by its pending operations).
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(ServerState& server, tcp::socket socket, KvState::ClientId id, tcp::endpoint peer)
      : server_(server), socket_(std::move(socket)), id_(id), peer_(std::move(peer)) {}
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void start() { do_read(); }

  // A WAIT or BARRIER of this client completed: one byte per registration, so bounded.
  void push_release();
  // A key this (legacy) client watches changed. A watcher that lets these pile up
  // unread is closed rather than buffered without limit.
  void push_notification(const KvState::Notification& n);
  // Deferred for output budget (ServerState::defer_output), now let go: try again.
  void resume_output();
  // Closes the connection (idempotent). A non-empty `reason` is logged as a warning.
  void close(std::string_view reason);

  std::size_t unsent_bytes() const { return unsent(); }
  bool is_closed() const { return closed_; }

 private:
  void do_read();
  void on_readable(const error_code& ec);
  void after_consume();
  // Handles every complete request at the front of `data`, in order, until this
  // connection's or the server's output budget is used up. Returns the bytes used.
  std::size_t consume(std::string_view data);
  void fill_from_stream();
  void finish_stream();
  void resume();  // takes up requests held back while paused
  std::size_t unsent() const { return out_.size() + pending_.size(); }
  void account(std::size_t now);  // tells the server this session now has `now` unsent
  void do_write();
  void on_write(const error_code& ec);

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

}  // namespace ddprun::store::server_detail
