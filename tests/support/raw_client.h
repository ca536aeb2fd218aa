// raw_client.h: a byte-level TCPStore client on a blocking loopback socket, for server
// tests that must control exactly which bytes go out and check every byte that comes
// back (split requests, pipelining, CANCEL_WAIT races, garbage). Request bytes come from
// store_core's encode_request; replies are read with its decode_reply_value.
// Thread-safety: one instance per thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/core/protocol.h"
#include "store/core/reply.h"

namespace ddprun::store::testing {

using namespace std::chrono_literals;

// Builds a Request (fields as documented in protocol.h).
Request make_request(Op op, std::vector<std::string> keys = {},
                     std::vector<std::string> values = {}, std::int64_t number = 0);
// encode_request into a fresh string.
std::string encode(const Request& req, Dialect dialect);
std::string encode(Op op, Dialect dialect, std::vector<std::string> keys = {},
                   std::vector<std::string> values = {}, std::int64_t number = 0);

// Raises RLIMIT_NOFILE's soft limit to the hard limit; returns the new soft limit.
std::size_t raise_fd_limit();

class RawClient {
 public:
  // Connects to 127.0.0.1:port (TCP_NODELAY); throws std::runtime_error on failure.
  explicit RawClient(std::uint16_t port);
  ~RawClient();
  RawClient(RawClient&& other) noexcept;
  RawClient& operator=(RawClient&&) = delete;
  RawClient(const RawClient&) = delete;

  int fd() const { return fd_; }
  void send(std::string_view bytes);  // throws on error
  // Sends `bytes` one byte per send() call (with TCP_NODELAY: one segment each).
  void send_bytewise(std::string_view bytes);
  void send(Op op, Dialect dialect, std::vector<std::string> keys = {},
            std::vector<std::string> values = {}, std::int64_t number = 0);

  // Exactly `n` bytes, or nullopt on EOF, error or timeout.
  std::optional<std::string> read_exact(std::size_t n, std::chrono::milliseconds timeout = 20s);
  // One reply value (store_core's decoder); throws std::runtime_error on EOF, timeout
  // or a value the decoder rejects (fails the test). kBytes' content goes to `bytes`.
  std::int64_t read_value(ReplyValue kind, std::chrono::milliseconds timeout, std::string* bytes);
  // Typed reads of the same; throw std::runtime_error on EOF or timeout.
  std::uint8_t read_u8(std::chrono::milliseconds timeout = 20s);
  std::uint32_t read_u32();
  std::int64_t read_i64();
  std::string read_bytes();

  // True when the server closed the connection (EOF or reset) within `timeout`, with no
  // data before it.
  bool closed_by_server(std::chrono::milliseconds timeout = 20s);
  // True when nothing at all (no byte, no EOF) arrived within `timeout`.
  bool silent_for(std::chrono::milliseconds timeout);

  // Modern handshake as PyTorch 2.x sends it: VALIDATE + PING in one write, echo read.
  void handshake();
  // A PING round trip: proves no stray byte was queued before the echo.
  void expect_ping_echo(std::uint32_t nonce);

 private:
  int fd_ = -1;
};

}  // namespace ddprun::store::testing
