// tcp_store_client.h: TcpStore, a blocking Store client of a TCPStore server (ours, or
// PyTorch 2.2+'s) speaking the modern dialect: VALIDATE + PING handshake, WAIT then GET,
// and PyTorch 2.x's CANCEL_WAIT protocol on timeouts. Used by the rendezvous and the
// launcher, and by `ddprun-store keys|get|set|...`.
// Thread-safety: all methods may be called from any thread; operations are serialized
// (one connection carries one operation at a time).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "store/store.h"

namespace ddprun::store {

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 29500;
  // Timeout of blocking operations (get, wait, ...), and the least time a reply to any
  // other request may take before the connection is given up.
  Store::Duration timeout = Store::kDefaultTimeout;
  // How long connecting (with retries, exponential backoff and jitter) may take in all;
  // kNoTimeout retries forever.
  Store::Duration connect_timeout = Store::kDefaultTimeout;
  // When set and wait_for_workers is true: after connecting, ADD "init/" 1 (as a c10d
  // client with a world size does), then block until "init/" reaches world_size.
  std::optional<std::int64_t> world_size;
  bool wait_for_workers = true;
  // When set, connecting gives up with StoreConnectionError ("cancelled") soon after
  // *cancel becomes true: it is read before every try and every 20 ms of a try's connect
  // and handshake waits and of the backoff between tries. For callers that must
  // stop on request (the rendezvous' interrupt()); the flag must outlive the constructor.
  const std::atomic<bool>* cancel = nullptr;
  // When > 0, the connection errs after this long with a silent server (a cut link, a
  // host gone without a reset), idle or not (base/silent_peer.h); 0: the kernel's
  // defaults, which notice an idle connection never.
  Store::Duration silent_peer_timeout{0};
};

// Keys are sent exactly as given. (PyTorch's Python TCPStore prepends "/" to every user
// key, so a PyTorch client's key "k" is "/k" here; ddprun's own users need no prefix.)
// After a connection error or a reply that timed out, the connection is closed and every
// later call throws StoreConnectionError; there is no automatic reconnect.
class TcpStore final : public Store {
 public:
  // Connects and handshakes. Throws StoreConnectionError naming host:port and the last
  // OS error (refused, timed out, name resolution) once connect_timeout has passed,
  // StoreProtocolError when the peer is not a modern-dialect store, StoreTimeoutError
  // when wait_for_workers runs past `timeout`.
  explicit TcpStore(TcpStoreOptions options);
  ~TcpStore() override;

  const TcpStoreOptions& options() const { return options_; }
  std::string address() const;  // "host:port"

  void set(std::string_view key, std::string_view value) override;
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired) override;
  std::string get(std::string_view key) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  std::int64_t num_keys() override;
  bool delete_key(std::string_view key) override;
  void append(std::string_view key, std::string_view value) override;
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override;
  void multi_set(const std::vector<std::string>& keys,
                 const std::vector<std::string>& values) override;
  std::vector<std::string> list_keys() override;
  void queue_push(std::string_view key, std::string_view value) override;
  std::string queue_pop(std::string_view key) override;
  std::optional<std::string> queue_try_pop(std::string_view key) override;
  std::int64_t queue_len(std::string_view key) override;
  void barrier(std::string_view key, std::int64_t world_size) override;

 protected:
  bool do_wait_for(const std::vector<std::string>& keys, Duration timeout) override;

 private:
  class Connection;
  // REQUIRES mu_. WAIT on `keys`, then await_release(): false when `timeout` passed.
  bool wait_locked(const std::vector<std::string>& keys, Duration timeout, const char* what);
  // REQUIRES mu_. Reads STOP_WAITING (true); on timeout runs the CANCEL_WAIT protocol,
  // which keeps the connection usable, and returns false (true when the release crossed
  // the cancel). `what` names the operation in protocol errors.
  bool await_release(Duration timeout, const char* what);
  // REQUIRES mu_. One QUEUE_POP: the value, or nullopt when the queue was empty.
  std::optional<std::string> pop_locked(std::string_view key, Duration limit);

  TcpStoreOptions options_;
  std::mutex mu_;                     // one operation at a time
  std::unique_ptr<Connection> conn_;  // guarded by mu_
};

}  // namespace ddprun::store
