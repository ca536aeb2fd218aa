// reply_stream.cpp: see reply_stream.h.
#include "store/core/reply_stream.h"

#include <algorithm>

#include "store/core/wire.h"

namespace ddprun::store {

ReplyStream::ReplyStream(const KvState& kv, const Request& req) {
  if (req.op != Op::kGet && req.op != Op::kMultiGet) return;
  const std::size_t n =
      req.op == Op::kGet ? std::min<std::size_t>(req.keys.size(), 1) : req.keys.size();
  values_.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    values_.push_back(kv.value_handle(req.keys[i]));
    remaining_ += 8 + (values_.back() ? values_.back()->size() : 0);
  }
}

void ReplyStream::next(std::string& out, std::size_t max_bytes) {
  std::size_t budget = std::max<std::size_t>(max_bytes, 8);
  while (!done() && budget > 0) {
    const std::string* value = values_[item_].get();
    const std::size_t size = value ? value->size() : 0;
    if (!length_written_) {
      if (budget < 8) break;
      Encoder(out).u64(size);
      length_written_ = true;
      budget -= 8;
      remaining_ -= 8;
    }
    const std::size_t take = std::min(size - written_, budget);
    if (take > 0) out.append(value->data() + written_, take);
    written_ += take;
    budget -= take;
    remaining_ -= take;
    if (written_ == size) {
      values_[item_].reset();  // sent: no longer held for this reply
      ++item_;
      written_ = 0;
      length_written_ = false;
    }
  }
}

}  // namespace ddprun::store
