// remote_launch.h: the commands of a multi-host launch: per host, the ssh argv that starts
// its ddprun agent in the user's working directory with the forwarded environment
// (each word quoted by shell_quote, base/text.h); and --ssh-command's word splitting.
// Used by ssh_launch.cpp (and tests). Thread-safety: pure functions.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/text.h"

namespace ddprun::launcher {

// Splits --ssh-command as a POSIX shell splits words: blanks separate, '...' is literal,
// "..." keeps blanks (\ escapes " \ $ ` inside), \ outside quotes escapes the next
// character. No expansion of any kind. Throws UsageError naming --ssh-command on an
// unterminated quote or an empty command.
std::vector<std::string> split_command_words(const std::string& text);

// The environment a remote agent gets from the launcher: the allow-list (PYTHONPATH,
// PYTHON_EXEC, CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS, LOGLEVEL and every NCCL_*, GLOO_*,
// TORCH_*, TORCHELASTIC_*, PET_* variable) present in `env`, plus each `--env` item:
// NAME (its value here; throws UsageError when it is not set) or NAME=VALUE. Sorted by name.
std::vector<std::pair<std::string, std::string>> forwarded_env(
    const std::map<std::string, std::string>& env, const std::vector<std::string>& extra);

// Everything the hosts' commands share.
struct RemoteJob {
  std::vector<std::string> ssh_command = {"ssh"};        // --ssh-command, as words
  std::optional<int> ssh_port;                           // --ssh-port
  std::string remote_ddprun;                             // absolute path of ddprun on the hosts
  std::string cwd;                                       // the user's working directory
  std::vector<std::pair<std::string, std::string>> env;  // forwarded (forwarded_env)
  // The user's launcher options passed through unchanged, then the job's own (--nnodes,
  // --rdzv-backend, --rdzv-endpoint, --rdzv-id where the user gave none): later options
  // win, so the job's come last.
  std::vector<std::string> options;
  std::vector<std::string> program;  // the training script and its arguments
  // ssh's keep-alives (-o ServerAliveInterval, ServerAliveCountMax): ssh ends a session
  // whose host has answered nothing for silent_after_s() (a cut link, a host gone), OpenSSH
  // counting from the host's last answer. make_ssh_plan sets them from the rendezvous's
  // heartbeats.
  int alive_interval_s = 5;
  int alive_count_max = 2;
  int silent_after_s() const { return alive_interval_s * (alive_count_max + 1); }
};

// One host's part.
struct RemoteHost {
  std::string name;  // what ssh connects to ([user@]host)
  int node_rank = 0;
  std::optional<int> nproc;                 // --nproc-per-node for this host
  std::optional<std::string> visible_gpus;  // CUDA_VISIBLE_DEVICES for this host
  // The launcher chose this host's address as the rendezvous endpoint: its agent is told
  // so (kRdzvIsHost) instead of guessing from addresses, which fails when the name in
  // the host list is an ssh alias or resolves elsewhere than to one of its interfaces.
  bool hosts_rendezvous = false;
};

// The hidden agent option that makes a remote agent stop (as on SIGTERM) when its stdin
// reaches end of file: the ssh session closed because the launcher died or the link broke.
inline constexpr const char* kExitOnStdinEof = "--exit-on-stdin-eof";

// The hidden agent option that makes an agent host the c10d rendezvous store (as
// --rdzv-conf is_host=1, unless the user's --rdzv-conf says is_host itself).
inline constexpr const char* kRdzvIsHost = "--rdzv-is-host";

// The remote agent's argv: remote_ddprun, job options, --node-rank, --nproc-per-node,
// kExitOnStdinEof, kRdzvIsHost (the rendezvous host only), program.
std::vector<std::string> remote_agent_argv(const RemoteJob& job, const RemoteHost& host);

// The command string the remote login shell runs:
//   cd -- 'CWD' && env -- 'NAME=value'... 'ARGV0' 'ARG'...; exit $?
// A missing or non-executable ddprun makes `env` exit 127 or 126; an agent killed by
// signal N makes the shell exit 128 + N (ssh passes the status on).
std::string remote_shell_command(const RemoteJob& job, const RemoteHost& host);

// The local argv: ssh_command words, [-p PORT], the launcher's ssh options (no tty,
// batch mode, the job's keep-alives; after the user's words, so the user's -o wins),
// host, command.
std::vector<std::string> ssh_argv(const RemoteJob& job, const RemoteHost& host);

}  // namespace ddprun::launcher
