// tcp_store_server.h: TcpStoreServer, the c10d TCPStore-compatible server: PyTorch 1.13/2.0
// (legacy) and 2.2+ (modern, VALIDATE first) clients on one port, the dialect decided per
// connection from its first bytes, over one shared KvState. Used by ddprun-store, the
// agent (workers' store) and the c10d rendezvous.
// Thread-safety: start/stop/reset/port may be called from any thread; the server runs
// its own single io thread, the only user of its KvState.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "store/core/protocol.h"

namespace ddprun::store {

struct ServerOptions {
  // Address to bind. Empty = all interfaces: "::" dual-stack, falling back to 0.0.0.0.
  std::string host;
  std::uint16_t port = 0;  // 0 = let the OS choose; port() tells which
  Limits limits;
  // Connections beyond this are accepted and closed at once with one log line.
  std::size_t max_connections = 65536;
  // Output caps (docs/protocol.md "Output limits"). A request whose reply would be
  // larger than max_reply_bytes closes its connection with one line; a connection with
  // max_connection_output_bytes unsent is not read until its client reads; a reply that
  // would take the unsent bytes of all connections over max_output_bytes waits until it
  // fits (small replies to a connection with nothing unsent never wait). GET and
  // MULTI_GET replies over 1 MiB are sent in 1 MiB pieces, each built when the socket
  // has taken the last, from the values as they were when the request came.
  std::size_t max_reply_bytes = std::size_t{64} << 20;
  std::size_t max_connection_output_bytes = std::size_t{4} << 20;
  std::size_t max_output_bytes = std::size_t{256} << 20;
  // A client silent this long (its host cut off, powered off or rebooted: no reset ever
  // comes) has its connection closed by the kernel's keepalive and user timeout, and its
  // session, waits and memory reclaimed (base/silent_peer.h). The rendezvous store uses
  // the heartbeat budget; 0 keeps the kernel's defaults (idle connections forever).
  std::chrono::milliseconds silent_peer_timeout{60'000};
};

// What the server has served since start(), for benchmarks (bench/rdzv_sim.cpp): requests
// handled (parsed and answered or streamed), bytes read from and written to clients.
struct ServerStats {
  std::uint64_t requests = 0;
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
};

class TcpStoreServer {
 public:
  explicit TcpStoreServer(ServerOptions options);
  ~TcpStoreServer();  // stop()
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  // Binds, listens and starts the io thread. Returns the bound port.
  // Throws StoreError naming host:port and the OS reason when binding fails.
  std::uint16_t start();

  // Closes the listener and every connection, joins the io thread. Idempotent.
  void stop();

  // Closes every connection and clears every key, queue and waiter, keeping the
  // listener: a fresh key space on the same port (between worker-group attempts).
  // Blocks until done.
  void reset();

  std::uint16_t port() const;

  // Number of open client connections (for tests and the launcher's diagnostics).
  std::size_t connection_count() const;

  // Reply bytes not yet written, all connections together (for tests and diagnostics).
  // Blocks until the io thread has answered. REQUIRES: not called on the io thread.
  std::size_t unsent_output_bytes();

  // Pending WAIT and BARRIER registrations (for tests and diagnostics). Blocks until the
  // io thread has answered. REQUIRES: not called on the io thread.
  std::size_t pending_waits();

  // Counters so far, read between two turns of the io thread (one consistent snapshot:
  // every reply a client has read is counted). REQUIRES: not called on the io thread.
  ServerStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun::store
