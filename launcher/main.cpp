// main.cpp: ddprun's entry point, tini-shaped: parse and check the rendezvous parameters
// (single-threaded), block the handled signals and start the orphan guard before any
// thread exists, then run the Agent and map its result to torchrun's exit codes
// (0 success, 1 failure, 2 bad usage).
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "launcher/agent.h"
#include "launcher/cli.h"
#include "launcher/logging.h"
#include "launcher/ssh/ssh_launch.h"
#include "launcher/ssh/stdin_watch.h"
#include "launcher/supervision.h"
#include "rendezvous/registry.h"

using namespace ddprun::launcher;

int main(int argc, char** argv) {
  HostFacts host = current_host_facts();
  CliOutcome cli = parse_command_line(std::vector<std::string>(argv + 1, argv + argc), host);
  if (cli.kind == CliOutcome::Kind::kPrint) return std::fputs(cli.text.c_str(), stdout) < 0;
  if (cli.kind == CliOutcome::Kind::kError) return usage_error_exit(cli.text);
  setup_agent_logging(host.env);
  if (!cli.slurm.text.empty()) {  // what an srun step set (slurm_env.h)
    spdlog::log(cli.slurm.taken ? spdlog::level::warn : spdlog::level::info, "{}", cli.slurm.text);
  }
  for (const auto& w : cli.slurm.warnings) spdlog::warn("{}", w);
  if (!cli.config.ignored_options.empty()) {
    std::string list;
    for (const auto& o : cli.config.ignored_options) list += (list.empty() ? "" : ", ") + o;
    spdlog::warn("ignoring {}: accepted for torchrun compatibility, not implemented by ddprun",
                 list);
  }
  // --hostfile / --hosts: this ddprun only starts and supervises the hosts' agents.
  if (cli.config.ssh.active()) return run_ssh_launch(cli.config, host.env);
  std::unique_ptr<ddprun::rdzv::RendezvousHandler> handler;
  try {  // only checks the parameters: nothing is bound or connected yet
    handler = ddprun::rdzv::make_rendezvous_handler(make_rendezvous_params(cli.config, host.env));
  } catch (const ddprun::rdzv::RendezvousError& e) {
    return usage_error_exit(e.what());
  }
  // An agent started by an ssh launch stops when the launcher's end closes.
  return run_supervised(cli.config, Watchdogs::kFromConfig, [&](ProcessSupervisor& supervisor) {
    std::optional<StdinWatch> stdin_watch;
    if (cli.config.ssh.exit_on_stdin_eof) stdin_watch.emplace(0, SIGTERM);
    Agent agent(cli.config, host.env, supervisor, std::move(handler));
    return agent.run().exit_code;
  });
}
