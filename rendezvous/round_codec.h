// round_codec.h: the JSON values both multi-node handlers keep (c10d in its store, etcd
// in its keys): a node's descriptor, the job's fingerprint, the workers' store address of
// a round; and the one-line rendering of a command for messages. One encoder and one
// decoder each, so every reader accepts what every writer writes. Thread-safety: pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/endpoint.h"

namespace ddprun::rdzv {

// One agent of a round, as it described itself in r<r>/node/<slot>:
//   {"addr": "10.0.0.2", "host": "n2", "pid": 4242, "node_rank": 1,
//    "node_rank_defaulted": false, "nproc": 8, "job": ["train.py", "--lr", "0.1"],
//    "rdzv_host": false}
// "job" is absent when the agent does not check fingerprints (job_check=0); a missing
// "rdzv_host" (a descriptor of an older ddprun) reads as false.
struct NodeDesc {
  int slot = 0;  // not encoded: the key says it
  std::string addr;
  std::string host;
  long pid = 0;
  int node_rank = -1;                // -1 = no --node-rank given (c10d)
  bool node_rank_defaulted = false;  // static: --node-rank absent, 0 assumed
  int nproc = 1;
  int restarts = 0;                // restarts its agent had spent when it joined
  std::optional<std::string> job;  // the "job" value as JSON text, when present
  // This agent hosts the rendezvous store (the --rdzv-endpoint's node): first in the
  // automatic rank order, so group rank 0 lands where the user pointed the endpoint.
  bool rdzv_host = false;

  // "addr (host) pid N": how messages name the node ("(host)" only when it differs).
  std::string label() const;
};

// The descriptor's JSON (`slot` is not part of it; `job` is written when set).
std::string encode_node_desc(const NodeDesc& desc);
// nullopt when `json` is not a JSON object; missing fields keep NodeDesc's defaults.
std::optional<NodeDesc> decode_node_desc(std::string_view json, int slot);

// The job's fingerprint: the workers' command as a JSON array of strings.
std::string job_fingerprint(const std::vector<std::string>& command);
// nullopt unless `json` is a JSON array of strings.
std::optional<std::vector<std::string>> decode_job_fingerprint(std::string_view json);

// r<r>/master: {"addr": ..., "port": ...}.
std::string encode_workers_store(const std::string& addr, std::uint16_t port);
// nullopt unless both fields are there, "addr" a string and "port" in 0..65535.
std::optional<Endpoint> decode_workers_store(std::string_view json);

// `words` as one line for messages, quoted where a shell would need it ('it'\''s'),
// newlines as \n, cut after 400 characters; "(no command)" when empty.
std::string command_line(const std::vector<std::string>& words);

}  // namespace ddprun::rdzv
