// protocol.cpp: the c10d TCPStore request codec for both dialects.
//
// Byte grammar. Integers are little-endian; `str`/`bytes` = u64 length, then the bytes.
// Every request is `u8 cmd` followed by the payload of that command:
//
//   command       legacy  modern  payload after cmd                     reply
//   VALIDATE        -       0     u32 magic (0x3C85F7CE: ce f7 85 3c)   none
//   SET             0       1     str key, bytes value                   none
//   COMPARE_SET     1       2     str key, bytes expected, bytes desired bytes
//   GET             2       3     str key                                bytes
//   ADD             3       4     str key, i64 delta                     i64
//   CHECK           4       5     u64 n, n x str key                     u8 0 ready / 1 not
//   WAIT            5       6     u64 n, n x str key                     u8 0 (now or later)
//   GETNUMKEYS      6       7     -                                      i64
//   WATCH_KEY       7       -     str key                                u8 3, then pushes
//   DELETE_KEY      8       8     str key                                i64 1 / 0
//   APPEND          9       9     str key, bytes data                    none
//   MULTI_GET      10      10     u64 n, n x str key                     n x bytes
//   MULTI_SET      11      11     i64 n, n x (str key, bytes value)      none
//   CANCEL_WAIT    12      12     -                                      u8 1
//   PING            -      13     u32 nonce                              u32 nonce
//   QUEUE_PUSH      -      14     str key, bytes value                   none
//   QUEUE_POP       -      15     str key                                i64 len, [bytes]
//   QUEUE_LEN       -      16     str key                                i64
//   LIST_KEYS       -      17     -                                      i64 n, n x str
//   BARRIER         -      18     str key, i64 world_size                u8 0 (now or later)
//
// Legacy is PyTorch 1.13's numbering (0..8, observed on the wire) plus the 9..12 that the
// 2.0-era client added without renumbering. Modern is the 2.2+ numbering: VALIDATE took
// 0 and shifted SET..GETNUMKEYS up by one, while DELETE_KEY stayed 8. A modern connection
// therefore always opens `00 ce f7 85 3c`; to a legacy server that reads as SET with a
// key of over 10^15 bytes, so no real legacy stream starts that way (detect_dialect).
//
// Parsing is two passes over the buffer: a scan that only reads lengths (so a long,
// still-incomplete value costs O(fields) per attempt rather than a copy), then, once the
// scan says the request is complete and within limits, a pass that copies the fields.
#include "store/core/protocol.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <string>

#include "store/core/wire.h"

namespace ddprun::store {
namespace {

constexpr std::uint8_t kAbsent = 0xff;

struct OpInfo {
  Op op;
  const char* name;
  std::uint8_t legacy;
  std::uint8_t modern;
};

// Indexed by Op (checked below).
constexpr std::array<OpInfo, 20> kOps{{
    {Op::kValidate, "VALIDATE", kAbsent, 0},
    {Op::kSet, "SET", 0, 1},
    {Op::kCompareSet, "COMPARE_SET", 1, 2},
    {Op::kGet, "GET", 2, 3},
    {Op::kAdd, "ADD", 3, 4},
    {Op::kCheck, "CHECK", 4, 5},
    {Op::kWait, "WAIT", 5, 6},
    {Op::kGetNumKeys, "GETNUMKEYS", 6, 7},
    {Op::kWatchKey, "WATCH_KEY", 7, kAbsent},
    {Op::kDeleteKey, "DELETE_KEY", 8, 8},
    {Op::kAppend, "APPEND", 9, 9},
    {Op::kMultiGet, "MULTI_GET", 10, 10},
    {Op::kMultiSet, "MULTI_SET", 11, 11},
    {Op::kCancelWait, "CANCEL_WAIT", 12, 12},
    {Op::kPing, "PING", kAbsent, 13},
    {Op::kQueuePush, "QUEUE_PUSH", kAbsent, 14},
    {Op::kQueuePop, "QUEUE_POP", kAbsent, 15},
    {Op::kQueueLen, "QUEUE_LEN", kAbsent, 16},
    {Op::kListKeys, "LIST_KEYS", kAbsent, 17},
    {Op::kBarrier, "BARRIER", kAbsent, 18},
}};

constexpr bool ops_indexed_by_op() {
  for (std::size_t i = 0; i < kOps.size(); ++i) {
    if (static_cast<std::size_t>(kOps[i].op) != i) return false;
  }
  return true;
}
static_assert(ops_indexed_by_op());

const OpInfo& info(Op op) { return kOps[static_cast<std::size_t>(op)]; }

std::uint8_t wire_byte(Op op, Dialect d) {
  return d == Dialect::kLegacy ? info(op).legacy : info(op).modern;
}

const OpInfo* op_for_byte(std::uint8_t b, Dialect d) {
  if (b == kAbsent) return nullptr;
  for (const auto& i : kOps) {
    if ((d == Dialect::kLegacy ? i.legacy : i.modern) == b) return &i;
  }
  return nullptr;
}

constexpr std::uint8_t kModernOpening[5] = {0x00, 0xce, 0xf7, 0x85, 0x3c};

enum class Step : std::uint8_t { kOk, kNeedMore, kBad };

// Walks one request's fields. With `copy` off it only validates lengths and limits and
// finds where the request ends; with `copy` on it also fills in the Request.
class Walker {
 public:
  Walker(std::string_view buf, const Limits& limits, const char* name, bool copy)
      : dec_(buf), buf_(buf), limits_(limits), name_(name), copy_(copy) {
    dec_.skip(1);  // the command byte, already read by the caller
  }

  Step u32(std::uint32_t& v) { return dec_.u32(v) ? Step::kOk : short_by(4); }
  Step i64(std::int64_t& v) { return dec_.i64(v) ? Step::kOk : short_by(8); }
  Step u64(std::uint64_t& v) { return dec_.u64(v) ? Step::kOk : short_by(8); }

  // A key (`is_key`) or a value. Checks the declared length before anything else.
  Step str(std::string& dst, bool is_key) {
    std::uint64_t len = 0;
    if (!dec_.u64(len)) return short_by(8);
    const std::size_t max = is_key ? limits_.max_key_bytes : limits_.max_value_bytes;
    if (len > max) {
      return bad(std::string(name_) + ": " + (is_key ? "key" : "value") + " of " +
                 std::to_string(len) + " bytes exceeds the limit of " + std::to_string(max) +
                 " bytes");
    }
    const auto n = static_cast<std::size_t>(len);
    if (Step s = within_request(dec_.position() + n); s != Step::kOk) return s;
    if (dec_.remaining() < n) return short_by(n);
    if (copy_) {
      dst.assign(buf_at(dec_.position()), n);
    }
    dec_.skip(n);
    return Step::kOk;
  }

  // A key count `n` whose items take at least `min_item` bytes each.
  Step count(std::uint64_t n, std::size_t min_item) {
    if (n > limits_.max_keys_per_request) {
      return bad(std::string(name_) + ": " + std::to_string(n) + " keys exceeds the limit of " +
                 std::to_string(limits_.max_keys_per_request));
    }
    return within_request(dec_.position() + static_cast<std::size_t>(n) * min_item);
  }

  Step bad(std::string why) {
    error_ = std::move(why);
    return Step::kBad;
  }

  bool copying() const { return copy_; }
  std::size_t position() const { return dec_.position(); }
  std::size_t needed() const { return needed_; }
  std::string& error() { return error_; }

 private:
  Step short_by(std::size_t n) {
    needed_ = dec_.position() + n;
    return Step::kNeedMore;
  }
  Step within_request(std::size_t end) {
    if (end > limits_.max_request_bytes) {
      return bad(std::string(name_) + ": request of at least " + std::to_string(end) +
                 " bytes exceeds the limit of " + std::to_string(limits_.max_request_bytes) +
                 " bytes");
    }
    return Step::kOk;
  }
  const char* buf_at(std::size_t pos) const { return buf_.data() + pos; }

  Decoder dec_;
  std::string_view buf_;
  const Limits& limits_;
  const char* name_;
  bool copy_;
  std::size_t needed_ = 0;
  std::string error_;
};

#define DDPRUN_STEP(expr)                             \
  do {                                                \
    if (Step s_ = (expr); s_ != Step::kOk) return s_; \
  } while (0)

// Resizes `v` to `n` only in the copying pass, which runs after the scan has checked `n`.
void size_to(Walker& w, std::vector<std::string>& v, std::size_t n) {
  if (w.copying()) v.resize(n);
}

Step walk_keys(Walker& w, Request& r) {
  std::uint64_t n = 0;
  DDPRUN_STEP(w.u64(n));
  DDPRUN_STEP(w.count(n, 8));
  size_to(w, r.keys, n);
  std::string scratch;
  for (std::uint64_t i = 0; i < n; ++i) {
    DDPRUN_STEP(w.str(w.copying() ? r.keys[i] : scratch, true));
  }
  return Step::kOk;
}

// The payload after the command byte. In the scan pass `r` is a scratch request that is
// never filled (Walker::str only writes when copying).
Step walk_payload(Walker& w, Op op, Request& r) {
  std::string scratch;
  auto key = [&]() -> std::string& {
    size_to(w, r.keys, 1);
    return w.copying() ? r.keys[0] : scratch;
  };
  auto value = [&](std::size_t i) -> std::string& {
    size_to(w, r.values, i + 1);
    return w.copying() ? r.values[i] : scratch;
  };
  switch (op) {
    case Op::kValidate: {
      std::uint32_t magic = 0;
      DDPRUN_STEP(w.u32(magic));
      if (magic != kValidationMagic) {
        char hex[16];
        std::snprintf(hex, sizeof hex, "0x%08X", magic);
        return w.bad(std::string("VALIDATE: magic ") + hex + " is not 0x3C85F7CE");
      }
      r.nonce = magic;
      return Step::kOk;
    }
    case Op::kPing:
      return w.u32(r.nonce);
    case Op::kSet:
    case Op::kAppend:
    case Op::kQueuePush:
      DDPRUN_STEP(w.str(key(), true));
      return w.str(value(0), false);
    case Op::kCompareSet:
      DDPRUN_STEP(w.str(key(), true));
      DDPRUN_STEP(w.str(value(0), false));
      return w.str(value(1), false);
    case Op::kGet:
    case Op::kDeleteKey:
    case Op::kWatchKey:
    case Op::kQueuePop:
    case Op::kQueueLen:
      return w.str(key(), true);
    case Op::kAdd:
    case Op::kBarrier:
      DDPRUN_STEP(w.str(key(), true));
      return w.i64(r.number);
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
      return walk_keys(w, r);
    case Op::kMultiSet: {
      std::int64_t n = 0;
      DDPRUN_STEP(w.i64(n));
      if (n < 0) return w.bad("MULTI_SET: negative key count " + std::to_string(n));
      DDPRUN_STEP(w.count(static_cast<std::uint64_t>(n), 16));
      size_to(w, r.keys, static_cast<std::size_t>(n));
      size_to(w, r.values, static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) {
        const auto k = static_cast<std::size_t>(i);
        DDPRUN_STEP(w.str(w.copying() ? r.keys[k] : scratch, true));
        DDPRUN_STEP(w.str(w.copying() ? r.values[k] : scratch, false));
      }
      return Step::kOk;
    }
    case Op::kGetNumKeys:
    case Op::kCancelWait:
    case Op::kListKeys:
      return Step::kOk;
  }
  return w.bad("internal: unhandled command");
}

#undef DDPRUN_STEP

}  // namespace

const char* op_name(Op op) {
  const auto i = static_cast<std::size_t>(op);
  return i < kOps.size() ? kOps[i].name : "UNKNOWN";
}

bool op_in_dialect(Op op, Dialect dialect) {
  return static_cast<std::size_t>(op) < kOps.size() && wire_byte(op, dialect) != kAbsent;
}

ParseResult parse_request(std::string_view buf, Dialect dialect, const Limits& limits,
                          Request& out) {
  ParseResult res;
  if (buf.empty()) {
    res.needed = 1;
    return res;
  }
  const auto cmd = static_cast<std::uint8_t>(buf[0]);
  const OpInfo* op = op_for_byte(cmd, dialect);
  if (op == nullptr) {
    res.status = ParseStatus::kBad;
    res.error = "unknown command byte " + std::to_string(cmd) + " in the " +
                (dialect == Dialect::kLegacy ? "legacy (1.13/2.0)" : "modern (2.2+)") + " dialect";
    return res;
  }
  Request scratch;
  Walker scan(buf, limits, op->name, /*copy=*/false);
  switch (walk_payload(scan, op->op, scratch)) {
    case Step::kNeedMore:
      res.needed = scan.needed();
      return res;
    case Step::kBad:
      res.status = ParseStatus::kBad;
      res.error = std::move(scan.error());
      return res;
    case Step::kOk:
      break;
  }

  out.op = op->op;
  out.keys.clear();
  out.values.clear();
  out.number = 0;
  out.nonce = 0;
  Walker fill(buf, limits, op->name, /*copy=*/true);
  if (walk_payload(fill, op->op, out) != Step::kOk) {
    // Unreachable: the scan accepted the same bytes under the same limits.
    res.status = ParseStatus::kBad;
    res.error = std::string(op->name) + ": internal parse mismatch";
    return res;
  }
  res.status = ParseStatus::kOk;
  res.consumed = fill.position();
  return res;
}

DetectResult detect_dialect(std::string_view first_bytes, const Limits& limits,
                            std::string& error) {
  if (first_bytes.empty()) return DetectResult::kNeedMore;
  if (static_cast<std::uint8_t>(first_bytes[0]) != kModernOpening[0]) return DetectResult::kLegacy;
  // `00`: VALIDATE, or a legacy SET whose u64 key length follows. Decide on the next four
  // bytes: the magic is modern; a legacy SET has a key length within limits, so its low
  // four bytes are at most max_key_bytes. Anything else is a VALIDATE with a wrong magic,
  // refused now rather than left waiting for the rest of a SET that never comes.
  if (first_bytes.size() < sizeof kModernOpening) return DetectResult::kNeedMore;
  std::uint32_t magic = 0;
  for (std::size_t i = 4; i >= 1; --i) {
    magic = (magic << 8) | static_cast<std::uint8_t>(first_bytes[i]);
  }
  if (magic == kValidationMagic) return DetectResult::kModern;
  if (magic <= limits.max_key_bytes) return DetectResult::kLegacy;
  char hex[16];
  std::snprintf(hex, sizeof hex, "0x%08X", magic);
  error = std::string("VALIDATE: magic ") + hex +
          " is not 0x3C85F7CE (nor a legacy SET: key length over " +
          std::to_string(limits.max_key_bytes) + " bytes)";
  return DetectResult::kBad;
}

void encode_request(const Request& req, Dialect dialect, std::string& out) {
  if (!op_in_dialect(req.op, dialect)) return;
  Encoder e(out);
  e.u8(wire_byte(req.op, dialect));
  auto key = [&](std::size_t i) { e.bytes(i < req.keys.size() ? req.keys[i] : ""); };
  auto value = [&](std::size_t i) { e.bytes(i < req.values.size() ? req.values[i] : ""); };
  switch (req.op) {
    case Op::kValidate:
      e.u32(kValidationMagic);
      return;
    case Op::kPing:
      e.u32(req.nonce);
      return;
    case Op::kSet:
    case Op::kAppend:
    case Op::kQueuePush:
      key(0);
      value(0);
      return;
    case Op::kCompareSet:
      key(0);
      value(0);
      value(1);
      return;
    case Op::kGet:
    case Op::kDeleteKey:
    case Op::kWatchKey:
    case Op::kQueuePop:
    case Op::kQueueLen:
      key(0);
      return;
    case Op::kAdd:
    case Op::kBarrier:
      key(0);
      e.i64(req.number);
      return;
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
      e.u64(req.keys.size());
      for (const auto& k : req.keys) e.bytes(k);
      return;
    case Op::kMultiSet:
      e.i64(static_cast<std::int64_t>(req.keys.size()));
      for (std::size_t i = 0; i < req.keys.size(); ++i) {
        key(i);
        value(i);
      }
      return;
    case Op::kGetNumKeys:
    case Op::kCancelWait:
    case Op::kListKeys:
      return;
  }
}

}  // namespace ddprun::store
