// prefix_store.h: PrefixStore, a decorator that maps key k to `prefix + "/" + k` on
// another Store (like c10d's PrefixStore), so that users of one store keep apart.
// list_keys() keeps only the keys under the prefix and strips it. Queue names are
// prefixed too. Thread-safety: as the wrapped store.
#pragma once

#include <memory>

#include "store/store.h"

namespace ddprun::store {

class PrefixStore final : public Store {
 public:
  // REQUIRES: inner != nullptr.
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner);

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& inner() const { return inner_; }

  void set(std::string_view key, std::string_view value) override;
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired) override;
  std::string get(std::string_view key) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  std::int64_t num_keys() override;  // of the whole inner store, as c10d's
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

  // The timeout is the inner store's.
  Duration timeout() const override { return inner_->timeout(); }
  void set_timeout(Duration timeout) override { inner_->set_timeout(timeout); }

 protected:
  bool do_wait_for(const std::vector<std::string>& keys, Duration timeout) override;
  void do_wait(const std::vector<std::string>& keys, Duration timeout) override;

 private:
  std::string full(std::string_view key) const;
  std::vector<std::string> full(const std::vector<std::string>& keys) const;

  std::string prefix_;  // with the trailing "/"
  std::shared_ptr<Store> inner_;
};

}  // namespace ddprun::store
