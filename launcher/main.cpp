// main.cpp: ddprun's entry point, tini-shaped: parse and check the rendezvous parameters
// (single-threaded), block the handled signals and start the orphan guard before any
// thread exists, then run the Agent and map its result to torchrun's exit codes
// (0 success, 1 failure, 2 bad usage).
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/open_files.h"
#include "launcher/agent.h"
#include "launcher/logging.h"
#include "launcher/options/cli.h"
#include "launcher/options/status_options.h"
#include "launcher/ssh/ssh_launch.h"
#include "launcher/ssh/stdin_watch.h"
#include "launcher/status_command.h"
#include "launcher/supervision.h"
#include "launcher/torch_version.h"
#include "launcher/worker_python.h"
#include "rendezvous/registry.h"

using namespace ddprun::launcher;

namespace {

// Started with fds 0-2 closed (`ddprun ... >&- 2>&-`, some daemon wrappers), the next
// descriptors opened (the epoll fd, the orphan guard's pipe) would land there and log lines
// into them: /dev/null takes each closed one first, before anything else opens a file.
void fill_closed_std_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1) continue;
    const int got = ::open("/dev/null", O_RDWR);  // the lowest free descriptor: this one
    if (got > 2) ::close(got);                    // cannot happen; never leak it
  }
}

// The terminal's settings as ddprun found them, put back when it ends: a worker killed in
// pdb (or anything that set raw mode on the inherited terminal) would leave the shell
// without echo. Only from the foreground (a background tcsetattr would stop ddprun with
// SIGTTOU) and only when they changed.
class TerminalModes {
 public:
  TerminalModes() { saved_ = ::isatty(0) == 1 && ::tcgetattr(0, &modes_) == 0; }
  TerminalModes(const TerminalModes&) = delete;
  TerminalModes& operator=(const TerminalModes&) = delete;
  ~TerminalModes() {
    termios now{};
    if (!saved_ || ::tcgetpgrp(0) != ::getpgrp() || ::tcgetattr(0, &now) != 0) return;
    if (now.c_iflag != modes_.c_iflag || now.c_oflag != modes_.c_oflag ||
        now.c_lflag != modes_.c_lflag || now.c_cflag != modes_.c_cflag) {
      ::tcsetattr(0, TCSADRAIN, &modes_);
    }
  }

 private:
  termios modes_{};
  bool saved_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  fill_closed_std_fds();
  // `ddprun status ...`: the live view of a running job (a script named "status" is
  // given as ./status).
  if (argc >= 2 && argv[1] == kStatusVerb) {
    const std::map<std::string, std::string> env = current_environment();
    setup_agent_logging(env);
    return run_status_command(std::vector<std::string>(argv + 2, argv + argc), env);
  }
  const TerminalModes terminal;  // restored when main returns
  HostFacts host = current_host_facts();
  host.launcher_python = python_beside_this_launcher(argv[0]);
  CliOutcome cli = parse_command_line(std::vector<std::string>(argv + 1, argv + argc), host);
  if (cli.kind == CliOutcome::Kind::kPrint) return std::fputs(cli.text.c_str(), stdout) < 0;
  if (cli.kind == CliOutcome::Kind::kError) return usage_error_exit(cli.text);
  setup_agent_logging(host.env);
  // A store host (and an ssh launcher's pipes) need a descriptor per node: up to the hard
  // limit. Workers get the inherited limit back (spawn()).
  if (!ddprun::OpenFilesLimit::raise()) spdlog::debug("cannot raise the open-files limit");
  if (cli.config.entry != EntryKind::kExecutable) {
    auto& v = cli.config.worker_torch_version;
    v = find_torch_version(cli.config.python_exec, host.env);
    // Not on disk (a wrapper script, a pyenv shim): ask the interpreter, briefly.
    if (!v) v = ask_torch_version(cli.config.python_exec, host.env, std::chrono::seconds(5));
    if (!v) {
      spdlog::warn(
          "cannot tell which PyTorch the workers' python {} has (none found on disk, and it "
          "did not say): is torch installed for it? If not, set PYTHON_EXEC to the python "
          "that has torch. Setting both TORCH_NCCL_ASYNC_ERROR_HANDLING and "
          "NCCL_ASYNC_ERROR_HANDLING",
          describe_worker_python(cli.config.python_exec, host.env));
    }
  }
  if (!cli.slurm.text.empty()) {  // what an srun step set (slurm_env.h)
    spdlog::log(cli.slurm.taken ? spdlog::level::warn : spdlog::level::info, "{}", cli.slurm.text);
  }
  for (const auto& w : cli.slurm.warnings) spdlog::warn("{}", w);
  for (const auto& w : cli.config.warnings) spdlog::warn("{}", w);
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
