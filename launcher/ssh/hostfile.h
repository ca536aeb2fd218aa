// hostfile.h: the hosts of a multi-host launch in DeepSpeed's forms: hostfile lines
// "host [slots=N]" with '#' comments, --hosts "a,b:2,c" (":N" = slots), and --include /
// --exclude "host[:gpu,gpu][@host...]" (named GPUs become the host's worker count and
// CUDA_VISIBLE_DEVICES). Used by ssh_launch.cpp (and tests). Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::launcher {

struct HostEntry {
  std::string name;          // as written: "node1", "user@node1", "10.0.0.2"
  std::optional<int> slots;  // slots=N / :N; nullopt: --nproc-per-node decides
  // After --include/--exclude named GPUs: the host's CUDA_VISIBLE_DEVICES (nproc is then
  // their count). nullopt: left alone.
  std::optional<std::vector<int>> gpus;
  int line = 0;  // the hostfile line (0: from --hosts)
};

// Parses a hostfile's text. `source` names the file in messages. A UTF-8 byte-order
// mark at the start (an editor's) is skipped, blank lines and '#' comments too; a host
// may appear once. Throws UsageError "FILE:LINE: ...", with bytes outside printable ASCII
// shown as \xNN.
std::vector<HostEntry> parse_hostfile(std::string_view text, const std::string& source);

// Reads and parses FILE. Throws UsageError naming the file (unreadable, empty).
std::vector<HostEntry> read_hostfile(const std::string& path);

// Parses --hosts "a,b:2,c". Throws UsageError naming --hosts.
std::vector<HostEntry> parse_hosts_list(const std::string& text);

// Applies --include and --exclude (either may be empty; not both non-empty) in
// DeepSpeed's form "host@host:0,2": include keeps only the named hosts (and, where GPUs
// are given, only those GPUs); exclude drops the named hosts (or, where GPUs are given,
// those GPUs of a host whose slots are known). Throws UsageError naming the flag.
std::vector<HostEntry> filter_hosts(std::vector<HostEntry> hosts, const std::string& include,
                                    const std::string& exclude);

// The part of a host entry ssh connects to, without "user@" (the rendezvous endpoint).
std::string host_address(const std::string& name);

// Worker count of a host: the filtered GPUs' count, else its slots, else nullopt.
std::optional<int> host_nproc(const HostEntry& host);

}  // namespace ddprun::launcher
