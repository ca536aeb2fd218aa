// registry.h: make_rendezvous_handler(), the only place that picks a RendezvousHandler
// for the launcher's parameters (the table below) and the only file that names the
// backends' folders (rendezvous/c10d/, rendezvous/etcd/); parse_backend() reads
// --rdzv-backend. Thread-safety: make_rendezvous_handler() is reentrant.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "rendezvous/board_reader.h"
#include "rendezvous/rendezvous.h"

namespace ddprun::rdzv {

inline constexpr int kDefaultC10dPort = 29400;
inline constexpr int kDefaultMasterPort = 29500;

// The backend named `name` (--rdzv-backend). Throws RendezvousError naming the flag for
// an unknown name; etcd / etcd-v2 are etcd-v3.
Backend parse_backend(const std::string& name);
// `name` when it is torchrun's alias of etcd-v3 ("etcd", "etcd-v2"), else "": the value
// of RendezvousParams::backend_alias.
std::string backend_alias(const std::string& name);

// Which handler:
//   max_nodes == 1      -> LocalRendezvous, whatever the backend (a one-node job needs no
//                          rendezvous traffic: only the workers' store)
//   "static"            -> StoreRendezvous with fixed membership: node rank 0 hosts the
//                          rendezvous store at --master-addr:--master-port (or
//                          --rdzv-endpoint), group rank = node rank
//   "c10d"              -> StoreRendezvous with dynamic membership (--nnodes MIN:MAX) at
//                          --rdzv-endpoint (default port 29400)
//   "etcd-v3"           -> EtcdRendezvous through the etcd members listed in
//                          --rdzv-endpoint (comma-separated); "etcd" / "etcd-v2" are
//                          aliases (torchrun's names), with a one-time notice
// Checks how `params` combine and builds the handler; nothing is bound or connected
// before the first next_rendezvous(). Throws RendezvousError (one line naming the bad
// value) on a bad endpoint, an endpoint or port the backend cannot use, or a static
// node rank (--node-rank, else --rdzv-conf rank) outside [0, nnodes). The single values
// are checked where they were parsed (see RendezvousParams). --rdzv-conf keys the
// backend does not use only log a warning.
std::unique_ptr<RendezvousHandler> make_rendezvous_handler(const RendezvousParams& params);

// A read-only look at run `params.run_id`'s board (board_reader.h) at `params.endpoint`
// (static, c10d: the rendezvous store, default port 29500 / 29400; etcd-v3: the members,
// with --rdzv-conf's prefix and TLS files), for `ddprun status`: every call answers, or
// throws RendezvousConnectionError, within about `timeout`. Connects now: throws
// RendezvousConnectionError when the store cannot be reached (c10d), RendezvousError on a
// bad endpoint.
std::unique_ptr<BoardReader> make_board_reader(const RendezvousParams& params,
                                               std::chrono::milliseconds timeout);

}  // namespace ddprun::rdzv
