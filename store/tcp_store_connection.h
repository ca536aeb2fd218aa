// tcp_store_connection.h: TcpStore::Connection, TcpStore's socket to a TCPStore server:
// one connection attempt (resolve, connect each address in turn, VALIDATE + PING
// handshake), sends and buffered reply reads under a deadline (poll() on a non-blocking
// socket; replies decoded by store_core's decode_reply_value), and the failures that
// close it for good. Internal to TcpStore (tcp_store_client.cpp), which owns one.
// Thread-safety: none; every method REQUIRES the owning TcpStore's mutex.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "base/unique_fd.h"
#include "store/core/protocol.h"
#include "store/core/reply.h"
#include "store/tcp_store_client.h"

struct addrinfo;

namespace ddprun::store {

namespace tcp_client {

using Clock = std::chrono::steady_clock;
using Deadline = std::optional<Clock::time_point>;  // nullopt = forever

// now + d; forever for Store::kNoTimeout.
Deadline deadline_after(Store::Duration d);

// One failed connection attempt that is worth retrying (refused, timed out, reset,
// name resolution); carries the reason for the final error message.
struct AttemptFailed : std::runtime_error {
  explicit AttemptFailed(const std::string& what, int error = 0)
      : std::runtime_error(what), err(error) {}
  int err;  // the connect's errno (ECONNREFUSED: nothing listens), else 0
};

}  // namespace tcp_client

class TcpStore::Connection {
 public:
  using Deadline = tcp_client::Deadline;

  // `silent_peer_timeout`: TcpStoreOptions's (base/silent_peer.h), applied on connect.
  Connection(std::string addr, std::chrono::milliseconds silent_peer_timeout)
      : addr_(std::move(addr)), silent_peer_timeout_(silent_peer_timeout) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // One attempt: resolve, connect to each address in turn, handshake. Throws
  // tcp_client::AttemptFailed (worth retrying) or StoreProtocolError (not a TCPStore).
  // `cancel` (TcpStoreOptions::cancel): the attempt's connect and handshake waits give up
  // within 20 ms once it is true (AttemptFailed), instead of waiting out `deadline`.
  void connect_once(const std::string& host, std::uint16_t port, Deadline deadline,
                    const std::atomic<bool>* cancel = nullptr);

  // Sends all of `bytes`; throws StoreConnectionError / StoreTimeoutError (the
  // connection is then closed).
  void send(std::string_view bytes, Deadline deadline);
  // Encodes `req` (modern dialect) into a reused buffer and sends it.
  void send(const Request& req, Deadline deadline);

  // Blocks until a reply byte is buffered or readable; false when `deadline` passes.
  bool wait_readable(Deadline deadline);

  // The next reply value; a malformed one closes the connection (StoreConnectionError).
  std::uint8_t read_u8(Deadline deadline);
  std::uint32_t read_u32(Deadline deadline);
  std::int64_t read_i64(Deadline deadline);
  std::string read_bytes(Deadline deadline);

  // Closes the connection for good and throws StoreConnectionError with `reason`
  // (StoreProtocolError, StoreTimeoutError "timed out <what>" for the others).
  template <typename E>
  [[noreturn]] void give_up(std::string broken, const std::string& detail);
  [[noreturn]] void fail(const std::string& reason);
  [[noreturn]] void fail_closed(int err);  // StoreClosedError (closed_message)
  [[noreturn]] void fail_protocol(const std::string& reason);
  [[noreturn]] void fail_timeout(const std::string& what);
  // Closes for good; throws StoreSilentError (the kernel gave the silent peer up).
  [[noreturn]] void fail_silent();

  // The reusable request, cleared, for `op` (and its one key).
  Request& request(Op op);
  Request& request(Op op, std::string_view key);

 private:
  int connect_addr(const addrinfo* ai, Deadline deadline);  // 0 (fd_ set) or an errno
  void handshake(Deadline deadline);
  void check_open();
  bool poll_fd(short events, Deadline deadline);  // false when the deadline passed
  std::int64_t read_value(ReplyValue kind, Deadline deadline, std::string* bytes);
  void fill(std::size_t n, Deadline deadline);
  std::string closed_message(int err) const;
  void awaiting(const Request& req);  // notes the request whose reply comes next
  void close_fd();

  UniqueFd fd_;
  const std::atomic<bool>* cancel_ = nullptr;  // during connect_once only
  std::string addr_;
  std::chrono::milliseconds silent_peer_timeout_;
  std::string broken_;           // why the connection was given up
  bool closed_by_peer_ = false;  // ... by fail_closed: later uses throw StoreClosedError too
  // The request whose reply is awaited (awaiting()), for error messages.
  std::string awaiting_ = "the handshake";
  Op awaiting_op_ = Op::kValidate;
  std::string rbuf_;  // reply bytes [rpos_, rlen_) not yet taken
  std::size_t rpos_ = 0;
  std::size_t rlen_ = 0;
  std::string wbuf_;
  Request req_;
};

}  // namespace ddprun::store
