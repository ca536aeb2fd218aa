// stream_fuzz.cpp: see stream_fuzz.h. The invariants checked here are the parser's
// contract (protocol.h) and KvState's release-exactly-once contract (kv_state.h).
#include "tests/fuzz/stream_fuzz.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <unordered_map>

#include "store/core/handler.h"
#include "store/core/kv_state.h"
#include "store/core/protocol.h"
#include "tests/fuzz/fuzz_check.h"

namespace ddprun::store::fuzz {
namespace {

// Replies over this are refused, as the server refuses those over --max-reply-bytes.
constexpr std::size_t kMaxReplyBytes = std::size_t{16} << 20;

bool one_line(const std::string& s) {
  return !s.empty() && s.find('\n') == std::string::npos && s.size() < 512;
}

bool replies_nothing(const Request& r) {
  return r.op == Op::kSet || r.op == Op::kAppend || r.op == Op::kMultiSet ||
         r.op == Op::kQueuePush || r.op == Op::kValidate ||
         (r.op == Op::kMultiGet && r.keys.empty());
}

// Every limit at most the default, so that a request the tight parse accepts is one the
// default parse accepts identically.
Limits tight_limits() {
  Limits l;
  l.max_key_bytes = 64;
  l.max_value_bytes = 256;
  l.max_keys_per_request = 8;
  l.max_request_bytes = 1024;
  return l;
}

// Parser contract for the request at the front of `rest` (parsed as `res`/`req`).
void check_parse(std::string_view rest, Dialect d, const ParseResult& res, const Request& req) {
  Request treq;
  const auto tres = parse_request(rest, d, tight_limits(), treq);
  switch (res.status) {
    case ParseStatus::kOk:
      FUZZ_CHECK(res.consumed > 0 && res.consumed <= rest.size());
      FUZZ_CHECK(tres.status != ParseStatus::kNeedMore);
      if (tres.status == ParseStatus::kOk) {
        FUZZ_CHECK(tres.consumed == res.consumed && treq == req);
      }
      break;
    case ParseStatus::kNeedMore:
      FUZZ_CHECK(res.consumed == 0);
      FUZZ_CHECK(res.needed > rest.size());
      FUZZ_CHECK(tres.status != ParseStatus::kOk);
      return;
    case ParseStatus::kBad:
      FUZZ_CHECK(one_line(res.error));
      FUZZ_CHECK(tres.status == ParseStatus::kBad);
      return;
  }
  FUZZ_CHECK(tres.status != ParseStatus::kBad || one_line(tres.error));

  // A proper prefix of a complete request is "need more", pointing no further than its end.
  for (std::size_t cut : {res.consumed - 1, res.consumed / 2, std::size_t{0}}) {
    Request preq;
    const auto p = parse_request(rest.substr(0, cut), d, Limits{}, preq);
    FUZZ_CHECK(p.status == ParseStatus::kNeedMore);
    FUZZ_CHECK(p.needed > cut && p.needed <= res.consumed);
  }

  // Encoding gives back exactly the bytes consumed, and parses back in either dialect.
  std::string enc;
  encode_request(req, d, enc);
  FUZZ_CHECK(enc == rest.substr(0, res.consumed));
  for (Dialect other : {Dialect::kLegacy, Dialect::kModern}) {
    if (!op_in_dialect(req.op, other)) continue;
    std::string e2;
    encode_request(req, other, e2);
    Request back;
    const auto r2 = parse_request(e2, other, Limits{}, back);
    FUZZ_CHECK(r2.status == ParseStatus::kOk && r2.consumed == e2.size() && back == req);
  }
}

// What KvState owes each client: one release per pending registration.
class Ledger {
 public:
  void pending(KvState::ClientId c) { ++owed_[c]; }
  void dropped(KvState::ClientId c) { owed_.erase(c); }
  void settle(KvState::Effects& fx, const KvState& kv) {
    std::string out;
    for (KvState::ClientId c : fx.released) {
      auto it = owed_.find(c);
      FUZZ_CHECK(it != owed_.end() && it->second > 0);  // released exactly once
      if (--it->second == 0) owed_.erase(it);
      encode_release(out);
    }
    for (const auto& n : fx.notifications) encode_notification(n, out);
    fx.clear();
    std::size_t total = 0;
    for (const auto& [c, n] : owed_) total += n;
    FUZZ_CHECK(kv.pending_waits() == total);
  }

 private:
  std::unordered_map<KvState::ClientId, std::size_t> owed_;
};

}  // namespace

void run_stream(const std::uint8_t* data, std::size_t size) {
  const std::string_view stream(reinterpret_cast<const char*>(data), size);
  std::string detect_error;
  const auto detected = detect_dialect(stream, Limits{}, detect_error);
  if (detected == DetectResult::kNeedMore) {
    FUZZ_CHECK(size < 5);
    return;
  }
  if (detected == DetectResult::kBad) {
    FUZZ_CHECK(one_line(detect_error));
    return;
  }
  const Dialect dialect = detected == DetectResult::kModern ? Dialect::kModern : Dialect::kLegacy;

  KvState kv;
  KvState::Effects fx;
  Ledger ledger;
  std::size_t pos = 0;
  for (unsigned n = 0; pos < stream.size(); ++n) {
    const std::string_view rest = stream.substr(pos);
    Request req;
    const auto res = parse_request(rest, dialect, Limits{}, req);
    check_parse(rest, dialect, res, req);
    if (res.status != ParseStatus::kOk) break;  // need more at the end, or a closed connection
    pos += res.consumed;

    // A few clients take turns; which one sends what depends on the input.
    const KvState::ClientId who = 1 + (pos + n) % 3;
    const Op op = req.op;
    const bool silent = replies_nothing(req);  // before handle_request moves from `req`
    // As a server does (tcp_store_server.cpp): size the reply first, refuse a huge one.
    const std::size_t predicted = reply_size(kv, req);
    if (predicted > kMaxReplyBytes) {
      kv.forget(who);
      ledger.dropped(who);
      ledger.settle(fx, kv);
      continue;
    }
    std::string reply;
    const auto h = handle_request(kv, who, req, reply, fx);
    switch (h.kind) {
      case HandleResult::Kind::kDone:
        FUZZ_CHECK(reply.empty() == silent);
        FUZZ_CHECK(reply.size() == predicted);
        if (op == Op::kCancelWait) ledger.dropped(who);
        break;
      case HandleResult::Kind::kPending:
        FUZZ_CHECK(reply.empty() && (op == Op::kWait || op == Op::kBarrier));
        FUZZ_CHECK(predicted == 1);  // the `00` that comes later
        ledger.pending(who);
        break;
      case HandleResult::Kind::kClose:
        FUZZ_CHECK(one_line(h.error) && (op == Op::kAdd || op == Op::kBarrier));
        kv.forget(who);
        ledger.dropped(who);
        break;
    }
    ledger.settle(fx, kv);

    // Connections come and go, and 2.x clients cancel after a timeout.
    if ((res.consumed + n) % 11 == 5) {
      kv.forget(who);
      ledger.dropped(who);
    } else if ((res.consumed + n) % 7 == 3) {
      kv.cancel_wait(who);
      ledger.dropped(who);
    }
    ledger.settle(fx, kv);
  }
  FUZZ_CHECK(static_cast<std::int64_t>(kv.list_keys().size()) == kv.num_keys());
  kv.clear();
  FUZZ_CHECK(kv.pending_waits() == 0 && kv.num_keys() == 0);
}

}  // namespace ddprun::store::fuzz
