// ddprun-loadgen: a closed-loop load generator for c10d TCPStore servers (legacy 1.13
// and modern 2.2+ dialects) and Redis (RESP), so that ddprun-store, PyTorch's own
// TCPStore server and redis-server are driven by the same client code.
// Used by bench/run (see docs/benchmarks.md); `--self-test` is a quick codec check
// against a live server. Single-threaded: one epoll loop holds every connection.
// About 800 lines on purpose: a standalone tool kept in one file (RESP parsing, request
// mix, event loop, self-test, CLI), sharing only store_core's codec with ddprun.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/sys_error.h"
#include "store/core/host_port.h"
#include "store/core/protocol.h"
#include "store/core/reply.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace st = ddprun::store;

enum class Proto { kLegacy, kModern, kRedis };
enum class Mode { kOps, kBarrier, kSelfTest };
enum class OpKind { kSet, kGet, kAdd };

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// ---------------------------------------------------------------------------------------
// Requests and replies.

// What the next reply on a connection looks like. TCPStore replies carry no framing, so
// the client must know the shape from the request it sent (see tcpstore-protocol.md A.1).
enum class Reply : std::uint8_t { kU8, kU32, kI64, kBytes, kResp };

// One RESP reply (simple string, error, integer, bulk string or array of these).
std::size_t parse_resp(std::string_view in, std::int64_t& value) {
  if (in.empty()) return 0;
  auto eol = in.find("\r\n");
  if (eol == std::string_view::npos) {
    if (in.size() > 64 && in[0] != '+' && in[0] != '-') fail("redis: malformed reply");
    return 0;
  }
  std::string_view line = in.substr(1, eol - 1);
  auto to_int = [&](std::string_view s) {
    std::int64_t v = 0;
    bool neg = !s.empty() && s[0] == '-';
    if (neg) s.remove_prefix(1);
    if (s.empty()) fail("redis: empty integer in reply");
    for (char c : s) {
      if (c < '0' || c > '9') fail("redis: bad integer in reply: " + std::string(line));
      v = v * 10 + (c - '0');
    }
    return neg ? -v : v;
  };
  switch (in[0]) {
    case '+':
      value = 0;
      return eol + 2;
    case '-':
      fail("redis: error reply: " + std::string(line));
    case ':':
      value = to_int(line);
      return eol + 2;
    case '$': {
      std::int64_t len = to_int(line);
      value = len;
      if (len < 0) return eol + 2;  // nil
      std::size_t total = eol + 2 + static_cast<std::size_t>(len) + 2;
      return in.size() >= total ? total : 0;
    }
    case '*': {
      std::int64_t n = to_int(line);
      std::size_t pos = eol + 2;
      for (std::int64_t i = 0; i < n; ++i) {
        std::int64_t ignored = 0;
        std::size_t used = parse_resp(in.substr(pos), ignored);
        if (used == 0) return 0;
        pos += used;
      }
      value = n;
      return pos;
    }
    default:
      fail("redis: unexpected reply byte " + std::to_string(static_cast<unsigned char>(in[0])));
  }
}

// Parses one reply of `kind` from the front of `in`. Returns the bytes it spans, 0 if
// incomplete; `value` gets the integer (u8/u32/i64/RESP integer) or the bulk length.
// Throws on a reply that can never become valid (a RESP error or garbage).
std::size_t parse_reply(std::string_view in, Reply kind, std::int64_t& value) {
  st::ReplyValue shape = st::ReplyValue::kU8;
  switch (kind) {
    case Reply::kResp:
      return parse_resp(in, value);
    case Reply::kU8:
      shape = st::ReplyValue::kU8;
      break;
    case Reply::kU32:
      shape = st::ReplyValue::kU32;
      break;
    case Reply::kI64:
      shape = st::ReplyValue::kI64;
      break;
    case Reply::kBytes:
      shape = st::ReplyValue::kBytes;
      break;
  }
  const st::ReplyDecode r = st::decode_reply_value(in, shape, value, nullptr);
  if (r.status == st::ParseStatus::kBad) fail("store: " + r.error);
  return r.status == st::ParseStatus::kOk ? r.consumed : 0;
}

// A Request with only the fields `op` uses (see store/core/protocol.h).
st::Request request(st::Op op, std::vector<std::string> keys = {},
                    std::vector<std::string> values = {}, std::int64_t number = 0) {
  st::Request r;
  r.op = op;
  r.keys = std::move(keys);
  r.values = std::move(values);
  r.number = number;
  return r;
}

// Builds request bytes for one protocol. TCPStore bytes come from the project's own
// encoder (store/core/protocol.h); Redis commands are RESP arrays of bulk strings.
class Requests {
 public:
  explicit Requests(Proto p) : proto_(p) {}
  Proto proto() const { return proto_; }
  bool is_redis() const { return proto_ == Proto::kRedis; }

  // First bytes on a fresh connection and the reply that proves the server serves it:
  // modern = VALIDATE + PING (echo), legacy = CHECK of no keys (READY), Redis = PING.
  void handshake(std::uint32_t nonce, std::string& out) const {
    if (proto_ == Proto::kModern) {
      store(request(st::Op::kValidate), out);
      st::Request ping = request(st::Op::kPing);
      ping.nonce = nonce;
      store(ping, out);
    } else if (proto_ == Proto::kLegacy) {
      store(request(st::Op::kCheck), out);
    } else {
      resp({"PING"}, out);
    }
  }
  Reply handshake_reply() const {
    return proto_ == Proto::kModern   ? Reply::kU32
           : proto_ == Proto::kLegacy ? Reply::kU8
                                      : Reply::kResp;
  }

  // An acknowledged write. TCPStore's SET has no reply, so CHECK(key) rides in the same
  // write and its READY proves the SET was applied (replies are in order); Redis: SET.
  void set(const std::string& key, const std::string& value, std::string& out) const {
    if (is_redis()) return resp({"SET", key, value}, out);
    store_set(key, value, out);
    store(request(st::Op::kCheck, {key}), out);
  }
  // A SET without reply (TCPStore only), e.g. the barrier's "done" key.
  void store_set(const std::string& key, const std::string& value, std::string& out) const {
    store(request(st::Op::kSet, {key}, {value}), out);
  }
  void wait(const std::string& key, std::string& out) const {
    store(request(st::Op::kWait, {key}), out);
  }
  void get(const std::string& key, std::string& out) const {
    if (is_redis()) return resp({"GET", key}, out);
    store(request(st::Op::kGet, {key}), out);
  }
  void add(const std::string& key, std::int64_t delta, std::string& out) const {
    if (is_redis()) return resp({"INCRBY", key, std::to_string(delta)}, out);
    store(request(st::Op::kAdd, {key}, {}, delta), out);
  }
  Reply reply(Reply store_kind) const { return is_redis() ? Reply::kResp : store_kind; }

  static void resp(const std::vector<std::string>& args, std::string& out) {
    out += '*' + std::to_string(args.size()) + "\r\n";
    for (const auto& a : args) {
      out += '$' + std::to_string(a.size()) + "\r\n";
      out += a;
      out += "\r\n";
    }
  }

 private:
  void store(const st::Request& r, std::string& out) const {
    st::encode_request(r, proto_ == Proto::kModern ? st::Dialect::kModern : st::Dialect::kLegacy,
                       out);
  }
  Proto proto_;
};

// ---------------------------------------------------------------------------------------
// Connections and the event loop.

struct Conn {
  int fd = -1;
  int step = 0;            // position inside the current operation (see on_reply)
  bool connected = false;  // TCP connect finished
  bool ready = false;      // handshake answered
  Reply expect = Reply::kU8;
  std::string out;  // bytes not yet written
  std::size_t out_off = 0;
  std::string in;  // bytes not yet parsed
  Clock::time_point started;
  std::string key;
};

struct Options {
  Mode mode = Mode::kOps;
  Proto proto = Proto::kModern;
  OpKind op = OpKind::kAdd;
  std::string host = "127.0.0.1";
  int port = 0;
  int conns = 1;
  double seconds = 2.0;
  double warmup = 0.3;
  double timeout = 60.0;
  std::size_t value_size = 64;
  std::string prefix;
  int storms = 1;      // barrier mode: storms in a row
  int source_ips = 0;  // 0: the kernel picks the source; N: 127.0.0.2 .. 127.0.0.(N+1)
};

class Loop {
 public:
  explicit Loop(const Options& o)
      : opt_(o), req_(o.proto), conns_(static_cast<std::size_t>(o.conns)) {
    ep_ = epoll_create1(EPOLL_CLOEXEC);
    if (ep_ < 0) ddprun::throw_errno("epoll_create1");
    std::memset(&addr_, 0, sizeof addr_);
    addr_.sin_family = AF_INET;
    addr_.sin_port = htons(static_cast<std::uint16_t>(o.port));
    if (inet_pton(AF_INET, o.host.c_str(), &addr_.sin_addr) != 1) {
      fail("--addr: '" + o.host + "' is not an IPv4 address");
    }
    for (std::size_t i = 0; i < conns_.size(); ++i) {
      conns_[i].key = o.prefix + "/k" + std::to_string(i);
    }
    value_.assign(o.value_size, 'v');
  }
  ~Loop() {
    for (auto& c : conns_) {
      if (c.fd >= 0) close(c.fd);
    }
    close(ep_);
  }

  // Opens every connection at once (non-blocking connects) and completes each handshake.
  // Returns the time from the first connect() to the last handshake reply, or nullopt
  // (with `status_` set) when the deadline passes first.
  std::optional<double> connect_all(Clock::time_point deadline) {
    auto t0 = Clock::now();
    for (std::size_t i = 0; i < conns_.size(); ++i) {
      Conn& c = conns_[i];
      c.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (c.fd < 0) ddprun::throw_errno("socket (connection " + std::to_string(i) + ")");
      int one = 1;
      setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      if (opt_.source_ips > 0) bind_source(c.fd, i);
      if (connect(c.fd, reinterpret_cast<sockaddr*>(&addr_), sizeof addr_) == 0) {
        c.connected = true;
      } else if (errno != EINPROGRESS) {
        ddprun::throw_errno("connect to " + st::format_host_port(opt_.host, opt_.port));
      }
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLOUT;
      ev.data.u64 = i;
      if (epoll_ctl(ep_, EPOLL_CTL_ADD, c.fd, &ev) != 0) ddprun::throw_errno("epoll_ctl");
      if (c.connected) start_handshake(i);
    }
    phase_ = Phase::kHandshake;
    if (!run_until([&] { return ready_ == conns_.size(); }, deadline)) {
      status_ =
          "timeout: " + std::to_string(ready_) + "/" + std::to_string(conns_.size()) + " connected";
      return std::nullopt;
    }
    return seconds_between(t0, Clock::now());
  }

  // Closed loop: every connection keeps one operation in flight for warmup + seconds;
  // ops completed after the warmup are counted and their latencies kept.
  void run_ops() {
    if (opt_.op == OpKind::kGet) {  // the keys must exist first
      phase_ = Phase::kPrefill;
      pending_ = conns_.size();
      for (std::size_t i = 0; i < conns_.size(); ++i) begin_op(i, OpKind::kSet);
      if (!run_until([&] { return pending_ == 0; }, Clock::now() + std::chrono::seconds(60))) {
        fail("prefill of the keys timed out");
      }
    }
    phase_ = Phase::kOps;
    auto start = Clock::now();
    measure_from_ = start + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(opt_.warmup));
    stop_at_ = measure_from_ + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(opt_.seconds));
    latencies_ns_.reserve(1 << 20);
    for (std::size_t i = 0; i < conns_.size(); ++i) begin_op(i, opt_.op);
    run_until([] { return false; }, stop_at_);
  }

  // Barrier storm: every connection ADDs 1 to a counter and WAITs for the key that the
  // connection whose ADD returned N sets. Returns seconds from the first ADD to the last
  // release, or nullopt with `status_` set.
  std::optional<double> run_barrier(Clock::time_point deadline) {
    phase_ = Phase::kBarrier;
    count_key_ = opt_.prefix + "/count";
    done_key_ = opt_.prefix + "/done";
    auto t0 = Clock::now();
    for (std::size_t i = 0; i < conns_.size(); ++i) {
      Conn& c = conns_[i];
      c.step = 0;
      c.expect = req_.reply(Reply::kI64);
      if (req_.is_redis()) {
        Requests::resp({"INCR", count_key_}, c.out);
      } else {
        req_.add(count_key_, 1, c.out);
      }
      flush(i);
    }
    if (!run_until([&] { return released_ == conns_.size(); }, deadline)) {
      status_ = "timeout: " + std::to_string(released_) + "/" + std::to_string(conns_.size()) +
                " released";
      return std::nullopt;
    }
    return seconds_between(t0, Clock::now());
  }

  const std::string& status() const { return status_; }
  std::vector<std::int64_t>& latencies() { return latencies_ns_; }
  double measured_seconds() const { return opt_.seconds; }
  // Every op completed in run_ops(), warm-up included (to relate to server CPU time).
  std::size_t completed_ops() const { return completed_; }

 private:
  enum class Phase { kHandshake, kPrefill, kOps, kBarrier };

  void start_handshake(std::size_t i) {
    Conn& c = conns_[i];
    req_.handshake(static_cast<std::uint32_t>(i + 1), c.out);
    c.expect = req_.handshake_reply();
    flush(i);
  }

  void begin_op(std::size_t i, OpKind op) {
    Conn& c = conns_[i];
    c.step = 0;
    c.started = Clock::now();
    switch (op) {
      case OpKind::kSet:
        req_.set(c.key, value_, c.out);
        c.expect = req_.reply(Reply::kU8);
        break;
      case OpKind::kGet:  // PyTorch's get() is WAIT, then GET once WAIT answers
        if (req_.is_redis()) {
          req_.get(c.key, c.out);
          c.expect = Reply::kResp;
        } else {
          req_.wait(c.key, c.out);
          c.expect = Reply::kU8;
        }
        break;
      case OpKind::kAdd:
        req_.add(c.key, 1, c.out);
        c.expect = req_.reply(Reply::kI64);
        break;
    }
    flush(i);
  }

  // One reply arrived on connection i; decides what to send next.
  void on_reply(std::size_t i, std::int64_t value) {
    Conn& c = conns_[i];
    if (!c.ready) {
      if (opt_.proto == Proto::kModern && value != static_cast<std::int64_t>(i + 1)) {
        fail("store: PING echo " + std::to_string(value) + " != nonce " + std::to_string(i + 1));
      }
      c.ready = true;
      ++ready_;
      return;
    }
    switch (phase_) {
      case Phase::kHandshake:
        fail("reply before any request");
      case Phase::kPrefill:
        --pending_;
        return;
      case Phase::kOps:
        if (opt_.op == OpKind::kGet && !req_.is_redis() && c.step == 0) {
          if (value != st::kStopWaiting) fail("store: WAIT answered " + std::to_string(value));
          c.step = 1;
          req_.get(c.key, c.out);
          c.expect = Reply::kBytes;
          flush(i);
          return;
        }
        if (opt_.op == OpKind::kGet && value != static_cast<std::int64_t>(opt_.value_size)) {
          fail("get returned " + std::to_string(value) + " bytes, expected " +
               std::to_string(opt_.value_size));
        }
        {
          auto now = Clock::now();
          ++completed_;
          if (now >= measure_from_ && now < stop_at_) {
            latencies_ns_.push_back((now - c.started).count());
          }
          if (now < stop_at_) begin_op(i, opt_.op);
        }
        return;
      case Phase::kBarrier:
        if (c.step == 0) {  // ADD answered with the count
          c.step = 1;
          bool last = value == static_cast<std::int64_t>(conns_.size());
          if (req_.is_redis()) {
            if (last) {  // one token per member; each BLPOP takes one
              std::vector<std::string> push{"RPUSH", done_key_};
              push.resize(2 + conns_.size(), "1");
              Requests::resp(push, c.out);
              c.step = 2;  // RPUSH's reply comes first
            }
            Requests::resp({"BLPOP", done_key_, "0"}, c.out);
            c.expect = Reply::kResp;
          } else {
            if (last) req_.store_set(done_key_, "1", c.out);
            req_.wait(done_key_, c.out);
            c.expect = Reply::kU8;
          }
          flush(i);
        } else if (c.step == 2) {
          c.step = 1;
        } else {
          ++released_;
        }
        return;
    }
  }

  void flush(std::size_t i) {
    Conn& c = conns_[i];
    if (!c.connected) return;  // sent once the connect completes
    while (c.out_off < c.out.size()) {
      ssize_t n = send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;  // EPOLLOUT resumes
        if (errno == EINTR) continue;
        ddprun::throw_errno("send on connection " + std::to_string(i));
      }
      c.out_off += static_cast<std::size_t>(n);
    }
    c.out.clear();
    c.out_off = 0;
  }

  void on_readable(std::size_t i) {
    Conn& c = conns_[i];
    char buf[16384];
    for (;;) {
      ssize_t n = recv(c.fd, buf, sizeof buf, 0);
      if (n > 0) {
        c.in.append(buf, static_cast<std::size_t>(n));
        if (static_cast<std::size_t>(n) < sizeof buf) break;
        continue;
      }
      if (n == 0) fail("server closed connection " + std::to_string(i));
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      ddprun::throw_errno("recv on connection " + std::to_string(i));
    }
    std::size_t off = 0;
    for (;;) {
      std::int64_t value = 0;
      std::size_t used = parse_reply(std::string_view(c.in).substr(off), c.expect, value);
      if (used == 0) break;
      off += used;
      on_reply(i, value);
    }
    c.in.erase(0, off);
  }

  template <class Pred>
  bool run_until(Pred done, Clock::time_point deadline) {
    std::vector<epoll_event> events(1024);
    while (!done()) {
      auto now = Clock::now();
      if (now >= deadline) return false;
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
      int n = epoll_wait(ep_, events.data(), static_cast<int>(events.size()),
                         static_cast<int>(std::min<std::int64_t>(ms + 1, 100)));
      if (n < 0) {
        if (errno == EINTR) continue;
        ddprun::throw_errno("epoll_wait");
      }
      for (int k = 0; k < n; ++k) {
        std::size_t i = events[static_cast<std::size_t>(k)].data.u64;
        std::uint32_t ev = events[static_cast<std::size_t>(k)].events;
        Conn& c = conns_[i];
        if (!c.connected && (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
          int err = 0;
          socklen_t len = sizeof err;
          getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
          if (err != 0) {
            errno = err;
            ddprun::throw_errno("connect to " + st::format_host_port(opt_.host, opt_.port));
          }
          c.connected = true;
          start_handshake(i);
        }
        if (ev & EPOLLIN) on_readable(i);
        if (ev & (EPOLLERR | EPOLLHUP)) fail("connection " + std::to_string(i) + " reset");
        if (ev & EPOLLOUT) flush(i);
        // Watch EPOLLOUT only while bytes are queued: level-triggered writability of an
        // idle socket would otherwise spin the loop.
        bool want_out = !c.out.empty();
        if (want_out != out_watched_[i]) set_out(i, want_out);
      }
    }
    return true;
  }

  // Connection i leaves from 127.0.0.(2 + i % source_ips), port left to connect(): with
  // thousands of connections from one address, connect() spends most of its time searching
  // for a free ephemeral port (__inet_hash_connect), a cost of the one-host load generator
  // that real clients, spread over hosts, do not have.
  void bind_source(int fd, std::size_t i) {
    int one = 1;
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    sockaddr_in src{};
    src.sin_family = AF_INET;
    const auto host = static_cast<std::uint32_t>(2 + i % static_cast<std::size_t>(opt_.source_ips));
    src.sin_addr.s_addr = htonl((127U << 24) | host);
    if (bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0) {
      ddprun::throw_errno("bind to source 127.0.0." + std::to_string(host));
    }
  }

  void set_out(std::size_t i, bool on) {
    epoll_event ev{};
    ev.events = EPOLLIN | (on ? EPOLLOUT : 0u);
    ev.data.u64 = i;
    epoll_ctl(ep_, EPOLL_CTL_MOD, conns_[i].fd, &ev);
    out_watched_[i] = on;
  }

  const Options& opt_;
  Requests req_;
  std::vector<Conn> conns_;
  std::vector<bool> out_watched_ = std::vector<bool>(static_cast<std::size_t>(opt_.conns), true);
  sockaddr_in addr_{};
  int ep_ = -1;
  Phase phase_ = Phase::kHandshake;
  std::size_t ready_ = 0, pending_ = 0, released_ = 0, completed_ = 0;
  std::string value_, count_key_, done_key_, status_ = "ok";
  Clock::time_point measure_from_, stop_at_;
  std::vector<std::int64_t> latencies_ns_;
};

}  // namespace

namespace {

// ---------------------------------------------------------------------------------------
// --self-test: one blocking connection, a scripted conversation, every reply checked.

class BlockingConn {
 public:
  explicit BlockingConn(const Options& o) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) ddprun::throw_errno("socket");
    timeval tv{5, 0};  // a silent server fails the self-test instead of hanging it
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(o.port));
    if (inet_pton(AF_INET, o.host.c_str(), &a.sin_addr) != 1) {
      fail("--addr: '" + o.host + "' is not an IPv4 address");
    }
    if (connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ddprun::throw_errno("connect to " + st::format_host_port(o.host, o.port));
    }
  }
  ~BlockingConn() { close(fd_); }
  BlockingConn(const BlockingConn&) = delete;
  BlockingConn& operator=(const BlockingConn&) = delete;

  void send_all(const std::string& bytes) {
    std::size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) ddprun::throw_errno("send");
      off += static_cast<std::size_t>(n);
    }
  }
  // Reads one reply; returns its raw bytes and sets `value` (see parse_reply).
  std::string read(Reply kind, std::int64_t& value) {
    for (;;) {
      std::size_t used = parse_reply(in_, kind, value);
      if (used > 0) {
        std::string r = in_.substr(0, used);
        in_.erase(0, used);
        return r;
      }
      char buf[4096];
      ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n == 0) fail("server closed the connection");
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) fail("no reply within 5 s");
      if (n < 0) ddprun::throw_errno("recv");
      in_.append(buf, static_cast<std::size_t>(n));
    }
  }
  std::int64_t request(const std::string& bytes, Reply kind, std::string* raw = nullptr) {
    send_all(bytes);
    std::int64_t v = 0;
    std::string r = read(kind, v);
    if (raw) *raw = std::move(r);
    return v;
  }

 private:
  int fd_ = -1;
  std::string in_;
};

int self_test(const Options& o) {
  Requests rq(o.proto);
  BlockingConn c(o);
  int checks = 0;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) fail("self-test: " + what);
    ++checks;
  };
  const std::string k = o.prefix + "/selftest", ctr = o.prefix + "/selftest-ctr";
  // Binary-safe: the NUL and 0xff bytes are part of the value (a plain literal would stop
  // at the NUL).
  const std::string val = std::string("value\x00\xff", 7) + std::string(300, 'x');
  std::string b, raw;
  std::int64_t v = 0;

  rq.handshake(0x1234abcd, b);
  v = c.request(b, rq.handshake_reply());
  if (o.proto == Proto::kModern) expect(v == 0x1234abcd, "PING echo differs from nonce");
  if (o.proto == Proto::kLegacy) expect(v == st::kCheckReady, "CHECK of no keys is not READY");
  if (o.proto == Proto::kRedis) expect(v == 0, "PING not answered with a status");

  b.clear();
  rq.set(k, val, b);
  v = c.request(b, rq.reply(Reply::kU8));
  expect(v == 0, "acknowledged SET failed");
  if (!rq.is_redis()) {
    b.clear();
    st::encode_request(request(st::Op::kCheck, {k, k + "-missing"}),
                       o.proto == Proto::kModern ? st::Dialect::kModern : st::Dialect::kLegacy, b);
    expect(c.request(b, Reply::kU8) == st::kCheckNotReady, "CHECK of a missing key is READY");
    b.clear();
    rq.wait(k, b);
    expect(c.request(b, Reply::kU8) == st::kStopWaiting, "WAIT of an existing key");
  }
  b.clear();
  rq.get(k, b);
  c.request(b, rq.reply(Reply::kBytes), &raw);
  std::string got = rq.is_redis() ? raw.substr(raw.find("\r\n") + 2, val.size()) : raw.substr(8);
  expect(got == val, "GET returned other bytes than were SET");

  b.clear();
  rq.add(ctr, 5, b);
  expect(c.request(b, rq.reply(Reply::kI64)) == 5, "ADD 5 to a new key is not 5");
  b.clear();
  rq.add(ctr, -2, b);
  expect(c.request(b, rq.reply(Reply::kI64)) == 3, "ADD -2 to 5 is not 3");

  if (!rq.is_redis()) {
    auto d = o.proto == Proto::kModern ? st::Dialect::kModern : st::Dialect::kLegacy;
    b.clear();
    st::encode_request(request(st::Op::kGetNumKeys), d, b);
    expect(c.request(b, Reply::kI64) >= 2, "GETNUMKEYS counts fewer than the 2 keys set");
    b.clear();
    st::encode_request(request(st::Op::kDeleteKey, {k}), d, b);
    expect(c.request(b, Reply::kI64) == 1, "DELETE_KEY of an existing key is not 1");
    b.clear();
    st::encode_request(request(st::Op::kDeleteKey, {k}), d, b);
    expect(c.request(b, Reply::kI64) == 0, "DELETE_KEY of a deleted key is not 0");
    if (o.proto == Proto::kModern) {
      b.clear();
      st::Request ping = request(st::Op::kPing);
      ping.nonce = 0xfeedf00d;
      st::encode_request(ping, d, b);
      expect(c.request(b, Reply::kU32) == 0xfeedf00d, "second PING echo differs");
    }
  }
  std::printf("self-test ok: %d checks against %s\n", checks,
              st::format_host_port(o.host, o.port).c_str());
  return 0;
}

// ---------------------------------------------------------------------------------------

void raise_fd_limit(std::size_t needed) {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (needed + 16 > rl.rlim_cur) {
    fail(std::to_string(needed) + " connections need more file descriptors than the hard " +
         "limit RLIMIT_NOFILE=" + std::to_string(rl.rlim_cur) + " allows");
  }
}

const char* proto_name(Proto p) {
  return p == Proto::kLegacy ? "legacy" : p == Proto::kModern ? "modern" : "redis";
}

std::string json_num(std::optional<double> v) {
  if (!v) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6f", *v);
  return buf;
}

int run(const Options& o) {
  if (o.mode == Mode::kSelfTest) return self_test(o);
  raise_fd_limit(static_cast<std::size_t>(o.conns));
  if (o.mode == Mode::kBarrier) {
    int failed = 0;
    // Storm after storm on one server, each with fresh connections and keys; the last
    // storm's connections close (as exiting workers') before the next one connects.
    for (int storm = 1; storm <= o.storms; ++storm) {
      Options once = o;
      if (o.storms > 1) once.prefix += "/storm" + std::to_string(storm);
      Loop loop(once);
      auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(o.timeout));
      auto connect_s = loop.connect_all(deadline);
      std::optional<double> barrier_s;
      // The barrier gets its own --timeout window: a slow connect storm is reported as such.
      if (connect_s) {
        barrier_s = loop.run_barrier(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                        std::chrono::duration<double>(o.timeout)));
      }
      std::printf(
          "{\"mode\":\"barrier\",\"proto\":\"%s\",\"clients\":%d,\"storm\":%d,"
          "\"connect_s\":%s,\"barrier_s\":%s,\"total_s\":%s,\"status\":\"%s\"}\n",
          proto_name(o.proto), o.conns, storm, json_num(connect_s).c_str(),
          json_num(barrier_s).c_str(),
          json_num(barrier_s ? std::optional<double>(*connect_s + *barrier_s) : std::nullopt)
              .c_str(),
          loop.status().c_str());
      std::fflush(stdout);
      if (!barrier_s) ++failed;
    }
    return failed == 0 ? 0 : 2;
  }
  Loop loop(o);
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(o.timeout));
  auto connect_s = loop.connect_all(deadline);
  if (!connect_s) fail(loop.status());
  loop.run_ops();
  auto& lat = loop.latencies();
  if (lat.empty()) fail("no operation completed within --seconds");
  auto pct = [&](double q) -> double {
    if (lat.empty()) return 0;
    auto idx = static_cast<std::size_t>(q * static_cast<double>(lat.size() - 1));
    std::nth_element(lat.begin(), lat.begin() + static_cast<std::ptrdiff_t>(idx), lat.end());
    return static_cast<double>(lat[idx]) / 1000.0;
  };
  const char* ops[] = {"set", "get", "add"};
  double p50 = pct(0.50), p99 = pct(0.99);
  std::printf(
      "{\"mode\":\"ops\",\"proto\":\"%s\",\"op\":\"%s\",\"conns\":%d,\"value_size\":%zu,"
      "\"ops\":%zu,\"total_ops\":%zu,\"seconds\":%.3f,\"ops_per_s\":%.1f,\"p50_us\":%.1f,"
      "\"p99_us\":%.1f,\"connect_s\":%s}\n",
      proto_name(o.proto), ops[static_cast<int>(o.op)], o.conns, o.value_size, lat.size(),
      loop.completed_ops(), loop.measured_seconds(),
      static_cast<double>(lat.size()) / loop.measured_seconds(), p50, p99,
      json_num(connect_s).c_str());
  return 0;
}

}  // namespace

// Only building the CLI11 app, before any work, can throw (allocation); terminating then
// is right.
// NOLINTNEXTLINE(bugprone-exception-escape)
int main(int argc, char** argv) {
  CLI::App app{
      "ddprun-loadgen: closed-loop load for c10d TCPStore servers (legacy/modern dialect) "
      "and Redis; prints one JSON line"};
  Options o;
  std::string addr;
  bool self = false;
  app.add_option("--addr", addr, "server as IPv4:PORT")->required();
  app.add_option("--proto", o.proto, "legacy (PyTorch 1.13/2.0), modern (2.2+) or redis")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, Proto>{
              {"legacy", Proto::kLegacy}, {"modern", Proto::kModern}, {"redis", Proto::kRedis}},
          CLI::ignore_case));
  app.add_option("--mode", o.mode,
                 "ops (closed-loop throughput) or barrier (connect storm + "
                 "barrier storm)")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, Mode>{{"ops", Mode::kOps}, {"barrier", Mode::kBarrier}},
          CLI::ignore_case));
  app.add_option("--op", o.op, "ops mode: set (acknowledged), get (WAIT+GET) or add")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, OpKind>{
              {"set", OpKind::kSet}, {"get", OpKind::kGet}, {"add", OpKind::kAdd}},
          CLI::ignore_case));
  app.add_option("--conns", o.conns, "connections (clients)")->check(CLI::Range(1, 1000000));
  app.add_option("--seconds", o.seconds, "measured duration (ops mode)")
      ->check(CLI::Range(0.01, 3600.0));
  app.add_option("--warmup", o.warmup, "unmeasured lead-in (ops mode)")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--timeout", o.timeout, "bound for connecting, and again for the barrier")
      ->check(CLI::Range(0.01, 36000.0));
  app.add_option("--value-size", o.value_size, "bytes per value")->check(CLI::Range(0, 1 << 24));
  app.add_option("--storms", o.storms, "barrier mode: storms in a row, one JSON line each")
      ->check(CLI::Range(1, 1000));
  app.add_option("--source-ips", o.source_ips,
                 "spread the connections over source addresses 127.0.0.2 .. 127.0.0.(N+1) "
                 "(a loopback server; saves connect()'s ephemeral-port search in storms)")
      ->check(CLI::Range(0, 254));
  app.add_option("--key-prefix", o.prefix, "key prefix (default: unique per run)");
  app.add_flag("--self-test", self, "check the codec against the server at --addr and exit");
  CLI11_PARSE(app, argc, argv);
  if (self) o.mode = Mode::kSelfTest;

  try {
    std::string_view port;
    if (!st::split_host_port(addr, o.host, port).empty() || port.empty()) {
      fail("--addr: expected IPv4:PORT, got '" + addr + "'");
    }
    const auto number = st::parse_port(port);
    if (!number || *number == 0) {
      fail("--addr: port '" + std::string(port) + "' is not in 1..65535");
    }
    o.port = *number;
    if (o.prefix.empty()) {
      o.prefix = "/bench/" + std::to_string(getpid()) + "-" +
                 std::to_string(Clock::now().time_since_epoch().count());
    }
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddprun-loadgen: error: %s\n", e.what());
    return 1;
  }
}
