// store_rendezvous_join.cpp: how StoreRendezvous forms a round (next_rendezvous()), as
// named steps: leave the old round, take a slot, wait for the round to be closed; the
// round leader (slot 0) waits for the descriptors and publishes every slot's plan
// (layout_round); each member reads its own, publishes / learns the workers' store and
// enters the round.
// docs/multinode.md ("Rounds, elasticity and failures") tells the algorithm. The
// life cycle and the API while in a round are in store_rendezvous.cpp.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "rendezvous/c10d/keys.h"
#include "rendezvous/c10d/round_plan.h"
#include "rendezvous/c10d/store_rendezvous.h"
#include "rendezvous/progress.h"
#include "rendezvous/round_member.h"
#include "store/store.h"

namespace ddprun::rdzv {
void StoreRendezvous::check_same_job() {
  if (job_checked_) return;
  // One round trip: sets the key only where it is missing (the first agent of the run
  // id); an existing fingerprint is left as it is, so a refused node writes nothing.
  const std::string mine = job_fingerprint(config_.round.job_command);
  const std::string published = store_->compare_set(keys::kJob, "", mine);
  if (published != mine) {
    throw RendezvousStateError(another_job_error(where(), config_.round, published));
  }
  job_checked_ = true;
}

void StoreRendezvous::refuse_if_left_out() {
  // A node --preflight left out of this job, started again: refused before it joins a
  // round (else the running nodes would stop their workers to check it again). Only at
  // this agent's first join: an agent already in the job is never refused by it.
  if (left_out_checked_) return;
  const std::string& addr = config_.round.advertise_addr;
  if (!addr.empty() && store_->check({keys::left_out(addr)})) {
    throw RendezvousStateError(where() + ": this node (" + addr +
                               ") was left out of this job by the pre-flight check (" +
                               store_->get(keys::left_out(addr)) +
                               "); it does not rejoin it (--blocklist keeps it out of later jobs)");
  }
  left_out_checked_ = true;
}

void StoreRendezvous::leave_out(const std::string& address, const std::string& why) {
  if (store_ && !address.empty()) store_->set(keys::left_out(address), why);
}

RendezvousInfo StoreRendezvous::join(Clock::time_point deadline) {
  if (config_.round.job_check) check_same_job();  // before this node writes anything
  refuse_if_left_out();
  int r = first_round();
  watch_.clear();
  for (;; ++r) {
    throw_if_stopped();
    check_closed();
    if (now() >= deadline) throw join_timeout_error(r, std::nullopt);
    if (store_->check({keys::final_size(r)})) continue;  // formed (and running) without us
    if (std::optional<RendezvousInfo> info = try_round(r, deadline)) return std::move(*info);
  }
}

int StoreRendezvous::first_round() {
  if (in_round_) {
    // Leaving: peers of the old round see "left" and re-rendezvous too; waiters of the
    // next round treat this slot as gone.
    leave_slot(round_, slot_);
    in_round_ = false;
    return round_ + 1;
  }
  if (!store_->check({keys::kRound})) return 0;
  return keys::parse_count(store_->get(keys::kRound), keys::kRound);
}

std::optional<RendezvousInfo> StoreRendezvous::try_round(int r, Clock::time_point deadline) {
  const int slot = take_slot(r);
  joining_round_ = r;
  try {
    return try_slot(r, slot, deadline);
  } catch (const RendezvousInterruptedError&) {
    // As on a timeout: the slot stays counted, but its heartbeat says "left", so the
    // round's other nodes see at once that this node will not run in it.
    try {
      leave_slot(r, slot);
    } catch (const std::exception& e) {
      spdlog::debug("{}: could not announce leaving round {}: {}", where(), r, e.what());
    }
    throw;
  }
}

std::optional<RendezvousInfo> StoreRendezvous::try_slot(int r, int slot,
                                                        Clock::time_point deadline) {
  const int n = wait_for_final(r, slot, deadline);
  if (slot >= n) {
    spdlog::warn(
        "{}: round {} formed with {} nodes without this one (max {}); waiting for the next "
        "round",
        where(), r, n, config_.round.max_nodes);
    return std::nullopt;
  }
  // Peers start watching our heartbeat as soon as they return; beat now and while
  // waiting below, so a slow finish here never looks like a dead node.
  store_->add(keys::heartbeat(r, slot), 1);
  if (slot == 0) lead_round(r, n, deadline);
  // This slot's plan, from the round leader (slot 0), while the leader is alive.
  const Await planned = await_key(r, slot, keys::rank(r, slot), 0, deadline);
  if (planned != Await::kReady) {
    spdlog::warn("{}: the leader of round {} ({}) {}; starting round {}", where(), r,
                 RoundWatch::member_label(*store_, r, 0),
                 planned == Await::kLeft ? "left it" : "did not assign the ranks", r + 1);
    leave_slot(r, slot);
    return std::nullopt;
  }
  const std::string record = store_->get(keys::rank(r, slot));
  if (record == keys::kSeeRound) {
    if (store_->check({keys::refused(r)})) refuse_round(r, slot, n, store_->get(keys::refused(r)));
    const std::string why =
        store_->check({keys::broken(r)}) ? store_->get(keys::broken(r)) : "the round was abandoned";
    spdlog::warn("{}: {}; starting round {}", where(), why, r + 1);
    leave_slot(r, slot);
    return std::nullopt;
  }
  std::optional<SlotPlan> plan = decode_slot_plan(record);
  if (!plan) {
    throw RendezvousStateError(where() + ": corrupt rank assignment for round " +
                               std::to_string(r) + " slot " + std::to_string(slot) +
                               " (is a non-ddprun agent using this run id?)");
  }
  if (plan->note && !node_rank_warned()) warn_node_rank_ignored(store_->get(keys::note(r)));
  RendezvousInfo info = slot_info(*plan);
  info.round = r;
  info.use_agent_store = config_.round.agent_store;
  if (info.group_rank == 0) {
    if (slot != 0) publish_workers_store(r);  // the leader published it with the plans
  } else {
    workers_store_.stop();  // another node hosts this round's workers' store
  }
  // Where the workers' store is, once group rank 0 said, while it is alive.
  const Await published = await_key(r, slot, keys::master(r), plan->rank0_slot, deadline);
  if (published != Await::kReady) {
    spdlog::warn(
        "{}: group rank 0 ({}) of round {} did not publish the workers' store; starting round {}",
        where(), RoundWatch::member_label(*store_, r, plan->rank0_slot), r, r + 1);
    leave_slot(r, slot);
    return std::nullopt;
  }
  std::optional<Endpoint> master = decode_workers_store(store_->get(keys::master(r)));
  if (!master) {
    throw RendezvousStateError(where() + ": corrupt workers' store address for round " +
                               std::to_string(r));
  }
  info.gloo_socket_ifname = gloo_socket_ifname(*plan);
  info.node_address = config_.round.advertise_addr;
  info.master_addr = master->host;
  info.master_port = static_cast<std::uint16_t>(master->port);
  enter_round(r, slot, n, info);
  return info;
}

int StoreRendezvous::take_slot(int r) {
  const int slot = static_cast<int>(store_->add(keys::joined(r), 1)) - 1;
  store_->multi_set(
      {keys::node(r, slot), keys::heartbeat(r, slot)},
      {encode_node_desc(this_node_desc(config_.round, hosts_store(), config_.node_rank_defaulted,
                                       restarts_spent())),
       "1"});
  spdlog::debug("{}: joined round {} in slot {}", where(), r, slot);
  return slot;
}

int StoreRendezvous::wait_for_final(int r, int slot, Clock::time_point deadline) {
  const std::string final_key = keys::final_size(r);
  std::optional<Clock::time_point> last_call_start;
  bool retired = r == 0;
  auto next_log = now() + config_.round.progress_interval;
  int progress_lines = 0;
  // The counter, the closed flag and the previous round are looked at once per tick,
  // not every slice: a waiting agent costs the store a few requests a second.
  const Ms tick = RoundWatch::tick(config_.round.keep_alive_interval, config_.round.max_nodes);
  auto next_look = now() + tick;
  std::int64_t count = slot + 1;
  for (;;) {
    if (count >= config_.round.min_nodes) {
      if (!retired) retired = round_retired(r - 1, slot);
      if (retired) {
        if (!last_call_start) last_call_start = now();
        if (count >= config_.round.max_nodes ||
            now() - *last_call_start >= config_.round.last_call_timeout) {
          std::int64_t n = std::min<std::int64_t>(count, config_.round.max_nodes);
          store_->compare_set(final_key, "", std::to_string(n));
        }
      }
    }
    for (;;) {
      if (store_->wait_for({final_key}, config_.poll_slice)) {
        return keys::parse_count(store_->get(final_key), final_key);
      }
      throw_if_stopped();
      if (now() >= next_look || now() >= deadline) break;
    }
    next_look = now() + tick;
    check_closed();
    const auto t = now();
    if (t >= deadline) {
      count = store_->add(keys::joined(r), 0);
      // Our slot stays counted; the heartbeat key says we left, so no round waits for us.
      leave_slot(r, slot);
      throw join_timeout_error(r, count, retired ? "" : "the previous round's nodes never left it");
    }
    if (t >= next_log) {
      log_progress(r, deadline, retired, progress_lines++);
      next_log = t + config_.round.progress_interval;
    }
    count = store_->add(keys::joined(r), 0);
  }
}

bool StoreRendezvous::round_retired(int r, int next_slot) {
  if (r < 0) return true;
  if (!store_->check({keys::final_size(r)})) return true;  // never formed: nobody runs in it
  const int n = keys::parse_count(store_->get(keys::final_size(r)), keys::final_size(r));
  // Members count themselves out when they leave or finish, and the node that finds one
  // dead counts it: one counter read.
  if (store_->add(keys::out(r), 0) >= n) return true;
  // A member can die unseen (its watcher died too, or never looked): slot 0 of the next
  // round looks at every heartbeat once per heartbeat interval, the others (should slot
  // 0 be gone too) once per four heartbeat thresholds.
  const auto t = now();
  const Ms every =
      next_slot == 0 ? config_.round.keep_alive_interval : 4 * config_.round.heartbeat_threshold();
  if (last_scan_ && t - *last_scan_ < every) return false;
  last_scan_ = t;
  const std::vector<Member> members =
      watch_.observe(r, store_->multi_get(keys::heartbeats(r, n)), t);
  return std::all_of(members.begin(), members.end(), [](Member m) { return m != Member::kAlive; });
}

void StoreRendezvous::log_progress(int r, Clock::time_point deadline, bool retired, int nth) {
  const std::int64_t joined = store_->add(keys::joined(r), 0);
  // The first 64 descriptors, for the line: one look when all are there.
  std::vector<std::string> present =
      keys::nodes(r, static_cast<int>(std::min<std::int64_t>(joined, 64)));
  if (!store_->check(present)) {
    std::vector<std::string> some;
    for (const auto& k : present) {
      if (store_->check({k})) some.push_back(k);
    }
    present = std::move(some);
  }
  std::vector<NodeDesc> descs;
  for (const auto& v : store_->multi_get(present)) {
    if (std::optional<NodeDesc> d = decode_node_desc(v, 0)) descs.push_back(std::move(*d));
  }
  const ProgressInput in =
      progress_input(config_.round, r, joined, present.size(), std::move(descs), retired,
                     config_.static_ranks, deadline);
  const Progress progress = describe_progress(in);
  if (!progress.error.empty()) throw RendezvousStateError(where() + ": " + progress.error);
  // The first line at WARNING (the agent's default level: a silent wait is what users
  // complain about most), then one each 30 s; INFO between (progress_level).
  spdlog::log(progress_level(nth), "{}: {}", where(), progress.line);
}

void StoreRendezvous::lead_round(int r, int n, Clock::time_point deadline) {
  if (wait_for_descriptors(r, n, deadline)) {
    publish_plan(r, n);
    return;
  }
  // Every member starts over with this line.
  std::vector<std::string> rank_keys = keys::ranks(r, n);
  std::vector<std::string> values(static_cast<std::size_t>(n), keys::kSeeRound);
  rank_keys.push_back(keys::broken(r));
  values.push_back("a node of round " + std::to_string(r) + " never described itself");
  store_->multi_set(rank_keys, values);
}

bool StoreRendezvous::wait_for_descriptors(int r, int n, Clock::time_point deadline) {
  // Every participant stores its descriptor right after its ADD, so this is short on an
  // idle machine; under load it waits as long as descriptors keep arriving, and gives
  // up only after a heartbeat threshold without a new one (a joiner died in between).
  const std::vector<std::string> node_keys = keys::nodes(r, n);
  Liveness progress = progress_judge();
  const Ms tick = watch_tick();
  auto next_look = now();
  auto next_beat = now() + config_.round.keep_alive_interval;
  int present = 0;  // descriptors 0..present-1 are there
  constexpr int kChunk = 256;
  while (present < n) {
    const int chunk = std::min(kChunk, n - present);
    if (chunk > 1 && store_->check(std::vector<std::string>(node_keys.begin() + present,
                                                            node_keys.begin() + present + chunk))) {
      present += chunk;
    } else if (store_->wait_for({node_keys[static_cast<std::size_t>(present)]},
                                config_.poll_slice)) {
      ++present;
    }
    throw_if_stopped();
    // Beat and judge the progress by the clock, also while descriptors trickle in.
    const auto t = now();
    if (t >= next_beat) {
      store_->add(keys::heartbeat(r, 0), 1);
      next_beat = t + config_.round.keep_alive_interval;
    }
    if (present < n && t >= next_look) {
      next_look = t + tick;
      if (progress.observe(0, {std::to_string(present)}, t).front() == Member::kDead) return false;
    }
    if (present < n && t >= deadline) return false;
  }
  return true;
}

std::string StoreRendezvous::read_descriptors(int r, int n, std::vector<NodeDesc>& descs) {
  const std::vector<std::string> raw = store_->multi_get(keys::nodes(r, n));
  for (int s = 0; s < n; ++s) {
    std::optional<NodeDesc> d = decode_node_desc(raw[static_cast<std::size_t>(s)], s);
    if (!d) {
      return "corrupt node descriptor in round " + std::to_string(r) + " slot " +
             std::to_string(s) + " (is a non-ddprun agent using this run id?)";
    }
    descs.push_back(std::move(*d));
  }
  return {};
}

void StoreRendezvous::publish_plan(int r, int n) {
  std::vector<std::string> rank_keys = keys::ranks(r, n);
  std::vector<std::string> values(static_cast<std::size_t>(n), keys::kSeeRound);
  std::vector<NodeDesc> descs;
  std::string refused = read_descriptors(r, n, descs);
  RoundLayout plan;
  if (refused.empty()) {
    const bool shared = config_.round.agent_store && config_.shared_store_port > 0;
    plan = layout_round(descs, r, config_.round, config_.static_ranks,
                        shared ? config_.shared_store_addr : "");
    refused = plan.refused;
  }
  if (!refused.empty()) {
    rank_keys.push_back(keys::refused(r));
    values.push_back(refused);
    store_->multi_set(rank_keys, values);
    return;
  }
  for (int s = 0; s < n; ++s) {
    values[static_cast<std::size_t>(s)] = encode_slot_plan(plan.slots[static_cast<std::size_t>(s)]);
  }
  if (!plan.note.empty()) {
    rank_keys.push_back(keys::note(r));
    values.push_back(plan.note);
  }
  if (plan.slots[0].group_rank == 0) {
    // The leader is group rank 0 (the usual case: the store's host joins first and is
    // first in the automatic order): the workers' store goes out with the plans, and
    // the members' wait for it ends at once.
    rank_keys.push_back(keys::master(r));
    values.push_back(workers_store_address());
    rank_keys.push_back(keys::kRound);
    values.push_back(std::to_string(r));
  }
  store_->multi_set(rank_keys, values);
}

StoreRendezvous::Ms StoreRendezvous::watch_tick() const {
  return RoundWatch::tick(config_.round.keep_alive_interval, config_.round.max_nodes);
}

Liveness StoreRendezvous::progress_judge() const {
  return RoundWatch::judge(config_.round.keep_alive_interval, config_.round.keep_alive_max_attempt,
                           config_.round.max_nodes);
}

StoreRendezvous::Await StoreRendezvous::await_key(int r, int slot, const std::string& key,
                                                  int watched, Clock::time_point deadline) {
  // Looks at least once, even when `deadline` has already passed (a thread that was
  // stopped or starved, or an injected clock that jumped, must not give up unseen).
  Liveness progress = progress_judge();
  const Ms tick = watch_tick();
  auto next_look = now();
  auto next_beat = now() + config_.round.keep_alive_interval;
  for (;;) {
    if (store_->wait_for({key}, config_.poll_slice)) return Await::kReady;
    throw_if_stopped();
    const auto t = now();
    if (t >= deadline) return Await::kStalled;
    if (t >= next_beat && watched != slot) {
      store_->add(keys::heartbeat(r, slot), 1);
      next_beat = t + config_.round.keep_alive_interval;
    }
    if (t >= next_look && watched != slot) {
      next_look = t + tick;
      const Member m = progress.observe(0, {store_->get(keys::heartbeat(r, watched))}, t).front();
      if (m == Member::kLeft) return Await::kLeft;
      if (m == Member::kDead) return Await::kStalled;
    }
  }
}

void StoreRendezvous::refuse_round(int r, int slot, int n, const std::string& why) {
  leave_slot(r, slot);
  if (hosts_store()) {
    // The others refuse too, with the same text: the store stays up until each left
    // (or a heartbeat threshold passed), so they print this line, not "lost the
    // rendezvous store".
    const auto until = now() + config_.round.heartbeat_threshold();
    while (now() < until && store_->add(keys::out(r), 0) < n && sleep_slice(config_.poll_slice)) {
    }
  }
  throw RendezvousStateError(where() + ": " + why);
}

std::string StoreRendezvous::workers_store_address() {
  const bool shared = config_.round.agent_store && config_.shared_store_port > 0;
  const std::string addr = shared ? config_.shared_store_addr : config_.round.advertise_addr;
  const std::uint16_t port = workers_store_port(
      config_.round, workers_store_, config_.shared_store_port, clear_worker_keys_, where());
  return encode_workers_store(addr, port);
}

void StoreRendezvous::publish_workers_store(int r) {
  store_->multi_set({keys::master(r), keys::kRound}, {workers_store_address(), std::to_string(r)});
}

void StoreRendezvous::enter_round(int r, int slot, int n, const RendezvousInfo& info) {
  in_round_ = true;
  exited_ = false;
  announced_ = false;
  round_ = r;
  slot_ = slot;
  nodes_ = n;
  board_ = std::make_unique<StoreJobBoard>(store_, r, info.group_rank, n, where());
  log_round_formed(info);
  watch_.start(hb_store_, r, slot, n);
}

std::string StoreRendezvous::my_label(int slot) const {
  NodeDesc d = this_node_desc(config_.round, false);
  d.slot = slot;
  return d.label();
}

void StoreRendezvous::leave_slot(int r, int slot) {
  store_->set(keys::heartbeat(r, slot), keys::kLeft);
  RoundWatch::break_round(*store_, r,
                          "node " + my_label(slot) + " left round " + std::to_string(r));
  // A member of a formed round counts itself out (a slot past N is no member).
  const std::string final_key = keys::final_size(r);
  if (store_->check({final_key}) && slot < keys::parse_count(store_->get(final_key), final_key)) {
    RoundWatch::count_out(*store_, r, slot);
  }
}

}  // namespace ddprun::rdzv
