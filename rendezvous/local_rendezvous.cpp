// local_rendezvous.cpp: LocalRendezvous (local_rendezvous.h), the one-node handler: a
// workers' store emptied every round, no rendezvous traffic.
#include "rendezvous/local_rendezvous.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <vector>

#include "rendezvous/endpoint.h"
#include "rendezvous/rdzv_conf.h"

namespace ddprun::rdzv {
namespace {

// MASTER_ADDR of a one-node job (see LocalRendezvous's constructor).
std::string workers_master_addr(const RendezvousParams& p) {
  if (p.local_addr) return *p.local_addr;
  if (p.backend == Backend::kStatic) return p.master_addr.value_or("127.0.0.1");
  // torchrun's c10d and etcd handlers give the workers socket.getfqdn(). Workers that
  // cannot reach this machine by it (a name that does not resolve, or to an address of
  // another machine: a stale DNS record) would wait out their store timeout; they get
  // loopback instead.
  std::string fqdn = host_fqdn();
  const std::vector<std::string> addrs = resolve_addresses(fqdn);
  const std::vector<std::string> mine = local_interface_addresses();
  const bool here = !addrs.empty() && std::all_of(addrs.begin(), addrs.end(), [&](auto& a) {
    return is_loopback_host(a) || std::find(mine.begin(), mine.end(), a) != mine.end();
  });
  if (here) return fqdn;
  spdlog::info(
      "this machine's name {} does not resolve to its own addresses only ({}); the workers "
      "get MASTER_ADDR=127.0.0.1 (torchrun would give them {})",
      fqdn, addrs.empty() ? std::string("none") : fmt::format("{}", fmt::join(addrs, ", ")), fqdn);
  return "127.0.0.1";
}

}  // namespace

LocalRendezvous::LocalRendezvous(RendezvousParams params) : params_(std::move(params)) {
  advertised_addr_ = workers_master_addr(params_);
  agent_store_ = params_.conf.use_agent_store.value_or(true);
}

LocalRendezvous::~LocalRendezvous() { shutdown(); }

RendezvousInfo LocalRendezvous::next_rendezvous() {
  if (closed_.load()) {
    throw RendezvousClosedError("rendezvous '" + params_.run_id + "' is closed: the job has ended");
  }
  if (!agent_store_) {
    // Worker rank 0 hosts the workers' store (for PyTorch builds without libuv, whose
    // workers cannot use an agent's store): a port free now, --master-port if given.
    RendezvousInfo info = local_info();
    info.round = round_++;
    info.master_port = WorkersStore::port_for_worker_rank0(params_.master_port.value_or(0),
                                                           bind_host_for(advertised_addr_));
    info.use_agent_store = false;
    return info;
  }
  const bool first = !workers_store_.running();
  // One node: the workers reach the store through the advertised address, so binding
  // that literal suffices; a name (e.g. "localhost", which may resolve to ::1 or
  // 127.0.0.1) gets all interfaces so every resolution finds the listener.
  const std::uint16_t port = static_cast<std::uint16_t>(params_.master_port.value_or(0));
  try {
    workers_store_.open_attempt(bind_host_for(advertised_addr_), port);
  } catch (const RendezvousError& e) {
    if (!params_.master_port) throw;
    throw RendezvousError(std::string(e.what()) +
                          " (is another job using --master-port? omit it to let the OS choose a "
                          "free port)");
  }
  if (first) {
    spdlog::debug("workers' store listening on {}",
                  Endpoint{advertised_addr_, workers_store_.port()}.to_string());
  } else {
    ++round_;
  }
  RendezvousInfo info = local_info();
  info.round = round_;
  info.master_port = workers_store_.port();
  return info;
}

RendezvousInfo LocalRendezvous::local_info() const {
  RendezvousInfo info;
  info.group_rank = 0;
  info.group_world_size = 1;
  info.rank_base = 0;
  info.world_size = params_.local_world_size;
  info.master_addr = advertised_addr_;
  info.use_agent_store = true;
  return info;
}

std::uint16_t LocalRendezvous::port() const { return workers_store_.port(); }

void LocalRendezvous::shutdown() { workers_store_.stop(); }

}  // namespace ddprun::rdzv
