// ssh_config.h: what the user's ssh client makes of a host name (`ssh -G HOST`: OpenSSH
// prints its configuration for HOST, HostName aliases and %-tokens applied, without
// connecting). The ssh launch uses it for the first host, whose address becomes the
// rendezvous endpoint: an ssh-config alias ("Host gpu0 / HostName 10.1.2.3") means
// nothing to the agents' resolver. Used by ssh_launch.cpp (and tests).
// Thread-safety: ssh_config_hostname forks; call it before other threads exist.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::launcher {

// The "hostname" value of `ssh -G` output, or nullopt when it has none.
std::optional<std::string> parse_ssh_g_hostname(std::string_view output);

// Runs `ssh_command... -G host` (stdin and stderr /dev/null, at most `timeout_ms`) and
// returns the host name ssh would connect to; nullopt when ssh fails, takes too long or
// prints none (an ssh without -G: the caller keeps the name as written).
std::optional<std::string> ssh_config_hostname(const std::vector<std::string>& ssh_command,
                                               const std::string& host, int timeout_ms = 5000);

}  // namespace ddprun::launcher
