// registry.cpp: make_rendezvous_handler() and parse_backend() (registry.h): the only
// file that names the backends, filling each handler's Config from RendezvousParams.
#include "rendezvous/registry.h"

#include <spdlog/spdlog.h>

#include <sstream>

#include "rendezvous/c10d/store_board_reader.h"
#include "rendezvous/c10d/store_rendezvous.h"
#include "rendezvous/c10d/tcp_rendezvous_store.h"
#include "rendezvous/endpoint.h"
#include "rendezvous/etcd/etcd_board_reader.h"
#include "rendezvous/etcd/etcd_rendezvous.h"
#include "rendezvous/local_rendezvous.h"
#include "rendezvous/published_address.h"
#include "rendezvous/rdzv_conf.h"

namespace ddprun::rdzv {
namespace {

using Clock = StoreRendezvous::Clock;
using Ms = StoreRendezvous::Ms;

// The round settings every multi-node backend (StoreRendezvous, EtcdRendezvous) takes
// from the parameters and --rdzv-conf alike.
RoundConfig round_config(const RendezvousParams& p) {
  using namespace std::chrono_literals;
  const RdzvConf& conf = p.conf;
  RoundConfig c;
  c.run_id = p.run_id;
  c.min_nodes = p.min_nodes;
  c.max_nodes = p.max_nodes;
  c.local_world_size = p.local_world_size;
  c.job_command = p.job_command;
  // ddprun's own key: 0 = nodes of this run id may run different arguments (no check).
  c.job_check = conf.job_check.value_or(true);
  c.hostname = local_hostname();
  c.last_call_timeout = conf.last_call_timeout.value_or(30s);
  c.keep_alive_interval = conf.keep_alive_interval.value_or(5s);
  c.keep_alive_max_attempt = conf.keep_alive_max_attempt.value_or(3);
  // Progress lines every 5 s, more often when the caller asked for tiny intervals.
  c.progress_interval = std::min<Ms>(Ms(5000), c.keep_alive_interval * 2);
  // ddprun's own key: the port of a separate workers' store (0 = OS-chosen; c10d's
  // default). Static without it: the workers share the rendezvous store (make_static).
  c.workers_port = conf.workers_port.value_or(0);
  // ddprun's own key: 0 = worker rank 0 hosts the workers' store (PyTorch without libuv).
  c.agent_store = conf.use_agent_store.value_or(true);
  return c;
}

StoreRendezvous::Config common_config(const RendezvousParams& p) {
  StoreRendezvous::Config c;
  c.round = round_config(p);
  c.poll_slice = std::clamp<Ms>(c.round.keep_alive_interval / 4, Ms(20), Ms(250));
  return c;
}

std::unique_ptr<RendezvousHandler> finish(StoreRendezvous::Config config,
                                          const std::shared_ptr<TcpRendezvousStore>& rs) {
  rs->silent_peer = config.round.keep_alive_interval * config.round.keep_alive_max_attempt;
  rs->silent_store = RoundWatch::fence(config.round.keep_alive_interval,
                                       config.round.keep_alive_max_attempt, config.round.max_nodes);
  auto connect = [rs](Clock::time_point deadline, const std::atomic<bool>& interrupted) {
    return rs->connect(deadline, interrupted);
  };
  return std::make_unique<StoreRendezvous>(
      std::move(config), connect, [rs] { rs->shutdown(); }, [rs] { return rs->server != nullptr; },
      [rs] { rs->clear_worker_keys(); });
}

// The static node rank: --node-rank, else --rdzv-conf rank, else 0 (torchrun's default).
// Throws RendezvousError when it is not below the node count.
int static_node_rank(const RendezvousParams& p) {
  const int node_rank = p.node_rank.value_or(p.conf.rank.value_or(0));
  if (node_rank >= p.max_nodes) {
    throw RendezvousError("--node-rank " + std::to_string(node_rank) + " is out of range for " +
                          "--nnodes " + std::to_string(p.max_nodes) + " (must be 0.." +
                          std::to_string(p.max_nodes - 1) + ")");
  }
  return node_rank;
}

std::unique_ptr<RendezvousHandler> make_static(const RendezvousParams& p) {
  using namespace std::chrono_literals;
  const RdzvConf& conf = p.conf;
  warn_unused_conf_keys(conf,
                        {"timeout", "join_timeout", "read_timeout", "rank", "keep_alive_interval",
                         "keep_alive_max_attempt", "last_call_timeout", "workers_port",
                         "use_agent_store", "job_check"},
                        "static");
  if (p.min_nodes != p.max_nodes) {
    spdlog::warn(
        "static rendezvous: --nnodes {}:{} is not elastic under the static backend; "
        "waiting for exactly {} nodes (use --rdzv-backend c10d for MIN:MAX)",
        p.min_nodes, p.max_nodes, p.max_nodes);
  }
  const int nnodes = p.max_nodes;
  const int node_rank = static_node_rank(p);
  const bool defaulted = !p.node_rank && !conf.rank;
  Endpoint ep;
  if (!p.endpoint.empty()) {
    ep = parse_endpoint(p.endpoint, -1, "--rdzv-endpoint");
    if (ep.port < 0) ep.port = p.master_port.value_or(kDefaultMasterPort);
  } else {
    ep.host = p.master_addr.value_or("127.0.0.1");
    ep.port = p.master_port.value_or(kDefaultMasterPort);
  }
  if (ep.port == 0) {
    throw RendezvousError("static rendezvous with --nnodes " + std::to_string(nnodes) +
                          " needs a fixed port, not 0 (the other nodes must know it)");
  }
  // INFO: a loopback endpoint is mostly a one-machine test, and a real multi-machine
  // mistake shows in the waiting lines (issue 31: noisy at the default level).
  if (is_loopback_host(ep.host) && !p.local_addr) {
    spdlog::info(
        "static rendezvous: the endpoint {} is a loopback address, reachable from "
        "this machine only; set --master-addr to node rank 0's address for a "
        "multi-machine job",
        ep.to_string());
  }
  StoreRendezvous::Config c = common_config(p);
  c.backend = "static";
  c.endpoint = ep.to_string();
  c.round.min_nodes = nnodes;
  c.round.max_nodes = nnodes;
  c.static_ranks = true;
  c.round.node_rank = node_rank;
  c.node_rank_defaulted = defaulted;
  c.round.join_timeout = conf.join_timeout.value_or(conf.timeout.value_or(900s));
  // Node rank 0 hosts both stores, so the workers reach it where the agents did.
  c.round.advertise_addr = p.local_addr.value_or(ep.host);
  if (node_rank != 0 && !p.local_addr) {
    c.find_address = [ep, hostname = c.round.hostname] {
      return find_published_address(ep, false, hostname);
    };
  }
  c.round.bind_addr = p.local_addr && is_ip_literal(*p.local_addr) ? *p.local_addr : "";
  // As torchrun: the workers use the store at --master-port (one port to open). An
  // explicit --rdzv-conf workers_port gives them a store of their own on that port
  // instead (0 = OS-chosen), emptied for every attempt.
  if (!conf.workers_port) {
    c.shared_store_addr = ep.host;
    c.shared_store_port = ep.port;
  }
  auto rs = std::make_shared<TcpRendezvousStore>();
  rs->endpoint = ep;
  rs->backend = "static";
  rs->run_id = p.run_id;
  rs->try_host = node_rank == 0;
  rs->must_host = true;
  rs->read_timeout = conf.read_timeout.value_or(60s);
  return finish(std::move(c), rs);
}

std::unique_ptr<RendezvousHandler> make_c10d(const RendezvousParams& p) {
  using namespace std::chrono_literals;
  const RdzvConf& conf = p.conf;
  warn_unused_conf_keys(conf,
                        {"join_timeout", "last_call_timeout", "close_timeout", "heartbeat_timeout",
                         "keep_alive_interval", "keep_alive_max_attempt", "read_timeout", "is_host",
                         "store_type", "timeout", "workers_port", "use_agent_store", "job_check"},
                        "c10d");
  if (p.endpoint.empty()) {
    throw RendezvousError("--rdzv-backend c10d with --nnodes " + std::to_string(p.min_nodes) + ":" +
                          std::to_string(p.max_nodes) +
                          " needs --rdzv-endpoint host[:port] (the address of the node that "
                          "hosts the rendezvous store; default port 29400)");
  }
  Endpoint ep = parse_endpoint(p.endpoint, kDefaultC10dPort, "--rdzv-endpoint");
  if (ep.port == 0) {
    throw RendezvousError("--rdzv-endpoint " + ep.to_string() +
                          ": a multi-node job needs a fixed port, not 0");
  }
  StoreRendezvous::Config c = common_config(p);
  c.backend = "c10d";
  c.endpoint = ep.to_string();
  c.round.node_rank = p.node_rank.value_or(-1);  // the node descriptor's "not given"
  c.round.join_timeout = conf.join_timeout.value_or(600s);
  const bool host = conf.is_host.value_or(is_this_host(ep.host, p.local_addr.value_or("")));
  if (p.local_addr) {
    c.round.advertise_addr = *p.local_addr;
  } else {
    // Found once the endpoint resolves: the source address of the route towards it.
    c.find_address = [ep, host, hostname = c.round.hostname] {
      return find_published_address(ep, host, hostname);
    };
  }
  if (is_loopback_host(ep.host) && !p.local_addr) {  // INFO: as static's above
    spdlog::info(
        "c10d rendezvous: the endpoint {} is a loopback address: only agents on this "
        "machine can join; use an address the other nodes can reach",
        ep.to_string());
  } else if (p.local_addr && is_loopback_host(*p.local_addr) && !is_loopback_host(ep.host)) {
    spdlog::warn(
        "c10d rendezvous: this node would advertise the loopback address {}; set "
        "--local-addr to an address the other nodes can reach",
        *p.local_addr);
  }
  c.round.bind_addr = p.local_addr && is_ip_literal(*p.local_addr) ? *p.local_addr : "";
  auto rs = std::make_shared<TcpRendezvousStore>();
  rs->endpoint = ep;
  rs->backend = "c10d";
  rs->run_id = p.run_id;
  rs->try_host = host;
  rs->must_host = false;
  rs->late_host = !host && !conf.is_host && is_loopback_host(ep.host);
  rs->read_timeout = conf.read_timeout.value_or(60s);
  rs->refused_limit = std::min<Ms>(rs->read_timeout, c.round.join_timeout);
  return finish(std::move(c), rs);
}

// --rdzv-endpoint of etcd-v3: comma-separated client URLs or host[:port] (default 2379),
// each checked (RendezvousError naming the bad one).
std::vector<std::string> etcd_endpoints(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty()) continue;
    parse_etcd_endpoint(item);
    out.push_back(item);
  }
  if (out.empty()) {
    throw RendezvousError(
        "--rdzv-backend etcd-v3 needs --rdzv-endpoint: the etcd members' client URLs, "
        "comma-separated (e.g. http://10.0.0.1:2379,http://10.0.0.2:2379)");
  }
  return out;
}

// The members to reach and how, from --rdzv-endpoint and --rdzv-conf.
EtcdOptions etcd_options(const RdzvConf& conf, const std::vector<std::string>& endpoints) {
  using namespace std::chrono_literals;
  EtcdOptions o;
  o.endpoints = endpoints;
  // torchrun's protocol=https: TLS for the members given as host:port (a URL says its own).
  if (conf.etcd_protocol == "https") {
    for (auto& e : o.endpoints) {
      if (e.find("://") == std::string::npos) e = "https://" + e;
    }
  }
  o.cacert = conf.cacert.value_or("");
  o.cert = conf.cert.value_or("");
  o.key = conf.key.value_or("");
  o.request_timeout = conf.read_timeout.value_or(5s);
  o.failover_timeout = conf.failover_timeout.value_or(30s);
  return o;
}

std::string etcd_prefix(const RdzvConf& conf) { return conf.etcd_prefix.value_or("/ddprun/rdzv"); }

std::unique_ptr<RendezvousHandler> make_etcd(const RendezvousParams& p,
                                             const std::vector<std::string>& endpoints) {
  using namespace std::chrono_literals;
  const RdzvConf& conf = p.conf;
  warn_unused_conf_keys(
      conf,
      {"join_timeout", "last_call_timeout", "keep_alive_interval", "keep_alive_max_attempt",
       "read_timeout", "failover_timeout", "etcd_prefix", "prefix", "cacert", "cert", "key",
       "ca_cert", "ssl_cert", "ssl_cert_key", "protocol", "workers_port", "use_agent_store",
       "job_check", "timeout"},
      "etcd-v3");
  EtcdRendezvous::Config c;
  c.etcd.endpoints = endpoints;
  // torchrun's protocol=https: TLS for the members given as host:port (a URL says its own).
  if (conf.etcd_protocol == "https") {
    for (auto& e : c.etcd.endpoints) {
      if (e.find("://") == std::string::npos) e = "https://" + e;
    }
  }
  c.etcd.cacert = conf.cacert.value_or("");
  c.etcd.cert = conf.cert.value_or("");
  c.etcd.key = conf.key.value_or("");
  c.etcd.request_timeout = conf.read_timeout.value_or(5s);
  c.etcd.failover_timeout = conf.failover_timeout.value_or(30s);
  c.prefix = conf.etcd_prefix.value_or("/ddprun/rdzv");
  c.round = round_config(p);
  c.round.node_rank = p.node_rank.value_or(-1);
  c.round.join_timeout = conf.join_timeout.value_or(conf.timeout.value_or(600s));
  const EtcdEndpoint first = parse_etcd_endpoint(endpoints.front());
  if (p.local_addr) {
    c.round.advertise_addr = *p.local_addr;
  } else {
    std::string routed = routed_local_address(Endpoint{first.host, first.port});
    c.round.advertise_addr = !routed.empty() ? routed : c.round.hostname;
  }
  c.round.bind_addr = p.local_addr && is_ip_literal(*p.local_addr) ? *p.local_addr : "";
  // Checks the TLS files now (a usage error), connects on the first call.
  return std::make_unique<EtcdRendezvous>(std::move(c));
}

}  // namespace

Backend parse_backend(const std::string& name) {
  if (name == "static") return Backend::kStatic;
  if (name == "c10d") return Backend::kC10d;
  if (name == "etcd-v3") return Backend::kEtcdV3;
  // Said once, by make_rendezvous_handler (after the launcher set up its logging).
  if (!backend_alias(name).empty()) return Backend::kEtcdV3;
  throw RendezvousError("unknown --rdzv-backend '" + name + "' (supported: static, c10d, etcd-v3)");
}

std::string backend_alias(const std::string& name) {
  return name == "etcd" || name == "etcd-v2" ? name : "";
}

std::unique_ptr<RendezvousHandler> make_rendezvous_handler(const RendezvousParams& params) {
  // Checked whatever the node count, so a typo fails at once (exit 2), never after
  // join_timeout of connection attempts (or on the day the job grows to two nodes).
  if (params.backend == Backend::kEtcdV3) {
    if (!params.backend_alias.empty()) {
      spdlog::warn(
          "--rdzv-backend {}: ddprun speaks etcd's v3 API (etcd 3.4+, no --enable-v2 needed); "
          "using etcd-v3",
          params.backend_alias);
    }
    const std::vector<std::string> endpoints = etcd_endpoints(params.endpoint);
    if (params.max_nodes == 1) return std::make_unique<LocalRendezvous>(params);
    return make_etcd(params, endpoints);
  }
  if (!params.endpoint.empty()) parse_endpoint(params.endpoint, -1, "--rdzv-endpoint");
  if (params.backend == Backend::kStatic) static_node_rank(params);
  if (params.max_nodes == 1) {
    // One node needs no rendezvous traffic, whatever the backend: only the workers' store.
    return std::make_unique<LocalRendezvous>(params);
  }
  if (params.backend == Backend::kStatic) return make_static(params);
  return make_c10d(params);
}

std::unique_ptr<BoardReader> make_board_reader(const RendezvousParams& params,
                                               std::chrono::milliseconds timeout) {
  if (params.backend == Backend::kEtcdV3) {
    EtcdOptions o = etcd_options(params.conf, etcd_endpoints(params.endpoint));
    o.request_timeout = std::min(o.request_timeout, timeout);
    o.failover_timeout = timeout;
    o.silent_member_timeout = timeout;
    return std::make_unique<EtcdBoardReader>(std::move(o),
                                             etcd_prefix(params.conf) + "/" + params.run_id + "/");
  }
  if (params.endpoint.empty() && !params.master_addr) {
    throw RendezvousError("--rdzv-endpoint host[:port] is needed: the job's rendezvous store");
  }
  const int default_port = params.backend == Backend::kStatic
                               ? params.master_port.value_or(kDefaultMasterPort)
                               : kDefaultC10dPort;
  const Endpoint ep = params.endpoint.empty()
                          ? Endpoint{*params.master_addr, default_port}
                          : parse_endpoint(params.endpoint, default_port, "--rdzv-endpoint");
  const std::string backend = params.backend == Backend::kStatic ? "static" : "c10d";
  return std::make_unique<StoreBoardReader>(connect_rendezvous_reader(ep, params.run_id, timeout),
                                            backend + " at " + ep.to_string());
}

}  // namespace ddprun::rdzv
