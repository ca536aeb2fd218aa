// store_job_board.cpp: StoreJobBoard (store_job_board.h) over the rendezvous store.
#include "rendezvous/c10d/store_job_board.h"

#include <utility>

#include "rendezvous/c10d/keys.h"
#include "rendezvous/rendezvous.h"

namespace ddprun::rdzv {

StoreJobBoard::StoreJobBoard(std::shared_ptr<store::Store> store, int round, int node, int nodes,
                             std::string where)
    : store_(std::move(store)),
      round_(round),
      node_(node),
      nodes_(nodes),
      where_(std::move(where)) {}

std::string StoreJobBoard::key(const std::string& name) const { return keys::view(round_, name); }

template <typename F>
auto StoreJobBoard::call(const char* what, F&& f) {
  try {
    return f();
  } catch (const store::StoreError& e) {
    throw RendezvousConnectionError(where_ + ": the job-wide view could not " + what + ": " +
                                    e.what());
  }
}

std::int64_t StoreJobBoard::add(const std::string& name, std::int64_t delta) {
  return call("add", [&] { return store_->add(key(name), delta); });
}

void StoreJobBoard::set(const std::string& name, const std::string& value) {
  call("set", [&] { store_->set(key(name), value); });
}

std::string StoreJobBoard::set_once(const std::string& name, const std::string& value) {
  return call("set", [&] { return store_->compare_set(key(name), "", value); });
}

std::vector<std::optional<std::string>> StoreJobBoard::get(const std::vector<std::string>& names,
                                                           std::chrono::milliseconds timeout) {
  return call("read", [&] {
    std::vector<std::string> ks;
    ks.reserve(names.size());
    for (const std::string& n : names) ks.push_back(key(n));
    std::vector<std::optional<std::string>> out(names.size());
    if (ks.empty()) return out;
    // All there (the common case): one wait and one read. Else each key on its own.
    // (A zero timeout is the store's "forever": not waited for at all.)
    if (timeout.count() > 0 && store_->wait_for(ks, timeout)) {
      std::vector<std::string> values = store_->multi_get(ks);
      for (std::size_t i = 0; i < values.size() && i < out.size(); ++i)
        out[i] = std::move(values[i]);
      return out;
    }
    for (std::size_t i = 0; i < ks.size(); ++i) {
      if (store_->check({ks[i]})) out[i] = store_->get(ks[i]);
    }
    return out;
  });
}

}  // namespace ddprun::rdzv
