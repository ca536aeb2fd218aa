// reply.h: decoding the values of c10d TCPStore replies, the client-side counterpart of
// the reply encoding in handler.cpp (which writes them with wire.h's Encoder). Replies
// carry no framing: a client knows the shape of each value from the request it sent
// (the shapes per command are tabled in protocol.cpp). Part of ddprun_store_core (pure).
// Used by TcpStore's connection (tcp_store_client.cpp), ddprun-loadgen and the tests'
// RawClient. Thread-safety: pure functions over caller-owned buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "store/core/protocol.h"

namespace ddprun::store {

// The wire shapes of reply values, in both dialects.
enum class ReplyValue : std::uint8_t {
  kU8,     // CHECK, WAIT, WATCH_KEY and CANCEL_WAIT answers
  kU32,    // PING's and VALIDATE's echo
  kI64,    // counters: ADD, GET_NUM_KEYS, DELETE_KEY, QUEUE_LEN, LIST_KEYS' count
  kBytes,  // u64 length + bytes: GET, COMPARE_SET, MULTI_GET, QUEUE_POP, LIST_KEYS' keys
};

// A byte string declared longer than this is not from a TCPStore (a client would
// otherwise try to allocate what a stray peer's garbage declares).
inline constexpr std::uint64_t kMaxReplyValueBytes = std::uint64_t{1} << 32;

struct ReplyDecode {
  ParseStatus status = ParseStatus::kNeedMore;
  std::size_t consumed = 0;  // kOk: bytes the value spans
  std::size_t needed = 0;    // kNeedMore: the buffer size at which decoding can go on
  std::string error;         // kBad: one line, e.g. "the store sent a 9-GiB string ..."
};

// Decodes one reply value of `kind` from the front of `in`. Integers go to `number`
// (u8 and u32 zero-extended); for kBytes `number` gets the length and `bytes`, when not
// null, the content. Never throws on input and never allocates more than it has read.
ReplyDecode decode_reply_value(std::string_view in, ReplyValue kind, std::int64_t& number,
                               std::string* bytes);

}  // namespace ddprun::store
