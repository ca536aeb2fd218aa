// round_member.cpp: the member-side steps StoreRendezvous and EtcdRendezvous share
// (round_member.h): descriptor, job checks, workers' store port, progress input.
#include "rendezvous/round_member.h"

#include <unistd.h>

#include "rendezvous/rendezvous.h"
#include "rendezvous/workers_store.h"

namespace ddprun::rdzv {

std::string rendezvous_where(const std::string& run_id, const std::string& detail) {
  return "rendezvous '" + run_id + "' (" + detail + ")";
}

long long secs_left(RoundConfig::Clock::time_point now, RoundConfig::Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::seconds>(deadline - now).count();
  return std::max<long long>(left, 0);
}

NodeDesc this_node_desc(const RoundConfig& c, bool rdzv_host, bool node_rank_defaulted,
                        int restarts) {
  NodeDesc d;
  d.addr = c.advertise_addr;
  d.host = c.hostname;
  d.pid = static_cast<long>(::getpid());
  d.node_rank = c.node_rank;
  d.node_rank_defaulted = node_rank_defaulted;
  d.nproc = c.local_world_size;
  d.restarts = restarts;
  d.rdzv_host = rdzv_host;
  if (c.job_check) d.job = job_fingerprint(c.job_command);
  return d;
}

std::string another_job_error(const std::string& where, const RoundConfig& c,
                              const std::string& published) {
  std::optional<std::vector<std::string>> theirs = decode_job_fingerprint(published);
  if (!theirs) {
    return where + ": corrupt job fingerprint '" + published +
           "' (is a non-ddprun agent using this run id?)";
  }
  return where + " belongs to another job: its nodes run `" + command_line(*theirs) +
         "`, this node would run `" + command_line(c.job_command) +
         "`; give each job its own --rdzv-id (the nodes of one job run the same program; its "
         "arguments may differ per node)";
}

std::string member_jobs_error(const std::vector<NodeDesc>& descs, int round, const RoundConfig& c) {
  if (!c.job_check) return {};
  const std::string mine = job_fingerprint(c.job_command);
  for (const NodeDesc& d : descs) {
    if (d.job && *d.job != mine) {
      return "node " + d.label() + " of round " + std::to_string(round) + " runs another job (" +
             *d.job + "), this node `" + command_line(c.job_command) + "`";
    }
  }
  return {};
}

std::uint16_t workers_store_port(const RoundConfig& c, WorkersStore& ws, int shared_store_port,
                                 const std::function<void()>& clear_shared,
                                 const std::string& where) {
  if (!c.agent_store) {
    // No agent store (USE_LIBUV=0): worker rank 0 hosts one on this port.
    return WorkersStore::port_for_worker_rank0(c.workers_port, c.bind_addr);
  }
  if (shared_store_port > 0) {
    // The workers share the rendezvous store: never reset it (the rendezvous keys live
    // there). The round number in 1.13 workers' key prefix separates the attempts;
    // newer workers do not prefix, so earlier workers' keys are erased.
    if (clear_shared) clear_shared();
    return static_cast<std::uint16_t>(shared_store_port);
  }
  // Emptied before anyone can learn its address for this round, so no worker of this
  // attempt sees a key of an earlier one.
  try {
    return ws.open_attempt(c.bind_addr, static_cast<std::uint16_t>(c.workers_port));
  } catch (const RendezvousError& e) {
    throw RendezvousError(where + ": " + e.what());
  }
}

ProgressInput progress_input(const RoundConfig& c, int round, std::int64_t joined,
                             std::size_t described, std::vector<NodeDesc> descs, bool retired,
                             bool static_ranks, RoundConfig::Clock::time_point deadline) {
  ProgressInput in;
  in.round = round;
  in.joined = joined;
  in.described = described;
  in.descs = std::move(descs);
  in.retired = retired;
  in.min_nodes = c.min_nodes;
  in.max_nodes = c.max_nodes;
  in.static_ranks = static_ranks;
  in.secs_left = secs_left(c.now ? c.now() : RoundConfig::Clock::now(), deadline);
  return in;
}

}  // namespace ddprun::rdzv
