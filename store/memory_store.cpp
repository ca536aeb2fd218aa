// memory_store.cpp: MemoryStore. Plain waits never register in the KvState: a blocked
// caller re-checks its keys after every mutation (notify_all). Only barrier() registers,
// because the KvState decides who a BARRIER releases.
#include "store/memory_store.h"

namespace ddprun::store {

MemoryStore::MemoryStore(Duration timeout) : Store(timeout) {}
MemoryStore::~MemoryStore() = default;

template <class Pred>
bool MemoryStore::wait_until_ready(std::unique_lock<std::mutex>& lock, Duration timeout,
                                   Pred ready) {
  if (timeout == kNoTimeout) {
    changed_.wait(lock, ready);
    return true;
  }
  return changed_.wait_for(lock, timeout, ready);
}

void MemoryStore::publish() {
  for (KvState::ClientId id : fx_.released) released_.insert(id);
  fx_.clear();
  changed_.notify_all();
}

void MemoryStore::set(std::string_view key, std::string_view value) {
  std::lock_guard lock(mu_);
  kv_.set(key, std::string(value), fx_);
  publish();
}

std::string MemoryStore::compare_set(std::string_view key, std::string_view expected,
                                     std::string_view desired) {
  std::lock_guard lock(mu_);
  std::string result = kv_.compare_set(key, expected, std::string(desired), fx_);
  publish();
  return result;
}

std::string MemoryStore::get(std::string_view key) {
  std::vector<std::string> keys{std::string(key)};
  std::unique_lock lock(mu_);
  Duration limit = timeout();
  if (!wait_until_ready(lock, limit, [&] { return kv_.check(keys); })) {
    throw StoreTimeoutError(timeout_message("get", limit, keys));
  }
  const std::string* value = kv_.get(key);
  return value != nullptr ? *value : std::string();  // a queue of that name: empty, as TCP
}

std::int64_t MemoryStore::add(std::string_view key, std::int64_t delta) {
  std::lock_guard lock(mu_);
  std::string error;
  std::optional<std::int64_t> result = kv_.add(key, delta, fx_, error);
  publish();
  if (!result) throw StoreProtocolError("add: " + error);
  return *result;
}

bool MemoryStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mu_);
  return kv_.check(keys);
}

bool MemoryStore::do_wait_for(const std::vector<std::string>& keys, Duration timeout) {
  std::unique_lock lock(mu_);
  return wait_until_ready(lock, timeout, [&] { return kv_.check(keys); });
}

std::int64_t MemoryStore::num_keys() {
  std::lock_guard lock(mu_);
  return kv_.num_keys();
}

bool MemoryStore::delete_key(std::string_view key) {
  std::lock_guard lock(mu_);
  bool existed = kv_.erase(key, fx_);
  publish();
  return existed;
}

void MemoryStore::append(std::string_view key, std::string_view value) {
  std::lock_guard lock(mu_);
  kv_.append(key, value, fx_);
  publish();
}

std::vector<std::string> MemoryStore::multi_get(const std::vector<std::string>& keys) {
  std::unique_lock lock(mu_);
  Duration limit = timeout();
  if (!wait_until_ready(lock, limit, [&] { return kv_.check(keys); })) {
    throw StoreTimeoutError(timeout_message("multi_get", limit, keys));
  }
  return kv_.multi_get(keys);
}

void MemoryStore::multi_set(const std::vector<std::string>& keys,
                            const std::vector<std::string>& values) {
  check_multi_set_sizes(keys, values);
  std::lock_guard lock(mu_);
  kv_.multi_set(keys, values, fx_);
  publish();
}

std::vector<std::string> MemoryStore::list_keys() {
  std::lock_guard lock(mu_);
  return kv_.list_keys();
}

void MemoryStore::queue_push(std::string_view key, std::string_view value) {
  std::lock_guard lock(mu_);
  kv_.queue_push(key, std::string(value), fx_);
  publish();
}

std::string MemoryStore::queue_pop(std::string_view key) {
  std::unique_lock lock(mu_);
  Duration limit = timeout();
  std::string value;
  // Re-checks the length under the lock: another popper may have taken the item.
  if (!wait_until_ready(lock, limit, [&] { return kv_.queue_len(key) > 0; })) {
    throw StoreTimeoutError(timeout_message("queue_pop", limit, {std::string(key)}));
  }
  kv_.queue_pop(key, value);
  return value;
}

std::optional<std::string> MemoryStore::queue_try_pop(std::string_view key) {
  std::lock_guard lock(mu_);
  std::string value;
  if (kv_.queue_pop(key, value) == 0) return std::nullopt;
  return value;
}

std::int64_t MemoryStore::queue_len(std::string_view key) {
  std::lock_guard lock(mu_);
  return kv_.queue_len(key);
}

void MemoryStore::barrier(std::string_view key, std::int64_t world_size) {
  std::unique_lock lock(mu_);
  KvState::ClientId id = next_id_++;
  std::string error;
  std::optional<KvState::WaitResult> result = kv_.barrier(key, world_size, id, fx_, error);
  publish();
  if (!result) throw StoreProtocolError("barrier: " + error);
  if (*result == KvState::WaitResult::kReady) return;
  Duration limit = timeout();
  if (!wait_until_ready(lock, limit, [&] { return released_.count(id) != 0; })) {
    kv_.cancel_wait(id);
    throw StoreTimeoutError(timeout_message("barrier", limit, {std::string(key)}));
  }
  released_.erase(id);
}

}  // namespace ddprun::store
