// rdzv_conf.h: typed reads of --rdzv-conf values (RendezvousParams::conf) with torchrun's
// spellings: durations in seconds (fractions allowed, "0.2"), integers, booleans
// (1/true/t/yes/y, 0/false/f/no/n). Used by the handlers. Thread-safety: pure functions.
#pragma once

#include <chrono>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>

namespace ddprun::rdzv {

using ConfMap = std::map<std::string, std::string>;

// The value of `key` in seconds, or `default_seconds` when absent. Throws
// RendezvousError ("--rdzv-conf join_timeout='x' is not a number of seconds") on a
// non-number or a negative number.
std::chrono::milliseconds conf_seconds(const ConfMap& conf, const std::string& key,
                                       double default_seconds);

// Throws RendezvousError unless the value is an integer >= `min`.
int conf_int(const ConfMap& conf, const std::string& key, int default_value, int min = 0);

// nullopt when absent; throws RendezvousError on an unknown spelling.
std::optional<bool> conf_bool(const ConfMap& conf, const std::string& key);

// Logs one warning per key of `conf` that is not in `known` (it is ignored).
void warn_unknown_conf_keys(const ConfMap& conf, std::initializer_list<const char*> known,
                            const std::string& backend);

}  // namespace ddprun::rdzv
