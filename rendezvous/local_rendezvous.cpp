#include "rendezvous/local_rendezvous.h"

#include <spdlog/spdlog.h>

#include "rendezvous/endpoint.h"
#include "store/tcp_store_server.h"

namespace ddprun::rdzv {

LocalRendezvous::LocalRendezvous(RendezvousParams params) : params_(std::move(params)) {
  advertised_addr_ = params_.local_addr.value_or(params_.master_addr.value_or("127.0.0.1"));
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
    info.master_port = params_.master_port ? static_cast<std::uint16_t>(*params_.master_port)
                                           : free_tcp_port(bind_host_for(advertised_addr_));
    info.use_agent_store = false;
    return info;
  }
  if (!server_) {
    store::ServerOptions options;
    // One node: the workers reach the store through the advertised address, so binding
    // that literal suffices; a name (e.g. "localhost", which may resolve to ::1 or
    // 127.0.0.1) gets all interfaces so every resolution finds the listener.
    options.host = bind_host_for(advertised_addr_);
    options.port = static_cast<std::uint16_t>(params_.master_port.value_or(0));
    auto server = std::make_unique<store::TcpStoreServer>(options);
    try {
      server->start();
    } catch (const std::exception& e) {
      throw RendezvousError(
          "cannot host the workers' store at " +
          Endpoint{options.host.empty() ? "*" : options.host, options.port}.to_string() + ": " +
          e.what() +
          (params_.master_port ? " (is another job using --master-port? omit it to let the "
                                 "OS choose a free port)"
                               : ""));
    }
    server_ = std::move(server);
    spdlog::debug("workers' store listening on {}",
                  Endpoint{advertised_addr_, server_->port()}.to_string());
  } else {
    server_->reset();
    ++round_;
  }
  RendezvousInfo info = local_info();
  info.round = round_;
  info.master_port = server_->port();
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
  info.node_names = {advertised_addr_};
  return info;
}

std::uint16_t LocalRendezvous::port() const { return server_ ? server_->port() : 0; }

void LocalRendezvous::shutdown() {
  if (server_) server_->stop();
}

}  // namespace ddprun::rdzv
