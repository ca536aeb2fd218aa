// kv_state.h: the in-memory state of a c10d store with c10d semantics and no I/O: keys,
// values, queues, pending WAIT/BARRIER registrations and WATCH_KEY watchers. Mutations
// report the waits they released and the watch notifications to push; the caller (the
// server's loop, or MemoryStore) turns those into bytes. Keys and values are opaque bytes.
// Thread-safety: none. Single-threaded by contract; TcpStoreServer owns one on its io
// thread and MemoryStore guards its own with a mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::store {

class KvState {
 public:
  // A client (one connection). Opaque to KvState: never an fd or a pointer.
  using ClientId = std::uint64_t;

  struct Notification {  // one legacy WATCH_KEY push: kind, key, old value, new value
    enum class Kind : std::uint8_t { kUpdated, kCreated, kDeleted };  // handler.cpp: wire bytes
    ClientId watcher;
    Kind kind;
    std::string key;
    std::string old_value;
    std::string new_value;
  };
  // What a mutation caused. Each entry of `released` stands for exactly one pending
  // WAIT or BARRIER that is now complete: the caller sends one `00` to that client per
  // entry (a client may appear twice if it had two registrations, as 1.13 clients that
  // timed out do). Callers clear() it between requests or let it accumulate.
  struct Effects {
    std::vector<ClientId> released;
    std::vector<Notification> notifications;
    void clear() {
      released.clear();
      notifications.clear();
    }
  };

  enum class WaitResult : std::uint8_t { kReady, kPending };

  KvState();
  ~KvState();
  KvState(const KvState&) = delete;
  KvState& operator=(const KvState&) = delete;

  // SET: store or overwrite; releases waiters on the key.
  void set(std::string_view key, std::string value, Effects& fx);

  // COMPARE_SET with c10d's quirks: key missing and `expected` empty -> store `desired`,
  // return it; key missing and `expected` non-empty -> store nothing, return `expected`;
  // key present -> replace iff the current value equals `expected`; return the current
  // value after any replacement. A created or changed key releases waiters (as PyTorch's
  // libuv server does; 1.13 did not, which only ever delayed a waiter).
  std::string compare_set(std::string_view key, std::string_view expected, std::string desired,
                          Effects& fx);

  // GET: the value, or nullptr when the key is missing (the server answers an empty
  // value, as the libuv server does). The pointer is valid until the next mutation.
  const std::string* get(std::string_view key) const;
  // The value as a handle that stays valid and unchanged however the key changes later
  // (a reply sent in pieces holds it); nullptr when the key is missing.
  std::shared_ptr<const std::string> value_handle(std::string_view key) const;

  // ADD: value parsed as ASCII decimal (missing = 0), plus delta, stored back as ASCII
  // decimal; returns the new value. Returns nullopt and sets `error` (one line) when the
  // current value is not a decimal integer or the sum overflows; nothing is changed.
  std::optional<std::int64_t> add(std::string_view key, std::int64_t delta, Effects& fx,
                                  std::string& error);

  // CHECK: true iff every key exists (a non-empty queue of that name counts); true for
  // an empty list.
  bool check(const std::vector<std::string>& keys) const;

  // WAIT: kReady if every key exists now (nothing is registered); otherwise registers one
  // pending wait for `who` that a later mutation reports in Effects::released exactly once.
  // Each missing key counts once per occurrence (duplicates count twice).
  WaitResult wait(const std::vector<std::string>& keys, ClientId who);

  // CANCEL_WAIT: drops every pending WAIT and BARRIER registration of `who`. Returns
  // whether any was pending. The server answers WAIT_CANCELED either way.
  bool cancel_wait(ClientId who);

  // Connection closed: drops its waits, barrier registrations and watches.
  void forget(ClientId who);

  // GETNUMKEYS: number of keys (queues are not counted).
  std::int64_t num_keys() const;

  // DELETE_KEY: true if the key existed. Releases nobody.
  bool erase(std::string_view key, Effects& fx);

  // APPEND: appends to the value, creating it when missing; releases waiters.
  void append(std::string_view key, std::string_view data, Effects& fx);

  // MULTI_GET: values in order (missing keys give empty values).
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) const;

  // MULTI_SET: sets keys[i] = values[i] in order. REQUIRES keys.size() == values.size().
  void multi_set(const std::vector<std::string>& keys, std::vector<std::string> values,
                 Effects& fx);

  // WATCH_KEY (legacy only): `who` gets a Notification for every later change of `key`
  // until forget(who).
  void watch(std::string_view key, ClientId who);

  // QUEUE_PUSH: appends to the queue `key`; releases one pending wait on `key` at most.
  void queue_push(std::string_view key, std::string value, Effects& fx);
  // QUEUE_POP: the queue's length before the pop, and the popped value if it was > 0.
  std::int64_t queue_pop(std::string_view key, std::string& value);
  // The value QUEUE_POP would return now; nullptr when the queue is empty or missing.
  // The pointer is valid until the next mutation.
  const std::string* queue_front(std::string_view key) const;
  // QUEUE_LEN
  std::int64_t queue_len(std::string_view key) const;

  // LIST_KEYS: every key (queues not included), in unspecified order.
  std::vector<std::string> list_keys() const;

  // BARRIER: adds 1 to the ASCII-decimal counter at `key` (like add()). If the count has
  // reached `world_size`, returns kReady and releases every client pending in a BARRIER on
  // `key`; otherwise registers `who` as pending on it. A world size <= 0 or a non-numeric
  // counter is an error (nullopt, `error` set, nothing changed).
  std::optional<WaitResult> barrier(std::string_view key, std::int64_t world_size, ClientId who,
                                    Effects& fx, std::string& error);

  // Drops every key, queue, registration and watcher (a fresh key space).
  void clear();

  // Introspection for tests and metrics.
  std::size_t pending_waits() const;
  // An estimate of the bytes given up so far by deleted keys, popped queue items and
  // clear() (never decreases). The server returns freed memory to the OS when this has
  // grown enough (malloc_trim), not after every request.
  std::uint64_t freed_bytes() const { return freed_bytes_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;  // a pimpl keeps the map types out of every includer
  std::uint64_t freed_bytes_ = 0;
};

}  // namespace ddprun::store
