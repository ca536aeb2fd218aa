// tcp_store_server.cpp: TcpStoreServer on a plain edge-triggered epoll loop (ServerState):
// the io thread and its turn, the output budget shared by the connections, rate-limited
// rejection logs and three timers. The listener is tcp_store_accept.cpp; a Session per
// connection (tcp_store_session.cpp) turns bytes into requests and requests into replies.
// Memory stays bounded (docs/protocol.md "Output limits"): idle sockets own no buffer,
// replies are sized first, large ones are streamed.
#include "store/tcp_store_server.h"

#include <malloc.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <future>
#include <stdexcept>

#include "base/sys_error.h"
#include "store/tcp_store_session.h"

namespace ddprun::store {
namespace server_detail {
namespace {

// Connections closed for bad input are logged one by one up to kRejectLogBurst per
// kRejectLogWindow; the rest are counted and summarised in one line when the window ends
// (a fuzzer or a port scanner must not flood the log).
constexpr std::size_t kRejectLogBurst = 10;
constexpr auto kRejectLogWindow = std::chrono::seconds(5);
// Freed store memory goes back to the OS once this much was freed, kTrimDelay later
// (further frees in between join the same trim).
constexpr std::uint64_t kTrimAfterBytes = std::uint64_t{1} << 20;
constexpr auto kTrimDelay = std::chrono::milliseconds(200);
constexpr int kMaxEvents = 256;

}  // namespace
}  // namespace server_detail

struct TcpStoreServer::Impl : server_detail::ServerState {
  using ServerState::ServerState;
};

namespace server_detail {

ServerState::~ServerState() {
  auto all = std::move(sessions);  // each closes its socket as it goes
  sessions.clear();
  all.clear();
  closed_sessions.clear();
  deferred.clear();
  // listen_fd, wake_fd and epfd close after this (UniqueFd members).
}

std::shared_ptr<Session> ServerState::find(KvState::ClientId id) const {
  auto it = sessions.find(id);
  return it == sessions.end() ? nullptr : it->second;
}

void ServerState::run() {
  std::array<epoll_event, kMaxEvents> events{};
  while (!quit) {
    const int n = ::epoll_wait(epfd.get(), events.data(), kMaxEvents, epoll_timeout_ms());
    if (n < 0 && errno != EINTR) throw_errno("epoll_wait");
    for (int i = 0; i < n; ++i) {
      const std::uint64_t tag = events[i].data.u64;
      if (tag == kListenTag) {
        accept_all();
      } else if (tag == kWakeTag) {
        std::uint64_t count = 0;
        [[maybe_unused]] ssize_t r = ::read(wake_fd.get(), &count, sizeof count);
        std::vector<std::function<void()>> tasks;
        {
          std::lock_guard lock(remote_mu);
          tasks.swap(remote);
        }
        for (auto& task : tasks) task();
      } else if (std::shared_ptr<Session> s = find(tag)) {
        s->on_event(events[i].events);
      }
    }
    // Connections that had more input than one chunk, after everyone else's.
    std::vector<KvState::ClientId> again;
    again.swap(read_again);
    for (KvState::ClientId id : again) {
      if (std::shared_ptr<Session> s = find(id)) s->read_more();
    }
    run_timers();
    // Work posted during this turn; what it posts in turn waits for the next.
    for (std::size_t todo = posted.size(); todo > 0 && !posted.empty(); --todo) {
      std::function<void()> fn = std::move(posted.front());
      posted.pop_front();
      fn();
    }
    closed_sessions.clear();
  }
}

int ServerState::epoll_timeout_ms() const {
  if (!posted.empty() || !read_again.empty()) return 0;
  std::optional<Clock::time_point> next;
  for (const auto& at : {accept_retry_at, reject_summary_at, trim_at}) {
    if (at && (!next || *at < *next)) next = at;
  }
  if (!next) return -1;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(*next - Clock::now()).count();
  return static_cast<int>(std::clamp<decltype(ms)>(ms, 0, 60'000));
}

void ServerState::run_timers() {
  const auto now = Clock::now();
  if (accept_retry_at && *accept_retry_at <= now) {
    accept_retry_at.reset();
    if (!stopping) {
      epoll_set(epfd.get(), EPOLL_CTL_MOD, listen_fd.get(), EPOLLIN, kListenTag);
      accept_all();
    }
  }
  if (reject_summary_at && *reject_summary_at <= now) {
    reject_summary_at.reset();
    flush_rejected();
  }
  if (trim_at && *trim_at <= now) {
    trim_at.reset();
    trimmed_at = kv.freed_bytes();
    // glibc keeps freed small chunks in its arenas; this hands their whole pages back
    // (madvise), wherever they lie in the heap. It walks the free lists: milliseconds.
    ::malloc_trim(0);
  }
}

void ServerState::run_on_loop(std::function<void()> fn) {
  {
    std::lock_guard lock(remote_mu);
    remote.push_back(std::move(fn));
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] ssize_t r = ::write(wake_fd.get(), &one, sizeof one);
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
  if (trim_at || stopping || kv.freed_bytes() - trimmed_at < kTrimAfterBytes) return;
  trim_at = Clock::now() + kTrimDelay;
}

void ServerState::output_changed(std::ptrdiff_t delta) {
  output_bytes = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(output_bytes) + delta);
  if (delta < 0 && !deferred.empty() && !resume_posted) {
    // Posted, not called: the caller may be in the middle of its own bookkeeping.
    resume_posted = true;
    post([this] { resume_deferred(); });
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
      post([this] { resume_deferred(); });
    }
    return;
  }
}

void ServerState::session_closed(KvState::ClientId id) {
  kv.forget(id);
  if (auto it = sessions.find(id); it != sessions.end()) {
    closed_sessions.push_back(std::move(it->second));  // destroyed at the end of the turn
    sessions.erase(it);
  }
  connections.fetch_sub(1, std::memory_order_relaxed);
}

void ServerState::log_rejected(const std::string& peer, std::string_view reason) {
  if (stopping) return;  // no timer may outlive stop()
  const auto now = Clock::now();
  if (now - reject_window_start >= kRejectLogWindow) {
    reject_window_start = now;
    rejects_logged = 0;
  }
  if (rejects_logged < kRejectLogBurst) {
    ++rejects_logged;
    spdlog::warn("store: closing connection from {}: {}", peer, reason);
    return;
  }
  last_suppressed = peer + ": " + std::string(reason);
  if (rejects_suppressed++ == 0) reject_summary_at = reject_window_start + kRejectLogWindow;
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
  for (auto& [id, session] : sessions) all.push_back(session);
  for (auto& s : all) s->close("");
  deferred.clear();  // closed now; this drops the last reference to each
}

}  // namespace server_detail

using server_detail::ServerState;

TcpStoreServer::TcpStoreServer(ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

TcpStoreServer::~TcpStoreServer() { stop(); }

std::uint16_t TcpStoreServer::start() {
  std::lock_guard lock(impl_->lifecycle_mu);
  if (impl_->running) throw std::logic_error("TcpStoreServer::start called twice");
  if (impl_->stopping) throw std::logic_error("TcpStoreServer::start after stop");
  Impl& s = *impl_;
  s.listen_or_throw();
  s.epfd.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!s.epfd) throw_errno("epoll_create1");
  s.wake_fd.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!s.wake_fd) throw_errno("eventfd");
  server_detail::epoll_set(s.epfd.get(), EPOLL_CTL_ADD, s.listen_fd.get(), EPOLLIN,
                           server_detail::kListenTag);
  server_detail::epoll_set(s.epfd.get(), EPOLL_CTL_ADD, s.wake_fd.get(), EPOLLIN,
                           server_detail::kWakeTag);
  s.next_id = server_detail::kFirstSessionId;
  s.running = true;
  s.thread = std::thread([impl = impl_.get()] {
    for (;;) {
      try {
        impl->run();
        return;
      } catch (const std::exception& e) {
        // A bug, not bad input (handlers report bad input as values); keep serving.
        spdlog::error("store: internal error in the io thread: {}", e.what());
      }
    }
  });
  return s.port.load();
}

void TcpStoreServer::stop() {
  std::lock_guard lock(impl_->lifecycle_mu);
  if (!impl_->running) {
    impl_->stopping = true;
    return;
  }
  impl_->running = false;
  Impl* impl = impl_.get();
  impl->run_on_loop([impl] {
    impl->stopping = true;
    impl->listen_fd.reset();
    impl->accept_retry_at.reset();
    impl->trim_at.reset();
    impl->reject_summary_at.reset();
    impl->flush_rejected();
    impl->close_all_sessions();
    impl->quit = true;
  });
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
  impl->run_on_loop([impl, &done] {
    impl->close_all_sessions();
    impl->kv.clear();
    done.set_value();
  });
  done.get_future().wait();
}

namespace {

// `fn(state)` run on the io thread (or here while it does not run), for the diagnostics.
template <class Fn>
auto ask_io_thread(ServerState& state, Fn fn) {
  using Result = decltype(fn(state));
  std::lock_guard lock(state.lifecycle_mu);
  if (!state.running) return fn(state);
  std::promise<Result> result;
  state.run_on_loop([&] { result.set_value(fn(state)); });
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

ServerStats TcpStoreServer::stats() const {
  // Read on the io thread: a reply's write and its count happen in one turn of the loop,
  // so a client that has read a reply sees it counted.
  return ask_io_thread(*impl_, [](ServerState& s) {
    constexpr auto relaxed = std::memory_order_relaxed;
    return ServerStats{s.stat_requests.load(relaxed), s.stat_bytes_in.load(relaxed),
                       s.stat_bytes_out.load(relaxed)};
  });
}

std::size_t TcpStoreServer::connection_count() const {
  return impl_->connections.load(std::memory_order_relaxed);
}

}  // namespace ddprun::store
