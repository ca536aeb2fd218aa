// handler.cpp: see handler.h. Reply shapes per command are tabled in protocol.cpp.
#include "store/core/handler.h"

#include <utility>

#include "store/core/wire.h"

namespace ddprun::store {
namespace {

// Fields each op reads (protocol.h documents them); a Request that parse_request made
// always has them, a hand-built one might not.
bool has_fields(const Request& r) {
  switch (r.op) {
    case Op::kSet:
    case Op::kAppend:
    case Op::kQueuePush:
      return !r.keys.empty() && !r.values.empty();
    case Op::kCompareSet:
      return !r.keys.empty() && r.values.size() >= 2;
    case Op::kGet:
    case Op::kDeleteKey:
    case Op::kWatchKey:
    case Op::kQueuePop:
    case Op::kQueueLen:
    case Op::kAdd:
    case Op::kBarrier:
      return !r.keys.empty();
    case Op::kMultiSet:
      return r.keys.size() == r.values.size();
    default:
      return true;
  }
}

HandleResult close_with(const Request& req, const std::string& why) {
  HandleResult r;
  r.kind = HandleResult::Kind::kClose;
  r.error = std::string(op_name(req.op)) + ": " + why;
  return r;
}

}  // namespace

std::size_t reply_size(const KvState& kv, const Request& req) {
  constexpr std::size_t kLen = 8;  // a u64 length, an i64
  auto value_size = [&](const std::string* v) { return kLen + (v ? v->size() : 0); };
  if (!has_fields(req)) return 0;
  switch (req.op) {
    case Op::kValidate:
    case Op::kSet:
    case Op::kAppend:
    case Op::kMultiSet:
    case Op::kQueuePush:
      return 0;
    case Op::kPing:
      return 4;
    case Op::kCheck:
    case Op::kWait:
    case Op::kWatchKey:
    case Op::kCancelWait:
    case Op::kBarrier:
      return 1;
    case Op::kAdd:
    case Op::kGetNumKeys:
    case Op::kDeleteKey:
    case Op::kQueueLen:
      return kLen;
    case Op::kGet:
      return value_size(kv.get(req.keys[0]));
    case Op::kCompareSet: {
      // What compare_set returns (kv_state.h): desired or expected when the key is
      // missing, the value after any replacement when present.
      const std::string* cur = kv.get(req.keys[0]);
      if (!cur) return kLen + (req.values[0].empty() ? req.values[1] : req.values[0]).size();
      return kLen + (*cur == req.values[0] ? req.values[1] : *cur).size();
    }
    case Op::kQueuePop: {
      const std::string* front = kv.queue_front(req.keys[0]);
      return kLen + (front ? value_size(front) : 0);
    }
    case Op::kMultiGet: {
      std::size_t total = 0;
      for (const auto& k : req.keys) total += value_size(kv.get(k));
      return total;
    }
    case Op::kListKeys: {
      std::size_t total = kLen;
      for (const auto& k : kv.list_keys()) total += kLen + k.size();
      return total;
    }
  }
  return 0;
}

HandleResult handle_request(KvState& kv, KvState::ClientId who, Request& req, std::string& reply,
                            KvState::Effects& fx) {
  if (!has_fields(req)) return close_with(req, "request is missing fields");
  Encoder e(reply);
  HandleResult res;
  std::string error;
  switch (req.op) {
    case Op::kValidate:
      break;
    case Op::kPing:
      e.u32(req.nonce);
      break;
    case Op::kSet:
      kv.set(req.keys[0], std::move(req.values[0]), fx);
      break;
    case Op::kCompareSet:
      e.bytes(kv.compare_set(req.keys[0], req.values[0], std::move(req.values[1]), fx));
      break;
    case Op::kGet: {
      // A missing key answers an empty value (as the libuv server does) rather than
      // closing; real clients only GET after a WAIT on the key succeeded.
      const std::string* v = kv.get(req.keys[0]);
      e.bytes(v ? std::string_view(*v) : std::string_view());
      break;
    }
    case Op::kAdd: {
      const auto v = kv.add(req.keys[0], req.number, fx, error);
      if (!v) return close_with(req, error);
      e.i64(*v);
      break;
    }
    case Op::kCheck:
      e.u8(kv.check(req.keys) ? kCheckReady : kCheckNotReady);
      break;
    case Op::kWait:
      if (kv.wait(req.keys, who) == KvState::WaitResult::kPending) {
        res.kind = HandleResult::Kind::kPending;
      } else {
        e.u8(kStopWaiting);
      }
      break;
    case Op::kGetNumKeys:
      e.i64(kv.num_keys());
      break;
    case Op::kWatchKey:
      kv.watch(req.keys[0], who);
      e.u8(kWatchCallbackRegistered);
      break;
    case Op::kDeleteKey:
      e.i64(kv.erase(req.keys[0], fx) ? 1 : 0);
      break;
    case Op::kAppend:
      kv.append(req.keys[0], req.values[0], fx);
      break;
    case Op::kMultiGet:
      reply.reserve(reply.size() + reply_size(kv, req));
      for (const auto& k : req.keys) {
        const std::string* v = kv.get(k);
        e.bytes(v ? std::string_view(*v) : std::string_view());
      }
      break;
    case Op::kMultiSet:
      kv.multi_set(req.keys, std::move(req.values), fx);
      break;
    case Op::kCancelWait:
      // Always answered: a 2.x client sends it after its own timeout and then reads
      // exactly one WAIT_CANCELED (after a possible racing STOP_WAITING).
      kv.cancel_wait(who);
      e.u8(kWaitCanceled);
      break;
    case Op::kQueuePush:
      kv.queue_push(req.keys[0], std::move(req.values[0]), fx);
      break;
    case Op::kQueuePop: {
      std::string value;
      const std::int64_t len = kv.queue_pop(req.keys[0], value);
      e.i64(len);
      if (len > 0) e.bytes(value);
      break;
    }
    case Op::kQueueLen:
      e.i64(kv.queue_len(req.keys[0]));
      break;
    case Op::kListKeys: {
      const auto keys = kv.list_keys();
      e.i64(static_cast<std::int64_t>(keys.size()));
      for (const auto& k : keys) e.bytes(k);
      break;
    }
    case Op::kBarrier: {
      const auto r = kv.barrier(req.keys[0], req.number, who, fx, error);
      if (!r) return close_with(req, error);
      if (*r == KvState::WaitResult::kPending) {
        res.kind = HandleResult::Kind::kPending;
      } else {
        e.u8(kStopWaiting);
      }
      break;
    }
  }
  return res;
}

void encode_release(std::string& out) { Encoder(out).u8(kStopWaiting); }

void encode_notification(const KvState::Notification& n, std::string& out) {
  Encoder e(out);
  switch (n.kind) {
    case KvState::Notification::Kind::kUpdated:
      e.u8(kWatchKeyUpdated);
      break;
    case KvState::Notification::Kind::kCreated:
      e.u8(kWatchKeyCreated);
      break;
    case KvState::Notification::Kind::kDeleted:
      e.u8(kWatchKeyDeleted);
      break;
  }
  e.bytes(n.key);
  e.bytes(n.old_value);
  e.bytes(n.new_value);
}

}  // namespace ddprun::store
