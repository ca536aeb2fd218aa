// tcp_store_client.cpp: TcpStore over a plain non-blocking POSIX socket. poll() gives
// every read and write its deadline, which is how timed waits and the CANCEL_WAIT
// protocol are done without a second thread. About 570 lines: the connection (connect,
// handshake, buffered reads) and every Store operation's exchange, kept with the
// CANCEL_WAIT protocol they share.
#include "store/tcp_store_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <system_error>
#include <thread>

#include "base/sys_error.h"
#include "store/backoff.h"
#include "store/host_port.h"
#include "store/protocol.h"
#include "store/reply.h"

namespace ddprun::store {
namespace {

using Clock = std::chrono::steady_clock;
using Deadline = std::optional<Clock::time_point>;  // nullopt = forever

// Replies to non-waiting requests get at least this long, however short the store's
// timeout, so a short wait timeout does not turn a busy server into a broken connection.
constexpr Store::Duration kMinReplyWait{5000};
constexpr std::size_t kReadChunk = 64 * 1024;

Deadline deadline_after(Store::Duration d) {
  if (d == Store::kNoTimeout) return std::nullopt;
  return Clock::now() + d;
}

int poll_ms(const Deadline& deadline) {
  if (!deadline) return -1;
  auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, INT_MAX));
}

// One failed connection attempt that is worth retrying (refused, timed out, reset,
// name resolution); carries the reason for the final error message.
struct AttemptFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace

// The socket and its read buffer. Every method REQUIRES the owner's mutex.
class TcpStore::Connection {
 public:
  explicit Connection(std::string addr) : addr_(std::move(addr)) {}
  ~Connection() { close_fd(); }

  // One attempt: resolve, connect to each address in turn, handshake.
  void connect_once(const std::string& host, std::uint16_t port, Deadline deadline) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    std::string service = std::to_string(port);
    int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
    if (rc != 0) {
      throw AttemptFailed("name resolution failed: " + std::string(::gai_strerror(rc)));
    }
    std::string last = "no address";
    for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
      int err = connect_addr(ai, deadline);
      if (err == 0) break;
      last = err == ETIMEDOUT ? "connect timed out" : errno_text(err);
    }
    ::freeaddrinfo(found);
    if (fd_ < 0) throw AttemptFailed(last);
    handshake(deadline);
  }

  void send(std::string_view bytes, Deadline deadline) {
    check_open();
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n > 0) {
        bytes.remove_prefix(static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!poll_fd(POLLOUT, deadline)) fail_timeout("sending a request");
        continue;
      }
      if (errno == EPIPE || errno == ECONNRESET) fail(closed_message(errno));
      fail("send failed: " + errno_text(errno));
    }
  }

  // Blocks until a reply byte is buffered or readable; false when `deadline` passes.
  bool wait_readable(Deadline deadline) {
    check_open();
    return rpos_ < rlen_ || poll_fd(POLLIN, deadline);
  }

  std::uint8_t read_u8(Deadline deadline) {
    return static_cast<std::uint8_t>(read_value(ReplyValue::kU8, deadline, nullptr));
  }
  std::uint32_t read_u32(Deadline deadline) {
    return static_cast<std::uint32_t>(read_value(ReplyValue::kU32, deadline, nullptr));
  }
  std::int64_t read_i64(Deadline deadline) {
    return read_value(ReplyValue::kI64, deadline, nullptr);
  }
  std::string read_bytes(Deadline deadline) {
    std::string value;
    read_value(ReplyValue::kBytes, deadline, &value);
    return value;
  }

  // Closes the connection for good and throws StoreConnectionError with `reason`.
  [[noreturn]] void fail(const std::string& reason) {
    close_fd();
    broken_ = reason;
    throw StoreConnectionError("store " + addr_ + ": " + reason);
  }
  [[noreturn]] void fail_protocol(const std::string& reason) {
    close_fd();
    broken_ = reason;
    throw StoreProtocolError("store " + addr_ + ": " + reason);
  }
  [[noreturn]] void fail_timeout(const std::string& what) {
    close_fd();
    broken_ = "timed out " + what;
    throw StoreTimeoutError("store " + addr_ + ": timed out " + what + " (connection closed)");
  }

  // The reusable request, cleared, for `op` (and its one key).
  Request& request(Op op) {
    req_.op = op;
    req_.keys.clear();
    req_.values.clear();
    req_.number = 0;
    req_.nonce = 0;
    return req_;
  }
  Request& request(Op op, std::string_view key) {
    request(op).keys.emplace_back(key);
    return req_;
  }
  void send(const Request& req, Deadline deadline) {
    wbuf_.clear();
    encode_request(req, Dialect::kModern, wbuf_);
    send(wbuf_, deadline);
  }

 private:
  // Returns 0 on success (fd_ set) or an errno value.
  int connect_addr(const addrinfo* ai, Deadline deadline) {
    int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) return errno;
    int err = 0;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS || err == EINTR) {
        pollfd p{fd, POLLOUT, 0};
        int n;
        do {
          n = ::poll(&p, 1, poll_ms(deadline));
        } while (n < 0 && errno == EINTR);
        socklen_t len = sizeof(err);
        if (n == 0) {
          err = ETIMEDOUT;
        } else if (n < 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
          err = errno;
        }
      }
    }
    if (err != 0) {
      ::close(fd);
      return err;
    }
    int one = 1;
    // Requests are small and strictly alternate with replies: Nagle would only add delay.
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fd_ = fd;
    return 0;
  }

  void handshake(Deadline deadline) {
    // VALIDATE and PING in one write, as PyTorch 2.x sends them; the PING echo proves the
    // peer is a modern-dialect store.
    Request& req = request(Op::kValidate);
    req.nonce = kValidationMagic;
    std::string bytes;
    encode_request(req, Dialect::kModern, bytes);
    const auto nonce = static_cast<std::uint32_t>(::getpid());
    request(Op::kPing).nonce = nonce;
    encode_request(req, Dialect::kModern, bytes);
    try {
      send(bytes, deadline);
      std::uint32_t echo = read_u32(deadline);
      if (echo != nonce) {
        close_fd();
        throw StoreProtocolError("store " + addr_ + " answered PING " + std::to_string(nonce) +
                                 " with " + std::to_string(echo) + " (not a TCPStore?)");
      }
    } catch (const StoreConnectionError& e) {
      broken_.clear();
      throw AttemptFailed(std::string("handshake failed: ") + e.what());
    } catch (const StoreTimeoutError&) {
      broken_.clear();
      throw AttemptFailed("handshake timed out");
    }
  }

  void check_open() {
    if (fd_ < 0) {
      throw StoreConnectionError("store " + addr_ +
                                 ": connection unusable since an earlier error (" + broken_ + ")");
    }
  }

  // True when `events` are ready, false when the deadline passed.
  bool poll_fd(short events, Deadline deadline) {
    pollfd p{fd_, events, 0};
    for (;;) {
      int n = ::poll(&p, 1, poll_ms(deadline));
      if (n > 0) return true;
      if (n == 0) return false;
      if (errno != EINTR) fail("poll failed: " + errno_text(errno));
    }
  }

  // The next reply value (store_core's decoder), reading until it is complete.
  std::int64_t read_value(ReplyValue kind, Deadline deadline, std::string* bytes) {
    while (true) {
      std::int64_t number = 0;
      const ReplyDecode r = decode_reply_value(
          std::string_view(rbuf_.data() + rpos_, rlen_ - rpos_), kind, number, bytes);
      if (r.status == ParseStatus::kOk) {
        rpos_ += r.consumed;
        return number;
      }
      if (r.status == ParseStatus::kBad) fail(r.error);
      fill(r.needed, deadline);
    }
  }

  // Receives until `n` reply bytes are buffered. rbuf_ keeps its size (at least
  // kReadChunk) and holds rlen_ valid bytes, so small replies cost no allocation.
  void fill(std::size_t n, Deadline deadline) {
    check_open();
    if (rlen_ - rpos_ < n) {
      std::memmove(rbuf_.data(), rbuf_.data() + rpos_, rlen_ - rpos_);
      rlen_ -= rpos_;
      rpos_ = 0;
      if (rbuf_.size() < std::max(n, kReadChunk)) rbuf_.resize(std::max(n, kReadChunk));
    }
    while (rlen_ - rpos_ < n) {
      ssize_t got = ::recv(fd_, rbuf_.data() + rlen_, rbuf_.size() - rlen_, 0);
      if (got > 0) {
        rlen_ += static_cast<std::size_t>(got);
        continue;
      }
      if (got == 0) fail("the store closed the connection");
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!poll_fd(POLLIN, deadline)) fail_timeout("waiting for a reply");
        continue;
      }
      if (errno == ECONNRESET) fail(closed_message(errno));
      fail("recv failed: " + errno_text(errno));
    }
  }

  // A server that rejects a request closes at once, while the rest of what we sent is
  // still unread on its side; its kernel then resets instead of closing cleanly. Both
  // mean the same to the user: the store closed the connection (its log says why).
  static std::string closed_message(int err) {
    return "the store closed the connection (" + errno_text(err) + ")";
  }

  void close_fd() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  int fd_ = -1;
  std::string addr_;
  std::string broken_;  // why the connection was given up
  std::string rbuf_;    // reply bytes [rpos_, rlen_) not yet taken
  std::size_t rpos_ = 0;
  std::size_t rlen_ = 0;
  std::string wbuf_;
  Request req_;
};

TcpStore::TcpStore(TcpStoreOptions options) : Store(options.timeout), options_(std::move(options)) {
  std::string addr = address();
  Deadline deadline = deadline_after(options_.connect_timeout);
  ExponentialBackoffWithJitter backoff({.initial_interval = Duration(50),
                                        .randomization_factor = 0.5,
                                        .multiplier = 1.5,
                                        .max_interval = Duration(1000)});
  const std::atomic<bool>* cancel = options_.cancel;
  if (cancel != nullptr) {
    backoff.set_sleep([cancel](Duration d) {
      for (auto until = Clock::now() + d; !cancel->load() && Clock::now() < until;) {
        std::this_thread::sleep_for(std::min<Clock::duration>(Duration(20), until - Clock::now()));
      }
    });
  }
  for (;;) {
    if (cancel != nullptr && cancel->load()) {
      throw StoreConnectionError("connecting to store " + addr + " cancelled");
    }
    auto conn = std::make_unique<Connection>(addr);
    try {
      conn->connect_once(options_.host, options_.port, deadline);
      conn_ = std::move(conn);
      break;
    } catch (const AttemptFailed& e) {
      auto left = deadline ? std::chrono::duration_cast<Duration>(*deadline - Clock::now())
                           : Duration::max();
      if (left <= Duration::zero()) {
        throw StoreConnectionError("cannot connect to store " + addr + " within " +
                                   std::to_string(options_.connect_timeout.count()) +
                                   " ms: " + e.what());
      }
      backoff.sleep_backoff(left);
    }
  }
  if (options_.world_size && options_.wait_for_workers) {
    std::int64_t joined = add("init/", 1);
    Duration limit = timeout();
    Deadline workers_deadline = deadline_after(limit);
    ExponentialBackoffWithJitter poll_backoff({.initial_interval = Duration(10),
                                               .randomization_factor = 0.5,
                                               .multiplier = 1.5,
                                               .max_interval = Duration(500)});
    while (joined < *options_.world_size) {
      if (workers_deadline && Clock::now() >= *workers_deadline) {
        throw StoreTimeoutError("timed out after " + std::to_string(limit.count()) +
                                " ms waiting for clients of store " + addr + ": " +
                                std::to_string(joined) + "/" +
                                std::to_string(*options_.world_size) + " clients joined");
      }
      poll_backoff.sleep_backoff();
      joined = add("init/", 0);
    }
  }
}

TcpStore::~TcpStore() = default;

std::string TcpStore::address() const { return format_host_port(options_.host, options_.port); }

namespace {
Deadline reply_deadline(Store::Duration timeout) {
  return timeout == Store::kNoTimeout ? Deadline()
                                      : deadline_after(std::max(timeout, kMinReplyWait));
}
}  // namespace

void TcpStore::set(std::string_view key, std::string_view value) {
  std::lock_guard lock(mu_);
  Request& req = conn_->request(Op::kSet, key);
  req.values.emplace_back(value);
  conn_->send(req, reply_deadline(timeout()));
}

std::string TcpStore::compare_set(std::string_view key, std::string_view expected,
                                  std::string_view desired) {
  std::lock_guard lock(mu_);
  Request& req = conn_->request(Op::kCompareSet, key);
  req.values.emplace_back(expected);
  req.values.emplace_back(desired);
  Deadline deadline = reply_deadline(timeout());
  conn_->send(req, deadline);
  return conn_->read_bytes(deadline);
}

// WAIT then GET, as PyTorch's client does.
std::string TcpStore::get(std::string_view key) {
  std::vector<std::string> keys{std::string(key)};
  Duration limit = timeout();
  std::lock_guard lock(mu_);
  wait_locked(keys, limit, "get");
  Request& req = conn_->request(Op::kGet, key);
  Deadline deadline = reply_deadline(limit);
  conn_->send(req, deadline);
  return conn_->read_bytes(deadline);
}

void TcpStore::do_wait(const std::vector<std::string>& keys, Duration timeout) {
  std::lock_guard lock(mu_);
  wait_locked(keys, timeout, "wait");
}

void TcpStore::wait_locked(const std::vector<std::string>& keys, Duration timeout,
                           const char* what) {
  Request& req = conn_->request(Op::kWait);
  req.keys = keys;
  conn_->send(req, reply_deadline(timeout));
  await_release(keys, timeout, what);
}

// PyTorch 2.x's timed wait: on timeout send CANCEL_WAIT and read one byte; `01` means
// canceled; `00` means the release crossed the cancel, and the `01` follows it.
void TcpStore::await_release(const std::vector<std::string>& keys, Duration timeout,
                             const char* what) {
  Deadline grace = reply_deadline(timeout);
  if (conn_->wait_readable(deadline_after(timeout))) {
    std::uint8_t reply = conn_->read_u8(grace);
    if (reply != kStopWaiting) {
      conn_->fail_protocol(std::string(what) + ": expected STOP_WAITING, got " +
                           std::to_string(reply));
    }
    return;
  }
  Request& cancel = conn_->request(Op::kCancelWait);
  conn_->send(cancel, grace);
  std::uint8_t reply = conn_->read_u8(grace);
  if (reply == kStopWaiting) reply = conn_->read_u8(grace);
  if (reply != kWaitCanceled) {
    conn_->fail_protocol(std::string(what) + ": expected WAIT_CANCELED after CANCEL_WAIT, got " +
                         std::to_string(reply));
  }
  throw StoreTimeoutError(timeout_message(what, timeout, keys));
}

std::int64_t TcpStore::add(std::string_view key, std::int64_t delta) {
  std::lock_guard lock(mu_);
  Request& req = conn_->request(Op::kAdd, key);
  req.number = delta;
  Deadline deadline = reply_deadline(timeout());
  conn_->send(req, deadline);
  try {
    return conn_->read_i64(deadline);
  } catch (const StoreConnectionError& e) {
    // The server closes the connection instead of answering an invalid ADD.
    throw StoreProtocolError("add on key " + escape_bytes(key) + " refused: " + e.what() +
                             " (is the value a decimal integer?)");
  }
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mu_);
  Request& req = conn_->request(Op::kCheck);
  req.keys = keys;
  Deadline deadline = reply_deadline(timeout());
  conn_->send(req, deadline);
  return conn_->read_u8(deadline) == kCheckReady;
}

std::int64_t TcpStore::num_keys() {
  std::lock_guard lock(mu_);
  Request& req = conn_->request(Op::kGetNumKeys);
  Deadline deadline = reply_deadline(timeout());
  conn_->send(req, deadline);
  return conn_->read_i64(deadline);
}

bool TcpStore::delete_key(std::string_view key) {
  std::lock_guard lock(mu_);
  Request& req = conn_->request(Op::kDeleteKey, key);
  Deadline deadline = reply_deadline(timeout());
  conn_->send(req, deadline);
  return conn_->read_i64(deadline) != 0;
}

void TcpStore::append(std::string_view key, std::string_view value) {
  std::lock_guard lock(mu_);
  Request& req = conn_->request(Op::kAppend, key);
  req.values.emplace_back(value);
  conn_->send(req, reply_deadline(timeout()));
}

// WAIT on every key, then MULTI_GET, as PyTorch's client does.
std::vector<std::string> TcpStore::multi_get(const std::vector<std::string>& keys) {
  Duration limit = timeout();
  std::lock_guard lock(mu_);
  wait_locked(keys, limit, "multi_get");
  Request& req = conn_->request(Op::kMultiGet);
  req.keys = keys;
  Deadline deadline = reply_deadline(limit);
  conn_->send(req, deadline);
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) values.push_back(conn_->read_bytes(deadline));
  return values;
}

void TcpStore::multi_set(const std::vector<std::string>& keys,
                         const std::vector<std::string>& values) {
  check_multi_set_sizes(keys, values);
  std::lock_guard lock(mu_);
  Request& req = conn_->request(Op::kMultiSet);
  req.keys = keys;
  req.values = values;
  conn_->send(req, reply_deadline(timeout()));
}

std::vector<std::string> TcpStore::list_keys() {
  std::lock_guard lock(mu_);
  Request& req = conn_->request(Op::kListKeys);
  Deadline deadline = reply_deadline(timeout());
  conn_->send(req, deadline);
  std::int64_t n = conn_->read_i64(deadline);
  if (n < 0) conn_->fail_protocol("LIST_KEYS: negative count " + std::to_string(n));
  std::vector<std::string> keys;
  for (std::int64_t i = 0; i < n; ++i) keys.push_back(conn_->read_bytes(deadline));
  return keys;
}

void TcpStore::queue_push(std::string_view key, std::string_view value) {
  std::lock_guard lock(mu_);
  Request& req = conn_->request(Op::kQueuePush, key);
  req.values.emplace_back(value);
  conn_->send(req, reply_deadline(timeout()));
}

std::optional<std::string> TcpStore::pop_locked(std::string_view key, Duration limit) {
  Request& req = conn_->request(Op::kQueuePop, key);
  Deadline deadline = reply_deadline(limit);
  conn_->send(req, deadline);
  if (conn_->read_i64(deadline) <= 0) return std::nullopt;
  return conn_->read_bytes(deadline);
}

// A blocking pop is WAIT(key) then POP; another client may win the item in between, so
// it loops until its own deadline.
std::string TcpStore::queue_pop(std::string_view key) {
  Duration limit = timeout();
  Deadline deadline = deadline_after(limit);
  std::vector<std::string> keys{std::string(key)};
  std::lock_guard lock(mu_);
  for (;;) {
    Duration left = limit;
    if (deadline) {
      left = std::chrono::duration_cast<Duration>(*deadline - Clock::now());
      if (left <= Duration::zero())
        throw StoreTimeoutError(timeout_message("queue_pop", limit, keys));
    }
    wait_locked(keys, left, "queue_pop");
    if (std::optional<std::string> value = pop_locked(key, limit)) return std::move(*value);
  }
}

std::optional<std::string> TcpStore::queue_try_pop(std::string_view key) {
  std::lock_guard lock(mu_);
  return pop_locked(key, timeout());
}

std::int64_t TcpStore::queue_len(std::string_view key) {
  std::lock_guard lock(mu_);
  Request& req = conn_->request(Op::kQueueLen, key);
  Deadline deadline = reply_deadline(timeout());
  conn_->send(req, deadline);
  return conn_->read_i64(deadline);
}

void TcpStore::barrier(std::string_view key, std::int64_t world_size) {
  Duration limit = timeout();
  std::lock_guard lock(mu_);
  Request& req = conn_->request(Op::kBarrier, key);
  req.number = world_size;
  conn_->send(req, reply_deadline(limit));
  try {
    await_release({std::string(key)}, limit, "barrier");
  } catch (const StoreConnectionError& e) {
    throw StoreProtocolError("barrier on key " + escape_bytes(key) + " refused: " + e.what() +
                             " (is the counter a decimal integer?)");
  }
}

}  // namespace ddprun::store
