// preflight.h: one round's pre-flight check (--preflight, docs/preflight.md): every node
// runs the check program (preflight_script.h) with the workers' interpreter through the
// Supervisor, before the round's workers start; the nodes share their findings on the
// round's JobBoard (first the local checks; then, when every node passed them, the
// collective among the nodes), node 0 reads them all and answers each step
// (board_exchange.h), and all read one verdict (preflight_verdict.h). Skipped in a round
// whose nodes all passed it before (a restart, a spare that did not join).
// Used by the Agent (agent_preflight.cpp). Thread-safety: the agent thread; run() owns the
// Supervisor's attempt while it runs (nothing else may run on it).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "launcher/preflight/preflight_verdict.h"
#include "launcher/process/supervisor_interface.h"
#include "rendezvous/job_board.h"
#include "rendezvous/rendezvous.h"

namespace ddprun::launcher::preflight {

struct Context {
  Supervisor& supervisor;
  rdzv::JobBoard* board = nullptr;  // nullptr: a round of one node
  const rdzv::RendezvousInfo& info;
  std::string python;            // the workers' interpreter
  std::vector<std::string> env;  // the workers' environment, "NAME=value"
  std::string dir;               // the program, its findings and its stderr go here
  std::string host;              // this node in messages (node_label)
  std::string key;               // this node in the block-list
  std::string address;           // the address it published (RendezvousInfo::node_address)
  bool hosts_store = false;      // this node hosts the rendezvous store
  bool passed_before = false;    // this node passed the check in an earlier round
  std::chrono::milliseconds timeout{120000};  // the whole check's bound
  std::chrono::milliseconds grace{30000};     // a signal's stop grace (--shutdown-timeout)
  Settings settings;
};

struct Outcome {
  enum class Kind {
    kSkipped,  // every node had passed before: nothing ran
    kVerdict,  // the check ran: `verdict` on `nodes`
    kSignal,   // a handled signal arrived (`signo`); the check was stopped
  };
  Kind kind = Kind::kSkipped;
  int signo = 0;
  std::vector<NodeResult> nodes;  // by node
  Verdict verdict;
  double seconds = 0;  // how long it took here
};

// Runs the check of one round. Throws rdzv::RendezvousError when the board fails, and
// SpawnError when the program cannot start.
Outcome run(const Context& c);

}  // namespace ddprun::launcher::preflight
