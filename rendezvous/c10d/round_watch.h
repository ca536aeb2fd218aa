// round_watch.h: RoundWatch, StoreRendezvous's eye on the round it is in: a thread that
// beats this node's heartbeat, watches its successor's (slot s watches s+1 mod N, past
// members that are done: a dead node's nearest live predecessor sees it), reads the
// round's one r<r>/broken key and the next round's joiners, and keeps the verdict (leave
// the round, with the first reason). A constant number of store requests per tick,
// whatever N. Thread-safety: start/stop/look_now/clear from the owner's thread;
// observe(), needs_new_round(), waiting() and reason() from any thread.
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

  // How often the thread wakes (to beat when due, and to look at the round): at most
  // keep_alive_interval, 1 s for up to 256 nodes, longer for more (4 s from 1024).
  static Ms tick(Ms keep_alive_interval, int max_nodes = 1);
  // The liveness judge of every look at this pace: silent for keep_alive_interval x
  // keep_alive_max_attempt of observed time is dead; more than two ticks between two
  // looks is time the observer was blind.
  static Liveness judge(Ms keep_alive_interval, int keep_alive_max_attempt, int max_nodes);
  // The fence: the silence (nothing acknowledged) after which a node's connections to the
  // store give up (TcpStoreOptions::silent_peer_timeout) and the node is cut off:
  // keep_alive_interval x (keep_alive_max_attempt - 1) - tick - 1 s, 1 s at least, so
  // that it stops its workers before its peers can declare it dead.
  static Ms fence(Ms keep_alive_interval, int keep_alive_max_attempt, int max_nodes = 1);
  // How many successors one look reads at most (skipping those that are done).
  static constexpr int kLookAhead = 4;

  // Starts the thread for round `round` of `nodes` members, in which this node holds
  // `slot`. `store` is the thread's own connection. A store error ends the thread with
  // the verdict "lost the rendezvous store: ...".
  void start(std::shared_ptr<store::Store> store, int round, int slot, int nodes);
  // Stops and joins the thread (it beats no more). Idempotent.
  void stop();

  // One look now through `store` (the owner's connection), as the thread's looks; for a
  // verdict that cannot wait for the next tick, and for the exit barrier (where nodes
  // waiting to join do not end the round: `count_waiting` false). Throws
  // store::StoreError.
  void look_now(store::Store& store, bool count_waiting = true);
  // The store was lost: the round must be left, for `why`.
  void fail(const std::string& why);
  // The store went silent past the fence (store::StoreSilentError `why`): the round goes
  // on without this node (is_cut_off()).
  void cut_off(const std::string& why);
  // A new round begins: no verdict, nobody waiting.
  void clear();

  // The liveness of round `round`'s heartbeat `values` (every slot), read at `asked`, as
  // seen together with the earlier such looks (the exit barrier's host, the joiner
  // waiting for the previous round to end).
  std::vector<Member> observe(int round, const std::vector<std::string>& values,
                              Clock::time_point asked);

  // How messages name slot `slot` of round `round`: its descriptor's label, read now
  // (only on the paths that name a node), or "in slot N" when it cannot be read.
  static std::string member_label(store::Store& s, int round, int slot);
  // Counts slot `slot` of round `round` out (left, done or dead) once, whoever asks
  // first (the slot itself, or the node that found it dead).
  static void count_out(store::Store& s, int round, int slot);
  // Ends round `round` for every member for `why`, unless an earlier reason did; returns
  // the round's reason.
  static std::string break_round(store::Store& s, int round, const std::string& why);

  bool needs_new_round() const { return needs_new_round_.load(); }
  // The store stayed silent past the fence (reason() says so): the round goes on without
  // this node, which must not use the store again.
  bool is_cut_off() const { return cut_off_.load(); }
  // Nodes waiting for the next round that the current one has room for.
  int waiting() const { return waiting_.load(); }
  std::string reason() const;  // the first reason for a new round, "" while none

 private:
  void run();
  Liveness judge() const;  // judge() at this watch's settings
  // One look through `s`: updates the successor's liveness, waiting_ and the verdict;
  // returns the reason for a new round, "" if none.
  std::string look(store::Store& s, bool count_waiting);
  // The reason this node found in its successors ("" = none), advancing past those
  // that are done.
  std::string look_at_successors(store::Store& s);

  const Settings settings_;
  // The round being watched: written by start() before the thread starts.
  int round_ = -1;
  int slot_ = 0;
  int nodes_ = 0;
  std::mutex look_mu_;                   // one look at a time (thread, owner)
  int successor_ = 0;                    // guarded by look_mu_: the slot watched
                                         // (== slot_: every other member is done)
  std::shared_ptr<store::Store> store_;  // the thread's connection

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;   // guarded by mu_
  Liveness liveness_;   // guarded by mu_: observe()
  Liveness watched_;    // guarded by mu_: the successor's heartbeat
  std::string reason_;  // guarded by mu_
  std::thread thread_;
  std::atomic<int> waiting_{0};
  std::atomic<bool> needs_new_round_{false};
  std::atomic<bool> cut_off_{false};
};

}  // namespace ddprun::rdzv
