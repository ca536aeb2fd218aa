// tcp_store_client.cpp: TcpStore: connecting with retries, and every Store operation's
// exchange over its Connection (tcp_store_connection.h: the socket, handshake and
// buffered reads), kept with the CANCEL_WAIT protocol the blocking ones share.
#include "store/tcp_store_client.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>

#include "store/backoff.h"
#include "store/core/host_port.h"
#include "store/core/protocol.h"
#include "store/tcp_store_connection.h"

namespace ddprun::store {
namespace {

using tcp_client::AttemptFailed;
using tcp_client::Clock;
using tcp_client::Deadline;
using tcp_client::deadline_after;

// Replies to non-waiting requests get at least this long, however short the store's
// timeout, so a short wait timeout does not turn a busy server into a broken connection.
constexpr Store::Duration kMinReplyWait{5000};

Deadline reply_deadline(Store::Duration timeout) {
  return timeout == Store::kNoTimeout ? Deadline()
                                      : deadline_after(std::max(timeout, kMinReplyWait));
}

}  // namespace

TcpStore::TcpStore(TcpStoreOptions options) : Store(options.timeout), options_(std::move(options)) {
  std::string addr = address();
  Deadline deadline = deadline_after(options_.connect_timeout);
  ExponentialBackoffWithJitter backoff({.initial_interval = Duration(50),
                                        .randomization_factor = 0.5,
                                        .multiplier = 1.5,
                                        .max_interval = Duration(1000)});
  const std::atomic<bool>* cancel = options_.cancel;
  if (cancel != nullptr) {
    backoff.set_sleep([cancel](Duration d) {
      for (auto until = Clock::now() + d; !cancel->load() && Clock::now() < until;) {
        std::this_thread::sleep_for(std::min<Clock::duration>(Duration(20), until - Clock::now()));
      }
    });
  }
  for (;;) {
    if (cancel != nullptr && cancel->load()) {
      throw StoreConnectionError("connecting to store " + addr + " cancelled");
    }
    auto conn = std::make_unique<Connection>(addr, options_.silent_peer_timeout);
    try {
      conn->connect_once(options_.host, options_.port, deadline, cancel);
      conn_ = std::move(conn);
      break;
    } catch (const AttemptFailed& e) {
      auto left = deadline ? std::chrono::duration_cast<Duration>(*deadline - Clock::now())
                           : Duration::max();
      if (left <= Duration::zero()) {
        const std::string what = "cannot connect to store " + addr + " within " +
                                 std::to_string(options_.connect_timeout.count()) +
                                 " ms: " + e.what();
        if (e.err == ECONNREFUSED) throw StoreRefusedError(what);
        throw StoreConnectionError(what);
      }
      backoff.sleep_backoff(left);
    }
  }
  if (options_.world_size && options_.wait_for_workers) {
    std::int64_t joined = add("init/", 1);
    Duration limit = timeout();
    Deadline workers_deadline = deadline_after(limit);
    ExponentialBackoffWithJitter poll_backoff({.initial_interval = Duration(10),
                                               .randomization_factor = 0.5,
                                               .multiplier = 1.5,
                                               .max_interval = Duration(500)});
    while (joined < *options_.world_size) {
      if (workers_deadline && Clock::now() >= *workers_deadline) {
        throw StoreTimeoutError("timed out after " + std::to_string(limit.count()) +
                                " ms waiting for clients of store " + addr + ": " +
                                std::to_string(joined) + "/" +
                                std::to_string(*options_.world_size) + " clients joined");
      }
      poll_backoff.sleep_backoff();
      joined = add("init/", 0);
    }
  }
}

TcpStore::~TcpStore() = default;

std::string TcpStore::address() const { return format_host_port(options_.host, options_.port); }

void TcpStore::set(std::string_view key, std::string_view value) {
  std::lock_guard lock(mu_);
  Request& req = conn_->request(Op::kSet, key);
  req.values.emplace_back(value);
  conn_->send(req, reply_deadline(timeout()));
}

std::string TcpStore::compare_set(std::string_view key, std::string_view expected,
                                  std::string_view desired) {
  std::lock_guard lock(mu_);
  Request& req = conn_->request(Op::kCompareSet, key);
  req.values.emplace_back(expected);
  req.values.emplace_back(desired);
  Deadline deadline = reply_deadline(timeout());
  conn_->send(req, deadline);
  return conn_->read_bytes(deadline);
}

// WAIT then GET, as PyTorch's client does.
std::string TcpStore::get(std::string_view key) {
  std::vector<std::string> keys{std::string(key)};
  Duration limit = timeout();
  std::lock_guard lock(mu_);
  if (!wait_locked(keys, limit, "get")) {
    throw StoreTimeoutError(timeout_message("get", limit, keys));
  }
  Request& req = conn_->request(Op::kGet, key);
  Deadline deadline = reply_deadline(limit);
  conn_->send(req, deadline);
  return conn_->read_bytes(deadline);
}

bool TcpStore::do_wait_for(const std::vector<std::string>& keys, Duration timeout) {
  std::lock_guard lock(mu_);
  return wait_locked(keys, timeout, "wait");
}

bool TcpStore::wait_locked(const std::vector<std::string>& keys, Duration timeout,
                           const char* what) {
  Request& req = conn_->request(Op::kWait);
  req.keys = keys;
  conn_->send(req, reply_deadline(timeout));
  return await_release(timeout, what);
}

// PyTorch 2.x's timed wait: on timeout send CANCEL_WAIT and read one byte; `01` means
// canceled; `00` means the release crossed the cancel, and the `01` follows it. A crossed
// release is a release: the keys are there. (Counted as a timeout, a store slower than
// the wait slice never let a polling waiter see a key that was set: each WAIT's answer
// came after its CANCEL_WAIT, slice after slice, and the waits kept the store slow.)
bool TcpStore::await_release(Duration timeout, const char* what) {
  if (conn_->wait_readable(deadline_after(timeout))) {
    std::uint8_t reply = conn_->read_u8(reply_deadline(timeout));
    if (reply != kStopWaiting) {
      conn_->fail_protocol(std::string(what) + ": expected STOP_WAITING, got " +
                           std::to_string(reply));
    }
    return true;
  }
  // The store answers CANCEL_WAIT like any request: within its reply timeout from now, not
  // within the wait's own slice (a busy store answered a polling waiter's cancel after
  // 5 s, and the waiter gave the store up: issue 35's and the starved client's failures).
  const Deadline grace = reply_deadline(std::max(timeout, this->timeout()));
  Request& cancel = conn_->request(Op::kCancelWait);
  conn_->send(cancel, grace);
  std::uint8_t reply = conn_->read_u8(grace);
  const bool released = reply == kStopWaiting;
  if (released) reply = conn_->read_u8(grace);
  if (reply != kWaitCanceled) {
    conn_->fail_protocol(std::string(what) + ": expected WAIT_CANCELED after CANCEL_WAIT, got " +
                         std::to_string(reply));
  }
  return released;
}

std::int64_t TcpStore::add(std::string_view key, std::int64_t delta) {
  std::lock_guard lock(mu_);
  Request& req = conn_->request(Op::kAdd, key);
  req.number = delta;
  Deadline deadline = reply_deadline(timeout());
  conn_->send(req, deadline);
  return conn_->read_i64(deadline);
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mu_);
  Request& req = conn_->request(Op::kCheck);
  req.keys = keys;
  Deadline deadline = reply_deadline(timeout());
  conn_->send(req, deadline);
  return conn_->read_u8(deadline) == kCheckReady;
}

std::int64_t TcpStore::num_keys() {
  std::lock_guard lock(mu_);
  Request& req = conn_->request(Op::kGetNumKeys);
  Deadline deadline = reply_deadline(timeout());
  conn_->send(req, deadline);
  return conn_->read_i64(deadline);
}

bool TcpStore::delete_key(std::string_view key) {
  std::lock_guard lock(mu_);
  Request& req = conn_->request(Op::kDeleteKey, key);
  Deadline deadline = reply_deadline(timeout());
  conn_->send(req, deadline);
  return conn_->read_i64(deadline) != 0;
}

void TcpStore::append(std::string_view key, std::string_view value) {
  std::lock_guard lock(mu_);
  Request& req = conn_->request(Op::kAppend, key);
  req.values.emplace_back(value);
  conn_->send(req, reply_deadline(timeout()));
}

// WAIT on every key, then MULTI_GET, as PyTorch's client does.
std::vector<std::string> TcpStore::multi_get(const std::vector<std::string>& keys) {
  Duration limit = timeout();
  std::lock_guard lock(mu_);
  if (!wait_locked(keys, limit, "multi_get")) {
    throw StoreTimeoutError(timeout_message("multi_get", limit, keys));
  }
  Request& req = conn_->request(Op::kMultiGet);
  req.keys = keys;
  Deadline deadline = reply_deadline(limit);
  conn_->send(req, deadline);
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) values.push_back(conn_->read_bytes(deadline));
  return values;
}

void TcpStore::multi_set(const std::vector<std::string>& keys,
                         const std::vector<std::string>& values) {
  check_multi_set_sizes(keys, values);
  std::lock_guard lock(mu_);
  Request& req = conn_->request(Op::kMultiSet);
  req.keys = keys;
  req.values = values;
  conn_->send(req, reply_deadline(timeout()));
}

std::vector<std::string> TcpStore::list_keys() {
  std::lock_guard lock(mu_);
  Request& req = conn_->request(Op::kListKeys);
  Deadline deadline = reply_deadline(timeout());
  conn_->send(req, deadline);
  std::int64_t n = conn_->read_i64(deadline);
  if (n < 0) conn_->fail_protocol("LIST_KEYS: negative count " + std::to_string(n));
  std::vector<std::string> keys;
  for (std::int64_t i = 0; i < n; ++i) keys.push_back(conn_->read_bytes(deadline));
  return keys;
}

void TcpStore::queue_push(std::string_view key, std::string_view value) {
  std::lock_guard lock(mu_);
  Request& req = conn_->request(Op::kQueuePush, key);
  req.values.emplace_back(value);
  conn_->send(req, reply_deadline(timeout()));
}

std::optional<std::string> TcpStore::pop_locked(std::string_view key, Duration limit) {
  Request& req = conn_->request(Op::kQueuePop, key);
  Deadline deadline = reply_deadline(limit);
  conn_->send(req, deadline);
  if (conn_->read_i64(deadline) <= 0) return std::nullopt;
  return conn_->read_bytes(deadline);
}

// A blocking pop is WAIT(key) then POP; another client may win the item in between, so
// it loops until its own deadline.
std::string TcpStore::queue_pop(std::string_view key) {
  Duration limit = timeout();
  Deadline deadline = deadline_after(limit);
  std::vector<std::string> keys{std::string(key)};
  std::lock_guard lock(mu_);
  for (;;) {
    Duration left = limit;
    if (deadline) {
      left = std::chrono::duration_cast<Duration>(*deadline - Clock::now());
      if (left <= Duration::zero())
        throw StoreTimeoutError(timeout_message("queue_pop", limit, keys));
    }
    if (!wait_locked(keys, left, "queue_pop")) {
      throw StoreTimeoutError(timeout_message("queue_pop", limit, keys));
    }
    if (std::optional<std::string> value = pop_locked(key, limit)) return std::move(*value);
  }
}

std::optional<std::string> TcpStore::queue_try_pop(std::string_view key) {
  std::lock_guard lock(mu_);
  return pop_locked(key, timeout());
}

std::int64_t TcpStore::queue_len(std::string_view key) {
  std::lock_guard lock(mu_);
  Request& req = conn_->request(Op::kQueueLen, key);
  Deadline deadline = reply_deadline(timeout());
  conn_->send(req, deadline);
  return conn_->read_i64(deadline);
}

void TcpStore::barrier(std::string_view key, std::int64_t world_size) {
  Duration limit = timeout();
  std::lock_guard lock(mu_);
  Request& req = conn_->request(Op::kBarrier, key);
  req.number = world_size;
  conn_->send(req, reply_deadline(limit));
  if (!await_release(limit, "barrier")) {
    throw StoreTimeoutError(timeout_message("barrier", limit, {std::string(key)}));
  }
}

}  // namespace ddprun::store
