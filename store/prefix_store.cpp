// prefix_store.cpp: PrefixStore. Timeout errors come from the inner store and therefore
// name the full (prefixed) keys, which is what a user inspecting the store sees.
#include "store/prefix_store.h"

#include <utility>

namespace ddprun::store {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
    : prefix_(std::move(prefix) + "/"), inner_(std::move(inner)) {
  if (!inner_) throw std::invalid_argument("PrefixStore: no inner store");
}

std::string PrefixStore::full(std::string_view key) const {
  std::string out;
  out.reserve(prefix_.size() + key.size());
  out += prefix_;
  out += key;
  return out;
}

std::vector<std::string> PrefixStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const std::string& k : keys) out.push_back(full(k));
  return out;
}

void PrefixStore::set(std::string_view key, std::string_view value) {
  inner_->set(full(key), value);
}
std::string PrefixStore::compare_set(std::string_view key, std::string_view expected,
                                     std::string_view desired) {
  return inner_->compare_set(full(key), expected, desired);
}
std::string PrefixStore::get(std::string_view key) { return inner_->get(full(key)); }
std::int64_t PrefixStore::add(std::string_view key, std::int64_t delta) {
  return inner_->add(full(key), delta);
}
bool PrefixStore::check(const std::vector<std::string>& keys) { return inner_->check(full(keys)); }
bool PrefixStore::do_wait_for(const std::vector<std::string>& keys, Duration timeout) {
  return inner_->wait_for(full(keys), timeout);
}
void PrefixStore::do_wait(const std::vector<std::string>& keys, Duration timeout) {
  inner_->wait(full(keys), timeout);  // the timeout names the full keys
}
std::int64_t PrefixStore::num_keys() { return inner_->num_keys(); }
bool PrefixStore::delete_key(std::string_view key) { return inner_->delete_key(full(key)); }
void PrefixStore::append(std::string_view key, std::string_view value) {
  inner_->append(full(key), value);
}
std::vector<std::string> PrefixStore::multi_get(const std::vector<std::string>& keys) {
  return inner_->multi_get(full(keys));
}
void PrefixStore::multi_set(const std::vector<std::string>& keys,
                            const std::vector<std::string>& values) {
  inner_->multi_set(full(keys), values);
}
std::vector<std::string> PrefixStore::list_keys() {
  std::vector<std::string> out;
  for (std::string& k : inner_->list_keys()) {
    if (k.size() >= prefix_.size() && k.compare(0, prefix_.size(), prefix_) == 0) {
      out.push_back(k.substr(prefix_.size()));
    }
  }
  return out;
}
void PrefixStore::queue_push(std::string_view key, std::string_view value) {
  inner_->queue_push(full(key), value);
}
std::string PrefixStore::queue_pop(std::string_view key) { return inner_->queue_pop(full(key)); }
std::optional<std::string> PrefixStore::queue_try_pop(std::string_view key) {
  return inner_->queue_try_pop(full(key));
}
std::int64_t PrefixStore::queue_len(std::string_view key) { return inner_->queue_len(full(key)); }
void PrefixStore::barrier(std::string_view key, std::int64_t world_size) {
  inner_->barrier(full(key), world_size);
}

}  // namespace ddprun::store
