// tcp_store_connection.cpp: TcpStore::Connection over a plain non-blocking POSIX
// socket. poll() gives every read and write its deadline, which is how timed waits and
// the CANCEL_WAIT protocol are done without a second thread.
#include "store/tcp_store_connection.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "base/silent_peer.h"
#include "base/sys_error.h"

namespace ddprun::store {

namespace tcp_client {

Deadline deadline_after(Store::Duration d) {
  if (d == Store::kNoTimeout) return std::nullopt;
  return Clock::now() + d;
}

}  // namespace tcp_client

namespace {

using tcp_client::AttemptFailed;
using tcp_client::Clock;
using Deadline = tcp_client::Deadline;

constexpr std::size_t kReadChunk = 64 * 1024;
// poll_fd's slice, and the lateness of a slice's return that counts as not scheduled.
constexpr int kPollSliceMs = 500;
constexpr auto kSchedulingSlack = std::chrono::milliseconds(50);

int poll_ms(const Deadline& deadline) {
  if (!deadline) return -1;
  auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, INT_MAX));
}

// poll() on one fd until ready (> 0), `deadline` (0), an error (< 0, errno set) or, with
// `cancel`, its becoming true (0 with *cancelled = true): then in 20 ms slices.
int poll_one(pollfd& p, const Deadline& deadline, const std::atomic<bool>* cancel,
             bool* cancelled) {
  *cancelled = false;
  for (;;) {
    int ms = poll_ms(deadline);
    if (cancel != nullptr) ms = ms < 0 ? 20 : std::min(ms, 20);
    const int n = ::poll(&p, 1, ms);
    if (n < 0 && errno == EINTR) continue;
    if (n != 0 || cancel == nullptr) return n;
    if (cancel->load()) {
      *cancelled = true;
      return 0;
    }
    if (poll_ms(deadline) == 0) return 0;
  }
}

}  // namespace

// One attempt: resolve, connect to each address in turn, handshake.
void TcpStore::Connection::connect_once(const std::string& host, std::uint16_t port,
                                        Deadline deadline, const std::atomic<bool>* cancel) {
  cancel_ = cancel;
  struct Reset {
    const std::atomic<bool>*& c;
    ~Reset() { c = nullptr; }
  } reset{cancel_};
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
  int last_err = 0;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    int err = connect_addr(ai, deadline);
    if (err == 0) break;
    last = err == ETIMEDOUT ? "connect timed out" : errno_text(err);
    last_err = err;
  }
  ::freeaddrinfo(found);
  if (!fd_) throw AttemptFailed(last, last_err);
  handshake(deadline);
}

void TcpStore::Connection::send(std::string_view bytes, Deadline deadline) {
  check_open();
  while (!bytes.empty()) {
    ssize_t n = ::send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!poll_fd(POLLOUT, deadline)) fail_timeout("sending a request");
      continue;
    }
    if (errno == EPIPE || errno == ECONNRESET) fail_closed(errno);
    if (errno == ETIMEDOUT) fail_silent();
    fail("send failed: " + errno_text(errno) + " (" + awaiting_ + ")");
  }
}

// Blocks until a reply byte is buffered or readable; false when `deadline` passes.
bool TcpStore::Connection::wait_readable(Deadline deadline) {
  check_open();
  return rpos_ < rlen_ || poll_fd(POLLIN, deadline);
}

std::uint8_t TcpStore::Connection::read_u8(Deadline deadline) {
  return static_cast<std::uint8_t>(read_value(ReplyValue::kU8, deadline, nullptr));
}

std::uint32_t TcpStore::Connection::read_u32(Deadline deadline) {
  return static_cast<std::uint32_t>(read_value(ReplyValue::kU32, deadline, nullptr));
}

std::int64_t TcpStore::Connection::read_i64(Deadline deadline) {
  return read_value(ReplyValue::kI64, deadline, nullptr);
}

std::string TcpStore::Connection::read_bytes(Deadline deadline) {
  std::string value;
  read_value(ReplyValue::kBytes, deadline, &value);
  return value;
}

// Closes the connection for good: later uses say `broken`; throws E with the address and
// `detail`. Every way a connection is given up goes through here.
template <typename E>
void TcpStore::Connection::give_up(std::string broken, const std::string& detail) {
  close_fd();
  broken_ = std::move(broken);
  throw E("store " + addr_ + ": " + detail);
}

void TcpStore::Connection::fail(const std::string& reason) {
  give_up<StoreConnectionError>(reason, reason);
}

void TcpStore::Connection::fail_silent() {
  const std::string secs = std::to_string(silent_peer_timeout_.count() / 1000.0).substr(0, 5);
  give_up<StoreSilentError>("silent past " + secs + " s",
                            "no answer, not even TCP acknowledgements, for " + secs + " s (" +
                                awaiting_ + "): the link or the host is down");
}

void TcpStore::Connection::fail_closed(int err) {
  closed_by_peer_ = true;
  const std::string reason = closed_message(err);
  give_up<StoreClosedError>(reason, reason);
}

void TcpStore::Connection::fail_protocol(const std::string& reason) {
  give_up<StoreProtocolError>(reason, reason);
}

void TcpStore::Connection::fail_timeout(const std::string& what) {
  give_up<StoreTimeoutError>("timed out " + what, "timed out " + what + " (connection closed)");
}

// The reusable request, cleared, for `op` (and its one key).
Request& TcpStore::Connection::request(Op op) {
  req_.op = op;
  req_.keys.clear();
  req_.values.clear();
  req_.number = 0;
  req_.nonce = 0;
  return req_;
}

Request& TcpStore::Connection::request(Op op, std::string_view key) {
  request(op).keys.emplace_back(key);
  return req_;
}

void TcpStore::Connection::send(const Request& req, Deadline deadline) {
  wbuf_.clear();
  encode_request(req, Dialect::kModern, wbuf_);
  awaiting(req);
  send(wbuf_, deadline);
}

// Returns 0 on success (fd_ set) or an errno value.
int TcpStore::Connection::connect_addr(const addrinfo* ai, Deadline deadline) {
  UniqueFd fd(
      ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
  if (!fd) return errno;
  int err = 0;
  if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
    err = errno;
    if (err == EINPROGRESS || err == EINTR) {
      pollfd p{fd.get(), POLLOUT, 0};
      bool cancelled = false;
      const int n = poll_one(p, deadline, cancel_, &cancelled);
      socklen_t len = sizeof(err);
      if (n == 0) {
        err = cancelled ? ECANCELED : ETIMEDOUT;
      } else if (n < 0 || ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
        err = errno;
      }
    }
  }
  if (err != 0) return err;  // fd closes here
  int one = 1;
  // Requests are small and strictly alternate with replies: Nagle would only add delay.
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  bound_silent_peer(fd.get(), silent_peer_timeout_);
  fd_ = std::move(fd);
  return 0;
}

void TcpStore::Connection::handshake(Deadline deadline) {
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
    awaiting_ = "the handshake (VALIDATE, PING)";
    awaiting_op_ = Op::kValidate;
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

void TcpStore::Connection::check_open() {
  if (!fd_) {
    const std::string what =
        "store " + addr_ + ": connection unusable since an earlier error (" + broken_ + ")";
    if (closed_by_peer_) throw StoreClosedError(what);
    throw StoreConnectionError(what);
  }
}

// True when `events` are ready, false when the deadline passed. The time this thread was
// not scheduled does not count: a reply deadline judges the store, and a thread that
// could not look (a machine busier than it has cores: the store's host, when local, is
// starved alike) has no evidence against it. Polled in slices; a slice that returns
// `late` past its end (a monotonic clock jump) gives that much time back from now.
bool TcpStore::Connection::poll_fd(short events, Deadline deadline) {
  pollfd p{fd_.get(), events, 0};
  for (;;) {
    int ms = deadline ? std::min(poll_ms(deadline), kPollSliceMs) : -1;
    // A cancellable wait (a connect that SIGTERM may end) looks at the flag every 20 ms.
    if (cancel_ != nullptr) ms = ms < 0 ? 20 : std::min(ms, 20);
    const auto asked = Clock::now();
    const int n = ::poll(&p, 1, ms);
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) fail("poll failed: " + errno_text(errno));
    if (n != 0) continue;
    if (cancel_ != nullptr && cancel_->load()) fail("cancelled");
    if (!deadline) continue;
    const auto now = Clock::now();
    const auto late = now - asked - std::chrono::milliseconds(ms);
    if (late > kSchedulingSlack) deadline = std::max(*deadline, now + late);
    if (now >= *deadline) return false;
  }
}

// The next reply value (store_core's decoder), reading until it is complete.
std::int64_t TcpStore::Connection::read_value(ReplyValue kind, Deadline deadline,
                                              std::string* bytes) {
  while (true) {
    std::int64_t number = 0;
    const ReplyDecode r = decode_reply_value(std::string_view(rbuf_.data() + rpos_, rlen_ - rpos_),
                                             kind, number, bytes);
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
void TcpStore::Connection::fill(std::size_t n, Deadline deadline) {
  check_open();
  if (rlen_ - rpos_ < n) {
    std::memmove(rbuf_.data(), rbuf_.data() + rpos_, rlen_ - rpos_);
    rlen_ -= rpos_;
    rpos_ = 0;
    if (rbuf_.size() < std::max(n, kReadChunk)) rbuf_.resize(std::max(n, kReadChunk));
  }
  while (rlen_ - rpos_ < n) {
    ssize_t got = ::recv(fd_.get(), rbuf_.data() + rlen_, rbuf_.size() - rlen_, 0);
    if (got > 0) {
      rlen_ += static_cast<std::size_t>(got);
      continue;
    }
    if (got == 0) fail_closed(0);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!poll_fd(POLLIN, deadline)) fail_timeout("waiting for a reply to " + awaiting_);
      continue;
    }
    if (errno == ECONNRESET) fail_closed(errno);
    if (errno == ETIMEDOUT) fail_silent();
    fail("recv failed: " + errno_text(errno));
  }
}

// The peer closed (err 0) or reset (a server that rejects a request closes at once,
// while the rest of what we sent is still unread on its side; its kernel then resets
// instead of closing cleanly). Both mean the same to the user: the store closed the
// connection, before answering the request named. ADD and BARRIER also say the one
// refusal a store answers that way (the client cannot tell it from a store that left).
std::string TcpStore::Connection::closed_message(int err) const {
  std::string msg = "the store closed the connection";
  if (err != 0) msg += " (" + errno_text(err) + ")";
  msg += " before replying to " + awaiting_;
  if (awaiting_op_ == Op::kAdd || awaiting_op_ == Op::kBarrier) {
    msg +=
        "; it went away, or it refused the request (a store closes the connection to "
        "refuse " +
        std::string(op_name(awaiting_op_)) + " on a key whose value is not a decimal integer)";
  }
  return msg;
}

// Notes the request whose reply comes next, for error messages: "ADD on key \"k\"".
void TcpStore::Connection::awaiting(const Request& req) {
  awaiting_op_ = req.op;
  awaiting_ = op_name(req.op);
  if (req.keys.size() == 1) {
    awaiting_ += " on key \"" + escape_bytes(req.keys[0]) + "\"";
  } else if (!req.keys.empty()) {
    awaiting_ += " on " + std::to_string(req.keys.size()) + " keys (first \"" +
                 escape_bytes(req.keys[0]) + "\")";
  }
}

void TcpStore::Connection::close_fd() { fd_.reset(); }

}  // namespace ddprun::store
