// round_member.h: what a node does as a member of a round, whichever backend forms it
// (StoreRendezvous for c10d/static, EtcdRendezvous for etcd-v3): its descriptor, the
// job checks and their one message, the workers' store port choice and the progress
// input. Table tests in tests/rendezvous/round_member_test.cpp. Thread-safety: functions
// of their arguments (workers_store_port uses the WorkersStore it is given).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rendezvous/progress.h"
#include "rendezvous/round_codec.h"
#include "rendezvous/round_config.h"

namespace ddprun::rdzv {

class WorkersStore;

// "rendezvous '<run id>' (<detail>)": how every message names the rendezvous.
std::string rendezvous_where(const std::string& run_id, const std::string& detail);

// Whole seconds from `now` to `deadline`, >= 0.
long long secs_left(RoundConfig::Clock::time_point now, RoundConfig::Clock::time_point deadline);

// This node's descriptor: address, host, pid, node rank, nproc, the restarts its agent
// has spent, and the job's fingerprint when job_check is on.
NodeDesc this_node_desc(const RoundConfig& c, bool rdzv_host, bool node_rank_defaulted = false,
                        int restarts = 0);

// The one message for "this run id is taken by another job": `published` is the
// fingerprint found under the run id (job_fingerprint's JSON). Returns the
// RendezvousStateError's text ("corrupt job fingerprint" when it does not decode).
std::string another_job_error(const std::string& where, const RoundConfig& c,
                              const std::string& published);

// Why round `round` must not run when job_check is on and a member's descriptor carries
// a fingerprint other than this node's (what a merge of two jobs would have been); ""
// when every member runs this job (or job_check is off).
std::string member_jobs_error(const std::vector<NodeDesc>& descs, int round, const RoundConfig& c);

// Group rank 0: the port its round's workers reach the workers' store on. No agent
// store: a free port for worker rank 0 to host one on; `shared_store_port` > 0 (static,
// the workers share the rendezvous store): that port, after `clear_shared` (which erases
// earlier attempts' worker keys); else `ws` (re)opened empty. Throws RendezvousError
// prefixed by `where`.
std::uint16_t workers_store_port(const RoundConfig& c, WorkersStore& ws, int shared_store_port,
                                 const std::function<void()>& clear_shared,
                                 const std::string& where);

// What describe_progress() reads, from what a waiting node saw of round `round`.
ProgressInput progress_input(const RoundConfig& c, int round, std::int64_t joined,
                             std::size_t described, std::vector<NodeDesc> descs, bool retired,
                             bool static_ranks, RoundConfig::Clock::time_point deadline);

}  // namespace ddprun::rdzv
