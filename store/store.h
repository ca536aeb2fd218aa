// store.h: the abstract client-side Store (the c10d operation set without watch_key) and
// its error family. Implementations: MemoryStore (in-process), TcpStore (a TCPStore
// server over TCP), PrefixStore (decorator). Used by the rendezvous and the launcher.
// Thread-safety: every implementation is safe for concurrent use; blocking calls of one
// TcpStore run one at a time (the connection carries one operation at a time).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::store {

// Root of every error a Store operation throws.
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// A blocking operation ran past its timeout. The message names the keys waited for.
class StoreTimeoutError : public StoreError {
 public:
  using StoreError::StoreError;
};
// The store cannot be reached, or the connection broke (names host:port and the reason).
class StoreConnectionError : public StoreError {
 public:
  using StoreError::StoreError;
};
// The connection was given up because the store stayed silent past its bound
// (TcpStoreOptions::silent_peer_timeout): what was sent never acknowledged, keepalive
// probes unanswered. A cut link or a host gone without a word, not a store that closed.
class StoreSilentError : public StoreConnectionError {
 public:
  using StoreConnectionError::StoreConnectionError;
};
// The store closed or reset an established connection before answering (its process
// exited, or it refused the request): not a timeout, not silence.
class StoreClosedError : public StoreConnectionError {
 public:
  using StoreConnectionError::StoreConnectionError;
};
// Connecting gave up and the last try was refused: nothing listens at host:port.
class StoreRefusedError : public StoreConnectionError {
 public:
  using StoreConnectionError::StoreConnectionError;
};
// A server cannot listen on its port because another socket holds it (EADDRINUSE).
class StoreAddressInUseError : public StoreError {
 public:
  using StoreError::StoreError;
};
// The other side sent something this client cannot accept, or the store refused the
// request (e.g. ADD on a value that is not a decimal integer, in-process).
class StoreProtocolError : public StoreError {
 public:
  using StoreError::StoreError;
};

// The blocking contract, identical for every implementation:
// - get(), multi_get(), wait(), wait_for(), queue_pop() and barrier() block until their
//   condition holds ("the key exists" = it was set, added, appended, compare_set-created or
//   multi_set, and not deleted since; a non-empty queue of that name also counts) or
//   until the timeout (timeout() unless given) has passed, then throw StoreTimeoutError
//   naming the keys (wait_for() returns false instead). kNoTimeout waits forever.
// - Every other operation returns without waiting for other clients.
// - Keys and values are opaque byte strings; add() stores ASCII decimal.
class Store {
 public:
  using Duration = std::chrono::milliseconds;
  static constexpr Duration kDefaultTimeout{300'000};  // c10d's default
  static constexpr Duration kNoTimeout{0};

  virtual ~Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Stores or overwrites `key`; wakes everyone waiting for it.
  virtual void set(std::string_view key, std::string_view value) = 0;

  // c10d's compare_set: key missing and `expected` empty -> stores `desired`, returns it;
  // key missing and `expected` non-empty -> stores nothing, returns `expected`; key
  // present -> replaces iff the value equals `expected`; returns the value afterwards.
  virtual std::string compare_set(std::string_view key, std::string_view expected,
                                  std::string_view desired) = 0;

  // Blocks until `key` exists (see above), then returns its value.
  virtual std::string get(std::string_view key) = 0;

  // Adds `delta` to the ASCII-decimal value (missing = 0) and returns the new value.
  // When the value is not a decimal integer, in-process stores throw StoreProtocolError;
  // a TcpStore's server refuses by closing the connection, which the client cannot tell
  // from a store that went away: StoreConnectionError naming both (connection unusable).
  virtual std::int64_t add(std::string_view key, std::int64_t delta) = 0;

  // True iff every key exists now (true for an empty list). Never blocks.
  virtual bool check(const std::vector<std::string>& keys) = 0;

  // Blocks until every key exists, up to timeout() or `timeout`.
  void wait(const std::vector<std::string>& keys) { do_wait(keys, timeout()); }
  void wait(const std::vector<std::string>& keys, Duration timeout) { do_wait(keys, timeout); }

  // Like wait(), but running out of time is an answer, not an error: true once every key
  // exists, false when `timeout` passed first (the store stays usable). For loops that
  // wait in short slices and check something else in between. Every other failure
  // (connection, protocol) still throws.
  bool wait_for(const std::vector<std::string>& keys, Duration timeout) {
    return do_wait_for(keys, timeout);
  }

  // Number of keys (queues excluded).
  virtual std::int64_t num_keys() = 0;

  // Deletes `key`; true if it existed. Wakes nobody.
  virtual bool delete_key(std::string_view key) = 0;

  // Appends to the value, creating it when missing.
  virtual void append(std::string_view key, std::string_view value) = 0;

  // Blocks until every key exists, then returns their values in order.
  virtual std::vector<std::string> multi_get(const std::vector<std::string>& keys) = 0;

  // Sets keys[i] = values[i]. Throws std::invalid_argument when the sizes differ.
  virtual void multi_set(const std::vector<std::string>& keys,
                         const std::vector<std::string>& values) = 0;

  // Every key (queues excluded), in unspecified order.
  virtual std::vector<std::string> list_keys() = 0;

  // FIFO queues, a key space apart from keys (PyTorch 2.8+ libuv store semantics).
  virtual void queue_push(std::string_view key, std::string_view value) = 0;
  // Blocks until the queue `key` is non-empty, then pops its front.
  virtual std::string queue_pop(std::string_view key) = 0;
  // Pops the front, or nullopt at once when the queue is empty.
  virtual std::optional<std::string> queue_try_pop(std::string_view key) = 0;
  virtual std::int64_t queue_len(std::string_view key) = 0;

  // Adds 1 to the counter `key` and blocks until it has reached `world_size` (c10d's
  // BARRIER). On timeout the increment stays; throws StoreTimeoutError naming `key`.
  virtual void barrier(std::string_view key, std::int64_t world_size) = 0;

  // The timeout of blocking operations. Only this client's side; nothing is sent.
  virtual Duration timeout() const { return Duration(timeout_ms_.load()); }
  virtual void set_timeout(Duration timeout) { timeout_ms_.store(timeout.count()); }

 protected:
  explicit Store(Duration timeout = kDefaultTimeout) : timeout_ms_(timeout.count()) {}
  // wait_for(): true when every key exists within `timeout`, false when not.
  virtual bool do_wait_for(const std::vector<std::string>& keys, Duration timeout) = 0;
  // wait(): do_wait_for(), throwing StoreTimeoutError naming `keys` on false. A
  // decorator may override it to name the keys as its inner store knows them.
  virtual void do_wait(const std::vector<std::string>& keys, Duration timeout);

 private:
  std::atomic<Duration::rep> timeout_ms_;
};

// multi_set's argument check: throws std::invalid_argument unless the sizes are equal.
void check_multi_set_sizes(const std::vector<std::string>& keys,
                           const std::vector<std::string>& values);

// Shows bytes for humans: printable ASCII as is, `\` as `\\`, anything else as `\xNN`.
std::string escape_bytes(std::string_view bytes);

// The inverse of escape_bytes, for keys typed by a human (ddprun-store's commands):
// `\\` is one backslash, `\xNN` (two hex digits, either case) the byte NN, anything else
// itself. Throws std::invalid_argument naming the first other use of `\`.
std::string unescape_bytes(std::string_view text);

// "wait timed out after 300000 ms for keys: [a, b]" (keys escaped), the message of every
// StoreTimeoutError.
std::string timeout_message(std::string_view what, Store::Duration timeout,
                            const std::vector<std::string>& keys);

}  // namespace ddprun::store
