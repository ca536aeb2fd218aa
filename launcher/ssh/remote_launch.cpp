// remote_launch.cpp: --ssh-command words, the forwarded environment and
// each host's ssh command (see remote_launch.h). Used by ssh_launch.cpp.
#include "launcher/ssh/remote_launch.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <string_view>

#include "launcher/options/usage_error.h"

namespace ddprun::launcher {
namespace {

bool is_forwarded(const std::string& name) {
  static constexpr std::array<std::string_view, 5> kExact = {
      "PYTHONPATH", "PYTHON_EXEC", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "LOGLEVEL"};
  static constexpr std::array<std::string_view, 5> kPrefixes = {"NCCL_", "GLOO_", "TORCH_",
                                                                "TORCHELASTIC_", "PET_"};
  if (std::find(kExact.begin(), kExact.end(), name) != kExact.end()) return true;
  return std::any_of(kPrefixes.begin(), kPrefixes.end(),
                     [&](std::string_view p) { return name.rfind(p, 0) == 0; });
}

bool is_env_name(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name.front()))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
  });
}

}  // namespace

std::vector<std::string> split_command_words(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\'') {
      const auto end = text.find('\'', i + 1);
      if (end == std::string::npos) {
        throw UsageError("--ssh-command '" + text + "': unterminated single quote");
      }
      word += text.substr(i + 1, end - i - 1);
      i = end;
    } else if (c == '"') {
      for (++i;; ++i) {
        if (i >= text.size()) {
          throw UsageError("--ssh-command '" + text + "': unterminated double quote");
        }
        if (text[i] == '"') break;
        if (text[i] == '\\' && i + 1 < text.size() &&
            std::string_view("\"\\$`").find(text[i + 1]) != std::string_view::npos) {
          ++i;
        }
        word += text[i];
      }
    } else if (c == '\\') {
      if (i + 1 >= text.size()) {
        throw UsageError("--ssh-command '" + text + "': ends with a backslash");
      }
      word += text[++i];
    } else {
      word += c;
    }
  }
  if (in_word) words.push_back(std::move(word));
  if (words.empty()) throw UsageError("--ssh-command: empty command");
  return words;
}

std::vector<std::pair<std::string, std::string>> forwarded_env(
    const std::map<std::string, std::string>& env, const std::vector<std::string>& extra) {
  std::map<std::string, std::string> out;
  for (const auto& [name, value] : env) {
    if (is_forwarded(name)) out[name] = value;
  }
  for (const auto& item : extra) {
    const auto eq = item.find('=');
    const std::string name = item.substr(0, eq);
    if (!is_env_name(name)) {
      throw UsageError("--env '" + item + "': expected NAME or NAME=VALUE");
    }
    if (eq != std::string::npos) {
      out[name] = item.substr(eq + 1);
      continue;
    }
    const auto it = env.find(name);
    if (it == env.end()) {
      throw UsageError("--env " + name + ": not set in this environment (or give NAME=VALUE)");
    }
    out[name] = it->second;
  }
  return {out.begin(), out.end()};
}

std::vector<std::string> remote_agent_argv(const RemoteJob& job, const RemoteHost& host) {
  std::vector<std::string> argv = {job.remote_ddprun};
  argv.insert(argv.end(), job.options.begin(), job.options.end());
  argv.push_back(fmt::format("--node-rank={}", host.node_rank));
  if (host.nproc) argv.push_back(fmt::format("--nproc-per-node={}", *host.nproc));
  argv.emplace_back(kExitOnStdinEof);
  if (host.hosts_rendezvous) argv.emplace_back(kRdzvIsHost);
  argv.insert(argv.end(), job.program.begin(), job.program.end());
  return argv;
}

std::string remote_shell_command(const RemoteJob& job, const RemoteHost& host) {
  std::string cmd = "cd -- " + shell_quote(job.cwd.empty() ? "." : job.cwd) + " && env --";
  auto env = job.env;
  if (host.visible_gpus) {
    std::erase_if(env, [](const auto& kv) { return kv.first == "CUDA_VISIBLE_DEVICES"; });
    env.emplace_back("CUDA_VISIBLE_DEVICES", *host.visible_gpus);
  }
  for (const auto& [name, value] : env) cmd += " " + shell_quote(name + "=" + value);
  for (const auto& word : remote_agent_argv(job, host)) cmd += " " + shell_quote(word);
  // Not `exec`: the shell stays to report an agent killed by signal N as status 128 + N
  // (a command after it keeps shells from exec'ing the last command themselves). sshd
  // would report the signal itself, which OpenSSH's client turns into its own exit 255,
  // indistinguishable from a failed connection.
  return cmd + "; exit $?";
}

std::vector<std::string> ssh_argv(const RemoteJob& job, const RemoteHost& host) {
  std::vector<std::string> argv = job.ssh_command;
  if (job.ssh_port) {
    argv.emplace_back("-p");
    argv.push_back(std::to_string(*job.ssh_port));
  }
  // -T: no tty (a pipe keeps every byte and line as the agent wrote it); BatchMode: a
  // host that wants a password fails at once instead of prompting on a shared terminal;
  // keep-alives: a silent link ends this ssh after job.silent_after_s().
  for (std::string opt :
       {std::string("-T"), std::string("-o"), std::string("BatchMode=yes"), std::string("-o"),
        fmt::format("ServerAliveInterval={}", job.alive_interval_s), std::string("-o"),
        fmt::format("ServerAliveCountMax={}", job.alive_count_max)}) {
    argv.push_back(std::move(opt));
  }
  argv.push_back(host.name);
  argv.push_back(remote_shell_command(job, host));
  return argv;
}

}  // namespace ddprun::launcher
