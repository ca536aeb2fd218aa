// raw_client.cpp: see raw_client.h.
#include "tests/support/raw_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <utility>

#include "base/sys_error.h"
#include "store/core/reply.h"

namespace ddprun::store::testing {

Request make_request(Op op, std::vector<std::string> keys, std::vector<std::string> values,
                     std::int64_t number) {
  Request r;
  r.op = op;
  r.keys = std::move(keys);
  r.values = std::move(values);
  r.number = number;
  if (op == Op::kValidate) r.nonce = kValidationMagic;
  if (op == Op::kPing) r.nonce = static_cast<std::uint32_t>(number);
  return r;
}

std::string encode(const Request& req, Dialect dialect) {
  std::string out;
  encode_request(req, dialect, out);
  return out;
}

std::string encode(Op op, Dialect dialect, std::vector<std::string> keys,
                   std::vector<std::string> values, std::int64_t number) {
  return encode(make_request(op, std::move(keys), std::move(values), number), dialect);
}

std::size_t raise_fd_limit() {
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &lim);
  ::getrlimit(RLIMIT_NOFILE, &lim);
  return static_cast<std::size_t>(lim.rlim_cur);
}

RawClient::RawClient(std::uint16_t port) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw_errno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int err = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 ? 0 : errno;
  if (err == EINTR) {
    // A signal (libFuzzer's SIGALRM timer, for one) interrupted the blocking connect; the
    // connection goes on in the background: wait for it and take its result.
    pollfd p{fd_, POLLOUT, 0};
    int ready = 0;
    do {
      ready = ::poll(&p, 1, -1);
    } while (ready < 0 && errno == EINTR);
    socklen_t len = sizeof(err);
    if (ready < 0) {
      err = errno;
    } else if (::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
      err = errno;
    }
  }
  if (err != 0) {
    ::close(fd_);
    fd_ = -1;
    throw_errno("connect", err);
  }
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

RawClient::~RawClient() {
  if (fd_ >= 0) ::close(fd_);
}

RawClient::RawClient(RawClient&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

void RawClient::send(std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw_errno("send");
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

void RawClient::send_bytewise(std::string_view bytes) {
  for (char c : bytes) send(std::string_view(&c, 1));
}

void RawClient::send(Op op, Dialect dialect, std::vector<std::string> keys,
                     std::vector<std::string> values, std::int64_t number) {
  send(encode(op, dialect, std::move(keys), std::move(values), number));
}

std::optional<std::string> RawClient::read_exact(std::size_t n, std::chrono::milliseconds timeout) {
  std::string out(n, '\0');
  std::size_t have = 0;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (have < n) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd_, POLLIN, 0};
    int ready = ::poll(&p, 1, static_cast<int>(std::max<long long>(left.count(), 0)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return std::nullopt;
    ssize_t got = ::recv(fd_, out.data() + have, n - have, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return std::nullopt;
    have += static_cast<std::size_t>(got);
  }
  return out;
}

std::int64_t RawClient::read_value(ReplyValue kind, std::chrono::milliseconds timeout,
                                   std::string* bytes) {
  std::string buf;
  while (true) {
    std::int64_t number = 0;
    const ReplyDecode r = decode_reply_value(buf, kind, number, bytes);
    if (r.status == ParseStatus::kOk) return number;
    if (r.status == ParseStatus::kBad) throw std::runtime_error(r.error);
    auto more = read_exact(r.needed - buf.size(), timeout);
    if (!more) throw std::runtime_error("no reply (EOF or timeout) reading a reply value");
    buf += *more;
  }
}

std::uint8_t RawClient::read_u8(std::chrono::milliseconds timeout) {
  return static_cast<std::uint8_t>(read_value(ReplyValue::kU8, timeout, nullptr));
}

std::uint32_t RawClient::read_u32() {
  return static_cast<std::uint32_t>(read_value(ReplyValue::kU32, 20s, nullptr));
}

std::int64_t RawClient::read_i64() { return read_value(ReplyValue::kI64, 20s, nullptr); }

std::string RawClient::read_bytes() {
  std::string value;
  read_value(ReplyValue::kBytes, 20s, &value);
  return value;
}

namespace {
// poll() for input, retried on EINTR: > 0 readable (data or EOF), 0 timed out.
int poll_in(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  int ready;
  do {
    ready = ::poll(&p, 1, static_cast<int>(timeout.count()));
  } while (ready < 0 && errno == EINTR);
  return ready;
}
}  // namespace

bool RawClient::closed_by_server(std::chrono::milliseconds timeout) {
  if (poll_in(fd_, timeout) <= 0) return false;
  char c;
  ssize_t got = ::recv(fd_, &c, 1, 0);
  return got == 0 || (got < 0 && errno == ECONNRESET);
}

bool RawClient::silent_for(std::chrono::milliseconds timeout) { return poll_in(fd_, timeout) == 0; }

void RawClient::handshake() {
  std::string bytes = encode(Op::kValidate, Dialect::kModern);
  bytes += encode(Op::kPing, Dialect::kModern, {}, {}, 0x1234);
  send(bytes);
  if (read_u32() != 0x1234) throw std::runtime_error("bad PING echo");
}

void RawClient::expect_ping_echo(std::uint32_t nonce) {
  send(Op::kPing, Dialect::kModern, {}, {}, nonce);
  std::uint32_t echo = read_u32();
  if (echo != nonce) {
    throw std::runtime_error("expected PING echo " + std::to_string(nonce) + ", got " +
                             std::to_string(echo));
  }
}

}  // namespace ddprun::store::testing
