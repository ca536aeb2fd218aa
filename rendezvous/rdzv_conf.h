// rdzv_conf.h: RdzvConf, the --rdzv-conf option ("key=value,key=value") parsed once into
// typed values with torchrun's spellings: durations in seconds (fractions allowed,
// "0.2"), integers, booleans (1/true/t/yes/y, 0/false/f/no/n). parse_rdzv_conf() is
// called by the launcher's build_config (and by tests); the registry and the handlers
// read the typed fields. An absent key is nullopt: each backend applies its own default.
// Thread-safety: plain values; the functions are pure (warn_unused_conf_keys logs).
#pragma once

#include <chrono>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace ddprun::rdzv {

struct RdzvConf {
  using Ms = std::chrono::milliseconds;
  // torchrun's keys.
  std::optional<Ms> join_timeout;             // c10d 600 s; static: falls back to `timeout`
  std::optional<Ms> timeout;                  // static's older name of join_timeout (900 s)
  std::optional<Ms> last_call_timeout;        // 30 s
  std::optional<Ms> close_timeout;            // accepted; closing is a single SET
  std::optional<Ms> heartbeat_timeout;        // accepted; heartbeats are single ADDs
  std::optional<Ms> keep_alive_interval;      // 5 s; > 0
  std::optional<int> keep_alive_max_attempt;  // 3; >= 1
  std::optional<Ms> read_timeout;             // 60 s; > 0
  std::optional<bool> is_host;                // c10d: host the store (default: by address)
  std::optional<int> rank;                    // static: the node rank without --node-rank
  // store_type: only "tcp" is accepted, so nothing is kept.
  // ddprun's own keys (docs/usage.md).
  std::optional<int> workers_port;      // 0..65535: a separate workers' store on this port
  std::optional<bool> use_agent_store;  // false: worker rank 0 hosts the workers' store
  std::optional<bool> job_check;        // false: nodes may run different arguments
  // etcd-v3 (etcd_rendezvous.h): the key prefix ("etcd_prefix" as torchrun, or
  // "prefix"; starts with '/', no blanks), TLS files, how long one etcd call keeps
  // trying the members before the agent gives up.
  std::optional<std::string> etcd_prefix;
  std::optional<std::string> cacert, cert, key;  // also torchrun's ca_cert, ssl_cert, ssl_cert_key
  std::optional<std::string> etcd_protocol;      // torchrun's protocol: http or https
  std::optional<Ms> failover_timeout;            // 30 s; > 0
  // Every key given, in the order given (unknown ones too), for warn_unused_conf_keys.
  std::vector<std::string> keys;
};

// Parses `text` (empty or blank: no key). Throws RendezvousError (rendezvous.h), one line
// naming what is wrong: a malformed pair ("--rdzv-conf: malformed pair 'x' in '...'"),
// or a value its key does not take ("--rdzv-conf join_timeout='soon' is not a
// non-negative number of seconds"). Unknown keys are only listed in `keys`.
RdzvConf parse_rdzv_conf(const std::string& text);

// Logs one warning per key given that the `backend` rendezvous does not use (it is
// ignored), naming the keys it knows.
void warn_unused_conf_keys(const RdzvConf& conf, std::initializer_list<const char*> known,
                           const std::string& backend);

}  // namespace ddprun::rdzv
