// etcd_job_board.h: EtcdJobBoard, the job-wide channel (job_board.h) of the etcd-v3
// backend: keys <prefix>/<run id>/r<R>/view/<name>, without a lease (they outlive a
// node that dies). Counters are the key's mod revision (a put is an add: the value
// changes whenever a node adds); set_once is a transaction on the key's creation; a
// wait polls the round's view/ keys in one range read every 100 ms. Made by
// EtcdRendezvous for each round it forms, over its agent-thread client.
// Thread-safety: the agent thread only (as the client).
#pragma once

#include <string>

#include "rendezvous/etcd/etcd_client.h"
#include "rendezvous/etcd/etcd_round.h"
#include "rendezvous/job_board.h"

namespace ddprun::rdzv {

class EtcdJobBoard final : public JobBoard {
 public:
  EtcdJobBoard(EtcdClient& client, const EtcdKeys& keys, int round, int node, int nodes);

  int node() const override { return node_; }
  int nodes() const override { return nodes_; }
  // delta > 0: one put; returns the key's mod revision (0: never added).
  std::int64_t add(const std::string& name, std::int64_t delta) override;
  void set(const std::string& name, const std::string& value) override;
  std::string set_once(const std::string& name, const std::string& value) override;
  std::vector<std::optional<std::string>> get(const std::vector<std::string>& names,
                                              std::chrono::milliseconds timeout) override;

 private:
  EtcdClient& client_;
  std::string prefix_;  // ".../r<R>/view/"
  int node_;
  int nodes_;
};

}  // namespace ddprun::rdzv
