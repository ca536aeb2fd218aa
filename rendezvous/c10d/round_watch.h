// round_watch.h: RoundWatch, StoreRendezvous's eye on the round it is in: a thread that
// beats this node's heartbeat and looks at the members' heartbeats and the next round's
// joiners, and the verdict it keeps (leave the round, with the first reason).
// Thread-safety: start/stop/look_now/clear from the owner's thread; observe(),
// needs_new_round(), waiting() and reason() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/c10d/liveness.h"
#include "rendezvous/round_codec.h"

namespace ddprun::store {
class Store;
}

namespace ddprun::rdzv {

class RoundWatch {
 public:
  using Clock = std::chrono::steady_clock;
  using Ms = std::chrono::milliseconds;

  struct Settings {
    std::string where;  // the rendezvous, for messages
    int max_nodes = 1;
    Ms keep_alive_interval{5'000};
    int keep_alive_max_attempt = 3;
    std::function<Clock::time_point()> now;  // the clock of the liveness verdicts
  };

  explicit RoundWatch(Settings settings);
  ~RoundWatch();  // stop()
  RoundWatch(const RoundWatch&) = delete;
  RoundWatch& operator=(const RoundWatch&) = delete;

  // How often the thread wakes (to beat when due, and to look at the others).
  static Ms tick(Ms keep_alive_interval);

  // Starts the thread for round `round`, in which this node holds `slot`; `members` are
  // the round's descriptors by slot. `store` is the thread's own connection. A store
  // error ends the thread with the verdict "lost the rendezvous store: ...".
  void start(std::shared_ptr<store::Store> store, int round, int slot,
             std::vector<NodeDesc> members);
  // Stops and joins the thread (it beats no more). Idempotent.
  void stop();

  // One look now through `store` (the owner's connection), as the thread's looks; for a
  // verdict that cannot wait for the next tick. Throws store::StoreError.
  void look_now(store::Store& store);
  // The store was lost: the round must be left, for `why`.
  void fail(const std::string& why);
  // A new round begins: no verdict, nobody waiting.
  void clear();

  // The liveness of round `round`'s heartbeat `values`, read at `asked`, as seen
  // together with every look of the thread (one Liveness per agent).
  std::vector<Member> observe(int round, const std::vector<std::string>& values,
                              Clock::time_point asked);

  bool needs_new_round() const { return needs_new_round_.load(); }
  // Nodes waiting for the next round that the current one has room for.
  int waiting() const { return waiting_.load(); }
  std::string reason() const;  // the first reason for a new round, "" while none

 private:
  void run();
  // One look through `s`: updates liveness, waiting_ and the verdict; returns the
  // reason for a new round, "" if none.
  std::string look(store::Store& s);

  const Settings settings_;
  // The round being watched: written by start() before the thread starts.
  int round_ = -1;
  int slot_ = 0;
  std::vector<NodeDesc> members_;
  std::shared_ptr<store::Store> store_;  // the thread's connection

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;   // guarded by mu_
  Liveness liveness_;   // guarded by mu_
  std::string reason_;  // guarded by mu_
  std::thread thread_;
  std::atomic<int> waiting_{0};
  std::atomic<bool> needs_new_round_{false};
};

}  // namespace ddprun::rdzv
