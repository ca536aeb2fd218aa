// workers_store.cpp: WorkersStore (workers_store.h), the workers' store an agent hosts,
// emptied before each attempt.
#include "rendezvous/workers_store.h"

#include "rendezvous/endpoint.h"
#include "rendezvous/rendezvous.h"
#include "store/tcp_store_server.h"

namespace ddprun::rdzv {

WorkersStore::WorkersStore() = default;
WorkersStore::~WorkersStore() { stop(); }

std::uint16_t WorkersStore::open_attempt(const std::string& bind_host, std::uint16_t port) {
  if (server_) {
    server_->reset();
    return server_->port();
  }
  store::ServerOptions options;
  options.host = bind_host;
  options.port = port;
  auto server = std::make_unique<store::TcpStoreServer>(options);
  try {
    server->start();
  } catch (const std::exception& e) {
    throw RendezvousError("cannot host the workers' store at " +
                          Endpoint{bind_host.empty() ? "*" : bind_host, port}.to_string() + ": " +
                          e.what());
  }
  server_ = std::move(server);
  return server_->port();
}

void WorkersStore::stop() {
  if (server_) server_->stop();
  server_.reset();
}

std::uint16_t WorkersStore::port() const { return server_ ? server_->port() : 0; }

std::uint16_t WorkersStore::port_for_worker_rank0(int port, const std::string& bind_host) {
  return port > 0 ? static_cast<std::uint16_t>(port) : free_tcp_port(bind_host);
}

}  // namespace ddprun::rdzv
