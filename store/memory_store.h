// memory_store.h: MemoryStore, the in-process Store: one KvState behind a mutex, with a
// condition variable for the blocking operations. The reference semantics for the Store
// contract, the test double of the rendezvous and launcher tests, and the store of a
// single-node run. Thread-safety: every method may be called from any thread.
#pragma once

#include <condition_variable>
#include <mutex>
#include <unordered_set>

#include "store/core/kv_state.h"
#include "store/store.h"

namespace ddprun::store {

class MemoryStore final : public Store {
 public:
  explicit MemoryStore(Duration timeout = kDefaultTimeout);
  ~MemoryStore() override;

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
  // Blocks (mu_ held through `lock`) until `ready()` or `timeout`; false on timeout.
  template <class Pred>
  bool wait_until_ready(std::unique_lock<std::mutex>& lock, Duration timeout, Pred ready);
  // Records what a mutation released and wakes every blocked caller. REQUIRES mu_ held.
  void publish();

  std::mutex mu_;
  std::condition_variable changed_;
  KvState kv_;                                      // guarded by mu_
  KvState::Effects fx_;                             // guarded by mu_
  std::unordered_set<KvState::ClientId> released_;  // barrier calls released; guarded by mu_
  KvState::ClientId next_id_ = 1;                   // guarded by mu_
};

}  // namespace ddprun::store
