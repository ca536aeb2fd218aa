// store_job_board.h: StoreJobBoard, the job-wide channel (job_board.h) of the static and
// c10d backends: keys r<r>/view/<name> of the rendezvous store (keys.h). Made by
// StoreRendezvous for each round it forms, over its agent-thread connection.
// Thread-safety: the agent thread only (as the connection).
#pragma once

#include <memory>

#include "rendezvous/job_board.h"
#include "store/store.h"

namespace ddprun::rdzv {

class StoreJobBoard final : public JobBoard {
 public:
  // `store` is the agent thread's connection to the rendezvous store; `where` names the
  // rendezvous in errors.
  StoreJobBoard(std::shared_ptr<store::Store> store, int round, int node, int nodes,
                std::string where);

  int node() const override { return node_; }
  int nodes() const override { return nodes_; }
  std::int64_t add(const std::string& name, std::int64_t delta) override;
  // The mark is the ADD counter itself.
  std::int64_t bump(const std::string& name) override { return add(name, 1); }
  std::int64_t mark(const std::string& name) override { return add(name, 0); }
  void set(const std::string& name, const std::string& value) override;
  std::string set_once(const std::string& name, const std::string& value) override;
  std::vector<std::optional<std::string>> get(const std::vector<std::string>& names,
                                              std::chrono::milliseconds timeout) override;

 private:
  std::string key(const std::string& name) const;
  // Runs a store call; a store error becomes a RendezvousConnectionError naming `where_`.
  template <typename F>
  auto call(const char* what, F&& f);

  std::shared_ptr<store::Store> store_;
  int round_;
  int node_;
  int nodes_;
  std::string where_;
};

}  // namespace ddprun::rdzv
