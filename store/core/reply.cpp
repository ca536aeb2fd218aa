// reply.cpp: see reply.h.
#include "store/core/reply.h"

#include "store/core/wire.h"

namespace ddprun::store {

ReplyDecode decode_reply_value(std::string_view in, ReplyValue kind, std::int64_t& number,
                               std::string* bytes) {
  ReplyDecode r;
  Decoder d(in);
  auto fixed = [&](std::size_t size, auto read) {
    if (!read()) {
      r.needed = size;
      return r;
    }
    r.status = ParseStatus::kOk;
    r.consumed = size;
    return r;
  };
  switch (kind) {
    case ReplyValue::kU8:
      return fixed(1, [&] {
        std::uint8_t v = 0;
        if (!d.u8(v)) return false;
        number = v;
        return true;
      });
    case ReplyValue::kU32:
      return fixed(4, [&] {
        std::uint32_t v = 0;
        if (!d.u32(v)) return false;
        number = v;
        return true;
      });
    case ReplyValue::kI64:
      return fixed(8, [&] { return d.i64(number); });
    case ReplyValue::kBytes: {
      std::uint64_t len = 0;
      if (!d.u64(len)) {
        r.needed = 8;
        return r;
      }
      if (len > kMaxReplyValueBytes) {
        r.status = ParseStatus::kBad;
        r.error = "the store sent a " + std::to_string(len) + "-byte string (not a TCPStore?)";
        return r;
      }
      const std::size_t total = 8 + static_cast<std::size_t>(len);
      if (in.size() < total) {
        r.needed = total;
        return r;
      }
      number = static_cast<std::int64_t>(len);
      if (bytes != nullptr) bytes->assign(in.substr(8, static_cast<std::size_t>(len)));
      r.status = ParseStatus::kOk;
      r.consumed = total;
      return r;
    }
  }
  r.status = ParseStatus::kBad;
  r.error = "unknown reply value kind";
  return r;
}

}  // namespace ddprun::store
