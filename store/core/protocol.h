// protocol.h: the c10d TCPStore request codec for both dialects, without any I/O.
// Legacy = PyTorch 1.13/2.0 (no handshake, SET=0 ... DELETE_KEY=8, plus 2.0's 9..12);
// modern = PyTorch 2.2+ (VALIDATE=0 with magic first, SET=1 ... BARRIER=18).
// The byte grammar of both dialects opens protocol.cpp; docs/protocol.md has the tables.
// Used by the server's sessions (tcp_store_server.cpp), the fuzzer and the tests.
// Thread-safety: pure functions over caller-owned buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::store {

enum class Dialect : std::uint8_t { kLegacy, kModern };

inline constexpr std::uint32_t kValidationMagic = 0x3C85F7CE;

// Dialect-independent operation. Wire numbers live in protocol.cpp, per dialect.
enum class Op : std::uint8_t {
  kValidate,
  kSet,
  kCompareSet,
  kGet,
  kAdd,
  kCheck,
  kWait,
  kGetNumKeys,
  kWatchKey,
  kDeleteKey,
  kAppend,
  kMultiGet,
  kMultiSet,
  kCancelWait,
  kPing,
  kQueuePush,
  kQueuePop,
  kQueueLen,
  kListKeys,
  kBarrier,
};
const char* op_name(Op op);

// Size caps. Defaults are PyTorch's libuv server limits plus a cap on one whole request
// so that a connection can never make the server buffer without bound.
struct Limits {
  std::size_t max_key_bytes = 8 * 1024;
  std::size_t max_value_bytes = 8 * 1024 * 1024;
  std::size_t max_keys_per_request = 131072;
  std::size_t max_request_bytes = 64 * 1024 * 1024;
};

// One decoded request. Which fields are meaningful depends on `op`:
//   kSet, kAppend, kQueuePush : keys[0], values[0]
//   kCompareSet               : keys[0], values[0] = expected, values[1] = desired
//   kGet, kDeleteKey, kWatchKey, kQueuePop, kQueueLen : keys[0]
//   kAdd                      : keys[0], number = delta
//   kBarrier                  : keys[0], number = world size
//   kCheck, kWait, kMultiGet  : keys
//   kMultiSet                 : keys, values (same count)
//   kPing                     : nonce
//   kValidate                 : nonce = magic as received (already checked)
//   kGetNumKeys, kCancelWait, kListKeys : nothing
struct Request {
  Op op = Op::kGetNumKeys;
  std::vector<std::string> keys;
  std::vector<std::string> values;
  std::int64_t number = 0;
  std::uint32_t nonce = 0;
  bool operator==(const Request&) const = default;
};

enum class ParseStatus : std::uint8_t { kNeedMore, kOk, kBad };
struct ParseResult {
  ParseStatus status = ParseStatus::kNeedMore;
  std::size_t consumed = 0;  // bytes of `buf` that made up the request (kOk only)
  std::string error;         // one line naming what is wrong (kBad only)
  // kNeedMore only: a lower bound on the buffer size at which parsing can make progress
  // (e.g. the end of a long value whose length is known). Re-parsing before the buffer
  // reaches it is harmless but pointless. No caller reads it today (the client reads
  // decode_reply_value's own `needed`).
  std::size_t needed = 0;
};

// Tries to decode one request from the front of `buf`. Never throws on input and never
// allocates a length it has not checked against `limits`. On kOk, `out` holds the
// request and `consumed` its size; on kNeedMore nothing is consumed.
ParseResult parse_request(std::string_view buf, Dialect dialect, const Limits& limits,
                          Request& out);

// Decides a connection's dialect from its first bytes: `00 ce f7 85 3c` is modern; a
// start other than `00` is legacy; `00` and four bytes that are not the magic are a
// legacy SET if they can begin its key length (at most limits.max_key_bytes), and
// otherwise kBad, a VALIDATE with a wrong magic (`error` says so in one line).
// kNeedMore while fewer than five bytes start with `00`.
enum class DetectResult : std::uint8_t { kNeedMore, kLegacy, kModern, kBad };
DetectResult detect_dialect(std::string_view first_bytes, const Limits& limits, std::string& error);

// Whether `dialect` has a command byte for `op` (legacy lacks VALIDATE, PING, the queues,
// LIST_KEYS and BARRIER; modern lacks WATCH_KEY).
bool op_in_dialect(Op op, Dialect dialect);

// Encodes `req` as a client of `dialect` would send it (used by the C++ client, the
// load generator and the tests). kValidate writes the magic; kPing writes `nonce`.
// REQUIRES op_in_dialect(req.op, dialect); otherwise nothing is appended.
// The output parses back to `req` (fields the op does not use are ignored).
void encode_request(const Request& req, Dialect dialect, std::string& out);

// Reply values shared by both dialects.
inline constexpr std::uint8_t kCheckReady = 0, kCheckNotReady = 1;
inline constexpr std::uint8_t kStopWaiting = 0, kWaitCanceled = 1;
inline constexpr std::uint8_t kWatchKeyUpdated = 0, kWatchKeyCreated = 1, kWatchKeyDeleted = 2,
                              kWatchCallbackRegistered = 3;

}  // namespace ddprun::store
