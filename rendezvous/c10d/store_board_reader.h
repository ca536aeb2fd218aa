// store_board_reader.h: StoreBoardReader, the read-only look at a static or c10d job's
// board (board_reader.h) for `ddprun status`: the run's keys in the rendezvous store
// (keys.h: `closed`, `job`, the `round` hint, r<R>/final, r<R>/view/<name>), read with
// CHECK before any GET (a GET of a missing key would block) and one MULTI_GET for the
// values there. Made by make_board_reader() (registry.h) over a connection of its own
// (connect_rendezvous_reader, tcp_rendezvous_store.h).
// Thread-safety: one thread at a time (as the connection).
#pragma once

#include <memory>
#include <string>

#include "rendezvous/board_reader.h"
#include "store/store.h"

namespace ddprun::rdzv {

class StoreBoardReader final : public BoardReader {
 public:
  // `store`: the run's key space (kRdzvKeyPrefix + run id); `where` names the store in
  // errors ("c10d at host:port").
  StoreBoardReader(std::shared_ptr<store::Store> store, std::string where);

  BoardSnapshot read(const std::string& name) override;
  std::string where() const override { return where_; }

 private:
  // The value of `key`, or nullopt without a GET when it is not set.
  std::optional<std::string> value_of(const std::string& key);

  std::shared_ptr<store::Store> store_;
  std::string where_;
};

}  // namespace ddprun::rdzv
