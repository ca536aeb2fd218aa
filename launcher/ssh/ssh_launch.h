// ssh_launch.h: the multi-host launch (`--hostfile FILE` / `--hosts a,b:2,c`): one ddprun
// agent per host over ssh (c10d, first host as endpoint, node ranks in host order), every
// host's output under a "[host]:" prefix, one exit status; a lost host ends a job that
// cannot go on without it. The ssh clients are supervised like workers; each stdin is a
// pipe only this process holds (remote StdinWatch).
// Used by main.cpp. Thread-safety: make_ssh_plan is pure; run_ssh_launch runs on main's
// thread before any other exists (run_supervised, supervision.h).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "launcher/options/config.h"
#include "launcher/ssh/hostfile.h"
#include "launcher/ssh/remote_launch.h"

namespace ddprun::launcher {

struct SshPlan {
  RemoteJob job;
  std::vector<RemoteHost> hosts;  // in host-list order; node rank = index
  int min_nodes = 1;              // fewer live hosts than this and the job cannot run
  std::string endpoint;           // the c10d endpoint ("" when the user gave one)
  std::string run_id;             // the run id ("" when the user gave one)
};

// The default c10d port of the endpoint host (torchrun's).
inline constexpr int kSshRendezvousPort = 29400;

// Builds the plan from the parsed command line and the (filtered) host list. `env`: this
// process's environment; `self`: this ddprun's absolute path; `run_id`: the generated
// run id used when the user gave none; `first_address`: the address of the first host
// for the endpoint (what ssh connects to: ssh_config.h), "" for its name as written.
// When the launcher chooses the endpoint, the first host's agent is told it hosts the
// rendezvous. Throws UsageError (--nnodes against the host count, --env, --ssh-command).
SshPlan make_ssh_plan(const LaunchConfig& config, const std::map<std::string, std::string>& env,
                      const std::vector<HostEntry>& hosts, const std::string& self,
                      const std::string& cwd, const std::string& run_id,
                      const std::string& first_address = "");

// Runs the whole multi-host job; returns the exit status (0 every host succeeded, 1 a
// failure or a stop by signal, 2 bad usage, e.g. an unreadable hostfile). Never throws.
int run_ssh_launch(const LaunchConfig& config, const std::map<std::string, std::string>& env);

}  // namespace ddprun::launcher
