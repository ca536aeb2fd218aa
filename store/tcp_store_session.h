// tcp_store_session.h: the inside of TcpStoreServer, shared by its three files: ServerState
// (the epoll loop, the KvState, the output budget across connections, rejection logs;
// tcp_store_server.cpp, and its listener in tcp_store_accept.cpp) and Session (one
// connection; tcp_store_session.cpp). Internal to ddprun_store. Thread-safety: all of it
// runs on the server's io thread, except `connections`, `port`, run_on_loop and what
// `lifecycle_mu` guards.
#pragma once

#include <sys/epoll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/unique_fd.h"
#include "store/core/kv_state.h"
#include "store/core/protocol.h"
#include "store/core/reply_stream.h"
#include "store/tcp_store_server.h"

namespace ddprun::store::server_detail {

using Clock = std::chrono::steady_clock;

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
  ~ServerState();  // closes the descriptors
  ServerState(const ServerState&) = delete;
  ServerState& operator=(const ServerState&) = delete;

  // The io thread: epoll_wait, then the ready sessions, due timers and posted work.
  void run();
  // Runs `fn` on the io thread at its next turn (any thread; wakes it).
  void run_on_loop(std::function<void()> fn);
  // Runs `fn` later in this turn of the loop, after the events (io thread only).
  void post(std::function<void()> fn) { posted.push_back(std::move(fn)); }
  // Accepts until the backlog is empty (EAGAIN) or the open-files limit stops it.
  void accept_all();
  void accept_one(UniqueFd fd, const std::string& peer);
  // Sends each released client its `00` and each watcher its notification.
  void deliver(KvState::Effects& effects);
  // Once kv has freed kTrimAfterBytes since the last trim, arms trim_at: memory goes
  // back to the OS (malloc_trim) at most once per kTrimDelay, never per request.
  void note_freed();
  void session_closed(KvState::ClientId id);
  // Logs that the connection from `peer` is closed for `reason`, rate-limited.
  void log_rejected(const std::string& peer, std::string_view reason);
  void flush_rejected();
  std::shared_ptr<Session> find(KvState::ClientId id) const;  // null once closed
  void close_all_sessions();
  // Unsent reply bytes of all sessions: `delta` is a session's change.
  void output_changed(std::ptrdiff_t delta);
  // Whether a session with `own` bytes unsent may build a reply of `need` bytes now.
  bool output_admits(std::size_t own, std::size_t need) const;
  // Queues a session whose reply of `need` bytes did not fit; resumed in order.
  void defer_output(std::shared_ptr<Session> session, std::size_t need);
  void resume_deferred();
  void listen_or_throw();
  // Opens, binds and listens on `addr`; false with `err` set (errno) on failure.
  bool try_listen(const sockaddr* addr, socklen_t len, bool dual_stack, int& err);
  void run_timers();
  int epoll_timeout_ms() const;

  ServerOptions options;
  // Everything below up to `epfd` belongs to the io thread once it runs.
  KvState kv;
  KvState::Effects fx;
  // Open sessions by id (epoll_event.data.u64 is the id: an event for a session closed
  // earlier in the same batch finds nothing).
  std::unordered_map<KvState::ClientId, std::shared_ptr<Session>> sessions;
  // Closed this turn: destroyed at its end, never while one of their calls runs.
  std::vector<std::shared_ptr<Session>> closed_sessions;
  // Sessions with unread input left after their one chunk this turn (read next turn).
  std::vector<KvState::ClientId> read_again;
  std::deque<std::function<void()>> posted;
  std::string read_buf;  // the shared read chunk
  KvState::ClientId next_id = 1;
  bool stopping = false;
  bool quit = false;                 // the loop returns at the end of this turn
  std::size_t refused_in_burst = 0;  // connections over max_connections since last logged
  bool accept_error_logged = false;
  std::optional<Clock::time_point> accept_retry_at;  // listener paused (EMFILE) until then
  std::optional<Clock::time_point> reject_summary_at;
  std::optional<Clock::time_point> trim_at;
  Clock::time_point reject_window_start{};
  std::size_t rejects_logged = 0;      // in the current window
  std::size_t rejects_suppressed = 0;  // since the last summary
  std::string last_suppressed;         // "peer: reason" of the latest one
  std::size_t output_bytes = 0;        // unsent reply bytes, all sessions
  std::deque<std::pair<std::shared_ptr<Session>, std::size_t>> deferred;  // (session, need)
  bool resume_posted = false;
  std::uint64_t trimmed_at = 0;  // kv.freed_bytes() at the last trim

  std::atomic<std::size_t> connections{0};
  // TcpStoreServer::stats(): written by the io thread only (bump), read by any.
  std::atomic<std::uint64_t> stat_requests{0}, stat_bytes_in{0}, stat_bytes_out{0};
  static void bump(std::atomic<std::uint64_t>& c, std::uint64_t n) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  std::atomic<std::uint16_t> port{0};

  UniqueFd epfd;
  UniqueFd listen_fd;
  UniqueFd wake_fd;  // eventfd: run_on_loop wakes the io thread
  std::mutex remote_mu;
  std::vector<std::function<void()>> remote;  // guarded by remote_mu
  std::thread thread;
  std::mutex lifecycle_mu;  // start/stop/reset callers
  bool running = false;     // guarded by lifecycle_mu
};

// epoll_ctl(epfd, op, fd) with `events` and `tag` as data.u64; throws on failure (not for DEL).
void epoll_set(int epfd, int op, int fd, std::uint32_t events, std::uint64_t tag);

// epoll_event.data.u64 values that are not sessions (session ids start at 1 << 8).
inline constexpr std::uint64_t kListenTag = 1, kWakeTag = 2, kFirstSessionId = 256;

// One client connection: turns bytes into requests (parse_request), requests into
// replies (handle_request), sends a turn's replies in one send (the rest on EPOLLOUT),
// pauses reading while its own or the server's output budget is used up, and streams
// large GET / MULTI_GET replies. Lives on the io thread only (owned by
// ServerState::sessions; a closed one lives to the end of the turn).
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(ServerState& server, UniqueFd fd, KvState::ClientId id, std::string peer)
      : server_(server), fd_(std::move(fd)), id_(id), peer_(std::move(peer)) {}
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // epoll reported `events` (edge-triggered: EPOLLIN, EPOLLOUT, errors).
  void on_event(std::uint32_t events);
  // Reads the next chunk of input left unread last turn.
  void read_more();

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
  void after_consume();
  // Handles every complete request at the front of `data`, in order, until this
  // connection's or the server's output budget is used up. Returns the bytes used.
  std::size_t consume(std::string_view data);
  void fill_from_stream();
  void finish_stream();
  void resume();  // takes up requests held back while paused
  std::size_t unsent() const { return out_.size() - out_pos_; }
  void account(std::size_t now);  // tells the server this session now has `now` unsent
  // Sends what the socket takes now; the rest waits for EPOLLOUT.
  void do_write();
  void on_writable();

  ServerState& server_;
  UniqueFd fd_;
  KvState::ClientId id_;
  std::string peer_;                // host:port, for log lines
  std::optional<Dialect> dialect_;  // decided by the first bytes
  std::string in_;                  // an incomplete request (or requests held back while paused)
  std::string out_;                 // replies not yet taken by the socket, from out_pos_
  std::size_t out_pos_ = 0;
  Request req_;                        // reused, so steady-state requests allocate little
  bool readable_ = false;              // input may be waiting (edge seen, no short read since)
  bool writable_ = true;               // the socket took everything last time
  bool paused_ = false;                // reads nothing and handles nothing more for now
  bool deferred_ = false;              // paused_ until the server's output budget lets it go on
  bool read_again_ = false;            // queued in ServerState::read_again
  bool peer_done_ = false;             // EPOLLRDHUP/HUP/ERR seen: read on to EOF or the error
  std::optional<ReplyStream> stream_;  // a large reply being sent piece by piece
  bool stream_posted_ = false;
  std::size_t accounted_ = 0;  // this session's share of ServerState::output_bytes
  bool closed_ = false;
};

}  // namespace ddprun::store::server_detail
