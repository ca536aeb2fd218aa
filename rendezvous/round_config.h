// round_config.h: RoundConfig, the round settings both multi-node handlers take
// (StoreRendezvous and EtcdRendezvous embed it as Config::round), filled in one place by
// the registry from RendezvousParams and --rdzv-conf, plus the injected clock `now`.
// Thread-safety: a plain value.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace ddprun::rdzv {

struct RoundConfig {
  using Clock = std::chrono::steady_clock;
  using Ms = std::chrono::milliseconds;

  std::string run_id = "none";
  int min_nodes = 1;
  int max_nodes = 1;
  int node_rank = -1;  // -1 = not given
  int local_world_size = 1;
  // The job's fingerprint (RendezvousParams::job_command): the first agent of the run
  // id publishes it; a later one with a different one is refused before it joins.
  // job_check = false (--rdzv-conf job_check=0): nodes that deliberately run
  // different arguments; this node neither checks nor publishes one.
  std::vector<std::string> job_command;
  bool job_check = true;
  std::string advertise_addr;  // this node's address: descriptor and MASTER_ADDR
  std::string bind_addr;       // where this node's workers' store binds ("" = all)
  int workers_port = 0;        // port of that store (0 = OS-chosen)
  // false (--rdzv-conf use_agent_store=0): group rank 0 hosts no workers' store but
  // publishes a free port (workers_port if set) for worker rank 0 to host one on.
  bool agent_store = true;
  std::string hostname;
  Ms join_timeout{600'000};
  Ms last_call_timeout{30'000};
  Ms keep_alive_interval{5'000};
  int keep_alive_max_attempt = 3;
  Ms progress_interval{5'000};  // how often a waiting agent logs where it stands
  // The clock of every deadline and liveness verdict (join_timeout, last call,
  // heartbeat thresholds, progress lines); empty = steady_clock::now (the handlers fill
  // it in). Tests inject a manual one. Waits still take real time.
  std::function<Clock::time_point()> now;

  // How long a member may be silent before it counts as gone.
  Ms heartbeat_threshold() const { return keep_alive_interval * keep_alive_max_attempt; }
};

}  // namespace ddprun::rdzv
