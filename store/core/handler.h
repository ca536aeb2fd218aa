// handler.h: applies one decoded request to a KvState and encodes the reply bytes, for
// either dialect. This is everything a server session does between "bytes parsed" and
// "bytes to write", kept pure so that it is unit-tested and fuzzed without sockets.
// Used by TcpStoreServer's sessions and by the fuzzer.
// Thread-safety: none; runs on the thread that owns the KvState.
#pragma once

#include <cstddef>
#include <string>

#include "store/core/kv_state.h"
#include "store/core/protocol.h"

namespace ddprun::store {

struct HandleResult {
  enum class Kind {
    kDone,     // the reply (possibly none, e.g. SET) was appended to `reply`
    kPending,  // a WAIT/BARRIER was registered; its `00` comes later through Effects
    kClose,    // the request is invalid for the state (e.g. ADD on a non-number):
               // close this connection; `error` is one line saying why
  };
  Kind kind = Kind::kDone;
  std::string error;
};

// The number of bytes handle_request would answer `req` with if applied to `kv` now,
// counting the `00` that a pending WAIT or BARRIER gets later (a request that then
// closes the connection, e.g. ADD on a non-number, gets nothing). A few hundred request bytes can
// ask for a huge reply (MULTI_GET can name one 8 MiB value 131072 times), so servers call this
// first, to refuse a reply over their cap or to defer it while their output is full
// (docs/protocol.md "Output limits"). Cost: one lookup per key named (LIST_KEYS: a pass over every
// key).
std::size_t reply_size(const KvState& kv, const Request& req);

// Applies `req` from client `who`. Appends this client's reply bytes to `reply` (as many
// as reply_size said; callers bound them with it). Both dialects share reply shapes; only
// the command numbers differ, and parse_request has mapped those to Op. Adds released
// waiters and watch notifications (for this or other clients) to `fx`. `req` may be
// moved from.
HandleResult handle_request(KvState& kv, KvState::ClientId who, Request& req, std::string& reply,
                            KvState::Effects& fx);

// Appends the bytes that complete one released WAIT/BARRIER (STOP_WAITING, `00`).
void encode_release(std::string& out);

// Appends one legacy WATCH_KEY push: u8 type, str key, bytes old, bytes new.
void encode_notification(const KvState::Notification& n, std::string& out);

}  // namespace ddprun::store
