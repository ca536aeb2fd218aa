// etcd_board_reader.h: EtcdBoardReader, the read-only look at an etcd-v3 job's board
// (board_reader.h) for `ddprun status`: the run's `closed`, `job` and `state` keys
// (etcd_round.h), then one range read of the latest formed round's r<R>/view/<name>
// keys. Range reads only: no put, no lease, no watch. Made by make_board_reader()
// (registry.h) over a client of its own.
// Thread-safety: one thread at a time (as the client).
#pragma once

#include <string>

#include "rendezvous/board_reader.h"
#include "rendezvous/etcd/etcd_client.h"
#include "rendezvous/etcd/etcd_round.h"

namespace ddprun::rdzv {

class EtcdBoardReader final : public BoardReader {
 public:
  // `base`: the run's keys, "<prefix>/<run id>/".
  EtcdBoardReader(EtcdOptions options, std::string base);

  BoardSnapshot read(const std::string& name) override;
  std::string where() const override { return client_.where(); }

 private:
  EtcdClient client_;
  EtcdKeys keys_;
};

}  // namespace ddprun::rdzv
