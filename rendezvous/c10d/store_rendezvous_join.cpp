// store_rendezvous_join.cpp: how StoreRendezvous forms a round (next_rendezvous()), as
// named steps: leave the old round, take a slot, wait for the round to be closed,
// read the members, assign ranks, publish / learn the workers' store, enter the round.
// docs/multinode.md ("Rounds, elasticity and failures") tells the algorithm. The
// life cycle and the API while in a round are in store_rendezvous.cpp.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "rendezvous/c10d/keys.h"
#include "rendezvous/c10d/store_rendezvous.h"
#include "rendezvous/progress.h"
#include "rendezvous/published_address.h"
#include "rendezvous/rank_assignment.h"
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

RendezvousInfo StoreRendezvous::join(Clock::time_point deadline) {
  if (config_.round.job_check) check_same_job();  // before this node writes anything
  int r = first_round();
  watch_.clear();
  for (;; ++r) {
    throw_if_stopped();
    check_closed();
    if (now() >= deadline) {
      throw RendezvousTimeoutError(where() + ": no round formed within join_timeout");
    }
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
  if (!wait_for_descriptors(r, n, deadline)) {
    spdlog::warn("{}: a node of round {} never described itself; starting round {}", where(), r,
                 r + 1);
    leave_slot(r, slot);
    return std::nullopt;
  }
  std::vector<NodeDesc> descs = read_descs(r, n);
  const std::vector<int> ranks = group_ranks(descs);  // may throw RendezvousStateError
  RendezvousInfo info = round_layout(descs, ranks, slot);
  info.round = r;
  info.use_agent_store = config_.round.agent_store;
  // A loopback MASTER_ADDR would send remote workers to their own machine. Every node
  // decides from the same descriptors, before anything is published, so all refuse alike.
  const auto first = std::find(ranks.begin(), ranks.end(), 0) - ranks.begin();
  const std::string master_host = workers_store_host(descs[static_cast<std::size_t>(first)]);
  if (std::string why = loopback_master_error(master_host, descs, ranks); !why.empty()) {
    refuse_round(r, slot, n, why);
  }
  if (info.group_rank == 0) {
    publish_workers_store(r);
  } else {
    workers_store_.stop();  // another node hosts this round's workers' store
  }
  std::optional<Endpoint> master = await_workers_store(r, slot, deadline);
  if (!master) {
    const auto host = std::find(ranks.begin(), ranks.end(), 0) - ranks.begin();
    spdlog::warn(
        "{}: group rank 0 ({}) of round {} did not publish the workers' store; starting round {}",
        where(), descs[static_cast<std::size_t>(host)].label(), r, r + 1);
    leave_slot(r, slot);
    return std::nullopt;
  }
  std::string why;
  info.gloo_socket_ifname = gloo_interface(descs, slot, why);
  if (!info.gloo_socket_ifname.empty() && !gloo_warned_) {
    gloo_warned_ = true;
    spdlog::warn("{}: {}: the workers get GLOO_SOCKET_IFNAME={} (set it to choose another)",
                 where(), why, info.gloo_socket_ifname);
  }
  info.master_addr = master->host;
  info.master_port = static_cast<std::uint16_t>(master->port);
  enter_round(r, slot, std::move(descs), info);
  return info;
}

int StoreRendezvous::take_slot(int r) {
  const int slot = static_cast<int>(store_->add(keys::joined(r), 1)) - 1;
  store_->multi_set({keys::node(r, slot), keys::heartbeat(r, slot)},
                    {encode_node_desc(this_node_desc(config_.round, hosts_store(),
                                                     config_.node_rank_defaulted, restarts_spent_)),
                     "1"});
  spdlog::debug("{}: joined round {} in slot {}", where(), r, slot);
  return slot;
}

int StoreRendezvous::wait_for_final(int r, int slot, Clock::time_point deadline) {
  const std::string final_key = keys::final_size(r);
  std::optional<Clock::time_point> last_call_start;
  bool retired = r == 0;
  auto next_log = now() + config_.round.progress_interval;
  std::int64_t count = slot + 1;
  for (;;) {
    if (count >= config_.round.min_nodes) {
      if (!retired) retired = round_retired(r - 1);
      if (retired) {
        if (!last_call_start) last_call_start = now();
        if (count >= config_.round.max_nodes ||
            now() - *last_call_start >= config_.round.last_call_timeout) {
          std::int64_t n = std::min<std::int64_t>(count, config_.round.max_nodes);
          store_->compare_set(final_key, "", std::to_string(n));
        }
      }
    }
    if (store_->wait_for({final_key}, config_.poll_slice)) break;
    throw_if_stopped();
    check_closed();
    const auto t = now();
    if (t >= deadline) {
      count = store_->add(keys::joined(r), 0);
      // Our slot stays counted; the heartbeat key says we left, so no round waits for us.
      leave_slot(r, slot);
      throw RendezvousTimeoutError(where() + ": timed out after join_timeout " +
                                   std::to_string(config_.round.join_timeout.count() / 1000) +
                                   " s in round " + std::to_string(r) + " with " +
                                   std::to_string(count) + " of min " +
                                   std::to_string(config_.round.min_nodes) + " / max " +
                                   std::to_string(config_.round.max_nodes) + " nodes" +
                                   (retired ? "" : " (the previous round's nodes never left it)"));
    }
    if (t >= next_log) {
      log_progress(r, deadline, retired);
      next_log = t + config_.round.progress_interval;
    }
    count = store_->add(keys::joined(r), 0);
  }
  return keys::parse_count(store_->get(final_key), final_key);
}

bool StoreRendezvous::round_retired(int r) {
  if (r < 0) return true;
  if (!store_->check({keys::final_size(r)})) return true;  // never formed: nobody runs in it
  const int n = keys::parse_count(store_->get(keys::final_size(r)), keys::final_size(r));
  const auto asked = now();
  const std::vector<Member> members =
      watch_.observe(r, store_->multi_get(keys::heartbeats(r, n)), asked);
  return std::all_of(members.begin(), members.end(), [](Member m) { return m != Member::kAlive; });
}

void StoreRendezvous::log_progress(int r, Clock::time_point deadline, bool retired) {
  const std::int64_t joined = store_->add(keys::joined(r), 0);
  std::vector<std::string> present;
  for (int s = 0; s < joined; ++s) {
    if (store_->check({keys::node(r, s)})) present.push_back(keys::node(r, s));
    if (present.size() >= 64) break;  // enough for a log line
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
  // WARNING level on purpose: the agent's default level; a silent wait is what users
  // complain about most.
  spdlog::warn("{}: {}", where(), progress.line);
}

bool StoreRendezvous::wait_for_descriptors(int r, int n, Clock::time_point deadline) {
  // Every participant stores its descriptor right after its ADD, so this is short; a
  // joiner that died in between gets a heartbeat threshold.
  return poll_keys(keys::nodes(r, n),
                   std::min(deadline, now() + config_.round.heartbeat_threshold()));
}

std::vector<NodeDesc> StoreRendezvous::read_descs(int r, int n) {
  const std::vector<std::string> values = store_->multi_get(keys::nodes(r, n));
  std::vector<NodeDesc> out;
  for (int s = 0; s < n; ++s) {
    std::optional<NodeDesc> d = decode_node_desc(values[static_cast<std::size_t>(s)], s);
    if (!d) {
      throw RendezvousStateError(where() + ": corrupt node descriptor in round " +
                                 std::to_string(r) + " slot " + std::to_string(s) +
                                 " (is a non-ddprun agent using this run id?)");
    }
    out.push_back(std::move(*d));
  }
  // check_same_job() keeps other jobs out; this is what a merge would have been.
  check_member_jobs(out, r, config_.round, where());
  return out;
}

std::vector<int> StoreRendezvous::group_ranks(const std::vector<NodeDesc>& descs) {
  return group_ranks_or_throw(descs, config_.static_ranks, config_.round.max_nodes, where(),
                              node_rank_warned_);
}

void StoreRendezvous::refuse_round(int r, int slot, int n, const std::string& why) {
  leave_slot(r, slot);
  if (hosts_store()) {
    // The others refuse too, from the same descriptors: the store stays up until each
    // said so (or a heartbeat threshold passed), so they print this line, not "lost the
    // rendezvous store".
    const auto until = now() + config_.round.heartbeat_threshold();
    const auto all_left = [&] {
      const std::vector<std::string> beats = store_->multi_get(keys::heartbeats(r, n));
      return std::all_of(beats.begin(), beats.end(),
                         [](const std::string& b) { return b == keys::kLeft; });
    };
    while (now() < until && !all_left() && sleep_slice(config_.poll_slice)) {
    }
  }
  throw RendezvousStateError(where() + ": " + why);
}

std::string StoreRendezvous::workers_store_host(const NodeDesc& group_rank0) const {
  const bool shared = config_.round.agent_store && config_.shared_store_port > 0;
  return shared ? config_.shared_store_addr : group_rank0.addr;
}

void StoreRendezvous::publish_workers_store(int r) {
  NodeDesc me;
  me.addr = config_.round.advertise_addr;
  const std::string addr = workers_store_host(me);
  const std::uint16_t port = workers_store_port(
      config_.round, workers_store_, config_.shared_store_port, clear_worker_keys_, where());
  store_->set(keys::master(r), encode_workers_store(addr, port));
  store_->set(keys::kRound, std::to_string(r));
}

std::optional<Endpoint> StoreRendezvous::await_workers_store(int r, int slot,
                                                             Clock::time_point deadline) {
  const bool published =
      poll_keys({keys::master(r)}, std::min(deadline, now() + config_.round.heartbeat_threshold()),
                [&] { store_->add(keys::heartbeat(r, slot), 1); });
  if (!published) return std::nullopt;
  std::optional<Endpoint> master = decode_workers_store(store_->get(keys::master(r)));
  if (!master) {
    throw RendezvousStateError(where() + ": corrupt workers' store address for round " +
                               std::to_string(r));
  }
  return master;
}

void StoreRendezvous::enter_round(int r, int slot, std::vector<NodeDesc> descs,
                                  const RendezvousInfo& info) {
  in_round_ = true;
  exited_ = false;
  announced_ = false;
  round_ = r;
  slot_ = slot;
  nodes_ = static_cast<int>(descs.size());
  members_ = descs;
  spdlog::info(
      "{}: round {} complete: {} nodes, this node is group rank {} of {} (ranks {}..{} of {}); "
      "workers' store at {}",
      where(), r, nodes_, info.group_rank, nodes_, info.rank_base,
      info.rank_base + config_.round.local_world_size - 1, info.world_size,
      Endpoint{info.master_addr, info.master_port}.to_string());
  watch_.start(hb_store_, r, slot, std::move(descs));
}

void StoreRendezvous::leave_slot(int r, int slot) {
  store_->set(keys::heartbeat(r, slot), keys::kLeft);
}

bool StoreRendezvous::poll_keys(const std::vector<std::string>& keys, Clock::time_point until,
                                const std::function<void()>& between) {
  // Looks at least once, even when `until` has already passed (a thread that was
  // stopped or starved, or an injected clock that jumped, must not give up unseen).
  for (;;) {
    throw_if_stopped();
    if (store_->wait_for(keys, config_.poll_slice)) return true;
    if (now() >= until) return false;
    if (between) between();
  }
}

}  // namespace ddprun::rdzv
