// progress.h: the line a waiting agent logs every progress interval ("round 3: 2 joined
// (min 3, max 4): [...]; waiting for 1 more; 580 s left"), from what it read of the
// round. Users complain most about a silent wait; this says who is in, what is missing
// and why the round has not formed. Used by both multi-node handlers; table tests in
// tests/rendezvous/progress_test.cpp. Thread-safety: pure functions.
#pragma once

#include <spdlog/common.h>

#include <cstdint>
#include <string>
#include <vector>

#include "rendezvous/round_codec.h"

namespace ddprun::rdzv {

struct ProgressInput {
  int round = 0;
  std::int64_t joined = 0;      // the round's slot counter
  std::size_t described = 0;    // descriptors present (of the first 64 slots)
  std::vector<NodeDesc> descs;  // those of them that decode
  bool retired = true;          // the previous round is over (nobody still runs in it)
  int min_nodes = 1;
  int max_nodes = 1;
  bool static_ranks = false;
  long long secs_left = 0;  // until join_timeout
};

struct Progress {
  std::string line;  // "round R: ..." (the caller prefixes the rendezvous' name)
  // static: a node rank claimed twice among the joined; the wait cannot succeed and
  // must fail with this. "" otherwise.
  std::string error;
};

Progress describe_progress(const ProgressInput& in);

// The level of a wait's `nth` progress line (0: the first, after one interval): WARNING
// for the first and every sixth (each 30 s at the default 5 s interval), INFO between,
// so that the default level says why the agent waits without a line every 5 s.
spdlog::level::level_enum progress_level(int nth);

}  // namespace ddprun::rdzv
