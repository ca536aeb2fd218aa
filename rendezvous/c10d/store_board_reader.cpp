// store_board_reader.cpp: StoreBoardReader (store_board_reader.h).
#include "rendezvous/c10d/store_board_reader.h"

#include <utility>
#include <vector>

#include "rendezvous/c10d/keys.h"
#include "rendezvous/rendezvous.h"

namespace ddprun::rdzv {

StoreBoardReader::StoreBoardReader(std::shared_ptr<store::Store> store, std::string where)
    : store_(std::move(store)), where_(std::move(where)) {}

std::optional<std::string> StoreBoardReader::value_of(const std::string& key) {
  if (!store_->check({key})) return std::nullopt;
  return store_->get(key);  // set keys are never erased: the GET does not wait
}

BoardSnapshot StoreBoardReader::read(const std::string& name) {
  try {
    BoardSnapshot s;
    if (auto closed = value_of(keys::kClosed)) {
      s.kind = BoardSnapshot::Kind::kClosed;
      s.closed = std::move(*closed);
      return s;
    }
    const std::optional<std::string> round = value_of(keys::kRound);
    if (!round) {
      s.kind =
          store_->check({keys::kJob}) ? BoardSnapshot::Kind::kForming : BoardSnapshot::Kind::kNoRun;
      return s;
    }
    s.round = keys::parse_count(*round, keys::kRound);
    const std::string final_key = keys::final_size(s.round);
    const std::optional<std::string> nodes = value_of(final_key);
    if (!nodes) {
      s.kind = BoardSnapshot::Kind::kForming;
      return s;
    }
    s.kind = BoardSnapshot::Kind::kRound;
    s.nodes = keys::parse_count(*nodes, final_key);
    s.values.resize(static_cast<std::size_t>(s.nodes));
    std::vector<std::string> there;
    std::vector<std::size_t> index;
    for (int n = 0; n < s.nodes; ++n) {
      std::string key = keys::view(s.round, name + std::to_string(n));
      if (!store_->check({key})) continue;
      there.push_back(std::move(key));
      index.push_back(static_cast<std::size_t>(n));
    }
    if (there.empty()) return s;
    std::vector<std::string> values = store_->multi_get(there);
    for (std::size_t i = 0; i < values.size() && i < index.size(); ++i) {
      s.values[index[i]] = std::move(values[i]);
    }
    return s;
  } catch (const store::StoreError& e) {
    throw RendezvousConnectionError(where_ + ": " + e.what());
  }
}

}  // namespace ddprun::rdzv
