// reply_stream.h: ReplyStream, a large GET or MULTI_GET reply encoded piece by piece from
// value handles taken when the request was handled (KvState::value_handle): the bytes are
// what handle_request would have built then, but the server holds and builds one piece
// at a time, as the socket drains. Used by the server for replies over kStreamPieceBytes.
// Thread-safety: none; runs on the thread that owns the KvState.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "store/core/kv_state.h"
#include "store/core/protocol.h"

namespace ddprun::store {

class ReplyStream {
 public:
  // The reply to `req` (kGet or kMultiGet; other ops give an empty stream) as of now.
  ReplyStream(const KvState& kv, const Request& req);

  // Appends the next at most `max_bytes` bytes of the reply to `out` (at least 8 while
  // not done, so that a length is never split).
  void next(std::string& out, std::size_t max_bytes);

  bool done() const { return item_ == values_.size(); }
  std::size_t remaining() const { return remaining_; }

 private:
  std::vector<std::shared_ptr<const std::string>> values_;  // nullptr: missing, empty
  std::size_t item_ = 0;                                    // the item being written
  std::size_t written_ = 0;      // of its value's bytes (its length is out once started)
  bool length_written_ = false;  // whether item_'s u64 length is out
  std::size_t remaining_ = 0;
};

}  // namespace ddprun::store
