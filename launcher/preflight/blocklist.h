// blocklist.h: the block-list (--blocklist FILE, docs/preflight.md): hosts the pre-flight
// check found bad, kept across launches. One host a line, "HOST WHEN WHY..." (WHEN an ISO
// 8601 UTC time; `#` comments and blank lines skipped; a line with a host alone is one a
// user wrote by hand). A node whose own name is listed does not join (a spare takes its
// place). Used by the Agent (agent_preflight.cpp) and config.cpp (read at start, so that
// an unreadable file is a usage error). Thread-safety: no shared state; appends from
// several processes (every node of a job on a shared file system) are serialised by an
// exclusive flock(2).
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddprun::launcher::preflight {

struct BlockEntry {
  std::string host;  // as the nodes name themselves: --local-addr, else the host name
  std::string when;  // "" when not given
  std::string why;   // "" when not given
};

class BlocklistError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The entries of `path`; none when it does not exist. Throws BlocklistError (one line
// naming the file) when it is not a regular file, larger than 1 MiB, or unreadable.
std::vector<BlockEntry> read_blocklist(const std::string& path);
// The entry naming `host`, if any.
std::optional<BlockEntry> find_host(const std::vector<BlockEntry>& entries,
                                    const std::string& host);
// Appends the entries whose host the file does not list yet (creating it); returns how
// many were added. Throws BlocklistError naming the file when it cannot be written.
int add_to_blocklist(const std::string& path, const std::vector<BlockEntry>& entries);
// The current UTC time as the file writes it (2026-11-29T02:03:04Z).
std::string utc_now();

}  // namespace ddprun::launcher::preflight
