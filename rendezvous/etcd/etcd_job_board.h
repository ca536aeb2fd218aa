// etcd_job_board.h: EtcdJobBoard, the job-wide channel (job_board.h) of the etcd-v3
// backend: keys <prefix>/<run id>/r<R>/view/<name>, without a lease (they outlive a
// node that dies). A counter is a decimal value compared-and-swapped on its mod revision; a
// mark is the key's mod revision (a put); set_once is a transaction on the key's creation;
// a wait polls the round's view/ keys in one range read every 100 ms. Made by
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
  // A decimal value compared-and-swapped on its mod revision (a read, then a transaction,
  // again while another node's add won the race); delta 0: one read.
  std::int64_t add(const std::string& name, std::int64_t delta) override;
  // One put; the mark is the key's mod revision (etcd's revision after the put).
  std::int64_t bump(const std::string& name) override;
  std::int64_t mark(const std::string& name) override;
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
