// tcp_rendezvous_store.cpp: TcpRendezvousStore (tcp_rendezvous_store.h): hosting the
// rendezvous store when this node may, and connecting to it with DNS and connect retries.
#include "rendezvous/c10d/tcp_rendezvous_store.h"

#include <spdlog/spdlog.h>

#include <thread>

#include "rendezvous/progress.h"
#include "rendezvous/rendezvous.h"
#include "rendezvous/round_member.h"
#include "store/prefix_store.h"
#include "store/tcp_store_client.h"
#include "store/tcp_store_server.h"

namespace ddprun::rdzv {
namespace {

using Clock = TcpRendezvousStore::Clock;
using Ms = TcpRendezvousStore::Ms;

// late_host: refusals in a row before another agent hosts.
constexpr Ms kLateHostAfter{5000};
// The port is taken (hosting failed) and nothing accepts connections on it: refusals in a
// row before that is the answer (another agent here binds and listens within microseconds).
constexpr Ms kTakenPortRefusedFor{2000};

// Sleeps `d`, in short slices, or less once `interrupted` is true.
void pause(Ms d, const std::atomic<bool>& interrupted) {
  for (auto until = Clock::now() + d; !interrupted.load() && Clock::now() < until;) {
    std::this_thread::sleep_for(std::min<Clock::duration>(Ms(20), until - Clock::now()));
  }
}

}  // namespace

TcpRendezvousStore::TcpRendezvousStore() = default;
TcpRendezvousStore::~TcpRendezvousStore() = default;

std::string TcpRendezvousStore::where() const {
  return rendezvous_where(run_id, backend + " at " + endpoint.to_string());
}

void TcpRendezvousStore::maybe_host() {
  if (!try_host || host_attempted) return;
  host_attempted = true;
  store::ServerOptions options;
  options.host = bind_host_for(endpoint.host);
  options.port = static_cast<std::uint16_t>(endpoint.port);
  options.silent_peer_timeout = silent_peer;
  auto s = std::make_unique<store::TcpStoreServer>(options);
  try {
    s->start();
    server = std::move(s);
    spdlog::info("{}: this node hosts the rendezvous store", where());
  } catch (const std::exception& e) {
    if (must_host) {
      throw RendezvousError(where() +
                            ": node rank 0 cannot host the rendezvous store: " + e.what());
    }
    // Any reason but a taken port (an address this machine cannot bind, a privileged
    // port) stops every agent of this machine alike, and no other machine has this
    // address: nobody can host it, so say so now rather than at the join timeout.
    if (dynamic_cast<const store::StoreAddressInUseError*>(&e) == nullptr) {
      throw RendezvousError(where() +
                            ": the endpoint is this machine but it cannot host the "
                            "rendezvous store there (" +
                            e.what() + "), nor can any other");
    }
    // Another agent on this machine (or a leftover) holds the port: join as a client.
    port_taken = e.what();
    spdlog::info("{}: could not host the rendezvous store ({}); joining as a client", where(),
                 e.what());
  }
}

std::shared_ptr<store::Store> TcpRendezvousStore::connect(Clock::time_point deadline,
                                                          const std::atomic<bool>& interrupted) {
  return std::make_shared<store::PrefixStore>(kRdzvKeyPrefix + run_id,
                                              connect_raw(deadline, interrupted));
}

void TcpRendezvousStore::clear_worker_keys() {
  std::atomic<bool> never{false};
  auto raw = connect_raw(Clock::now() + read_timeout, never);
  int erased = 0;
  for (const auto& key : raw->list_keys()) {
    if (key.rfind(kRdzvKeyPrefix, 0) != 0) erased += raw->delete_key(key) ? 1 : 0;
  }
  spdlog::debug("{}: erased {} key(s) of earlier attempts' workers", where(), erased);
}

std::shared_ptr<store::Store> TcpRendezvousStore::connect_raw(
    Clock::time_point deadline, const std::atomic<bool>& interrupted) {
  maybe_host();
  // The host reaches its own listener by the literal it bound (or loopback when it
  // bound every interface); others use the endpoint exactly as given.
  auto own_host = [&] {
    return server && bind_host_for(endpoint.host).empty() ? std::string("127.0.0.1")
                                                          : endpoint.host;
  };
  std::string host = own_host();
  auto start = Clock::now();
  auto next_log = start + Ms(3000);
  std::string last_error;
  // The start of the refusals in a row; kNone when the last try was not refused (a plain
  // time point: GCC 12 -O2 sees a false maybe-uninitialized in an optional's).
  constexpr Clock::time_point kNone = Clock::time_point::max();
  Clock::time_point refused_since = kNone;
  // One try's connect and handshake time. Long: a connection the store has not accepted
  // or answered yet (its host busy, a thousand agents connecting at once) is answered in
  // turn, while closing it for a fresh one costs the store an accept and a session more
  // and starts the wait over. Refused connects return at once whatever this is.
  const Ms attempt = std::min<Ms>(read_timeout, Ms(8000));
  int waiting_lines = 0;
  auto log_waiting = [&] {
    if (Clock::now() < next_log) return;
    spdlog::log(progress_level(waiting_lines++),
                "{}: waiting for the rendezvous store: {}; {} s left", where(), last_error,
                std::chrono::duration_cast<std::chrono::seconds>(deadline - Clock::now()).count());
    next_log = Clock::now() + Ms(5000);
  };
  for (;;) {
    if (interrupted.load()) {
      throw RendezvousInterruptedError(where() + ": interrupted while connecting to the store");
    }
    auto now = Clock::now();
    if (now >= deadline) {
      throw RendezvousConnectionError(where() + ": cannot reach the rendezvous store: " +
                                      (last_error.empty() ? "timed out" : last_error));
    }
    // A name the cluster's DNS does not know yet (nodes starting together): keep
    // resolving it until join_timeout, and say so.
    if (std::string why = resolution_error(host); !why.empty()) {
      last_error = "the name '" + host + "' does not resolve (" + why +
                   "); retrying name resolution (this node's published address is chosen once it "
                   "resolves)";
      log_waiting();
      pause(Ms(250), interrupted);
      continue;
    }
    store::TcpStoreOptions options;
    options.host = host;
    options.port = static_cast<std::uint16_t>(endpoint.port);
    options.timeout = read_timeout;
    options.silent_peer_timeout = silent_store;
    options.connect_timeout =
        std::min<Ms>(attempt, std::chrono::duration_cast<Ms>(deadline - now) + Ms(1));
    options.world_size.reset();
    options.wait_for_workers = false;
    options.cancel = &interrupted;  // interrupt(): give up between connection tries
    try {
      auto tcp = std::make_shared<store::TcpStore>(options);
      if (!last_error.empty()) spdlog::warn("{}: connected to the rendezvous store", where());
      connected = true;
      return tcp;
    } catch (const store::StoreConnectionError& e) {
      last_error = e.what();
      if (dynamic_cast<const store::StoreRefusedError*>(&e) == nullptr) {
        refused_since = kNone;
      } else if (refused_since == kNone) {
        refused_since = Clock::now();
      }
    } catch (const store::StoreError& e) {
      throw RendezvousConnectionError(where() + ": " + endpoint.to_string() +
                                      " does not look like a ddprun/TCPStore store: " + e.what());
    }
    const Ms refused = refused_since == kNone
                           ? Ms(0)
                           : std::chrono::duration_cast<Ms>(Clock::now() - refused_since);
    if (late_host && !host_attempted && !connected && refused >= kLateHostAfter) {
      spdlog::warn("{}: nobody hosts this loopback endpoint; this node hosts it", where());
      try_host = true;
      maybe_host();  // a port taken meanwhile: another agent here won the race
      host = own_host();
      continue;
    }
    if (!port_taken.empty() && refused >= kTakenPortRefusedFor) {
      throw RendezvousConnectionError(
          where() + ": " + port_taken +
          ", and nothing accepts connections there: another program holds the port without "
          "listening; free it or choose another --rdzv-endpoint port");
    }
    if (refused_limit > Ms(0) && refused >= refused_limit) {
      throw RendezvousConnectionError(
          where() + ": no agent hosts the rendezvous store: connections refused for " +
          std::to_string(refused.count() / 1000) +
          " s (read_timeout); the agent on the endpoint's machine hosts it: start it there, or "
          "give it --rdzv-conf is_host=1 if it does not see the address as its own");
    }
    log_waiting();
    // TcpStore already backs off within connect_timeout; a short pause on instant
    // failures (e.g. name resolution) keeps this loop from spinning.
    pause(Ms(100), interrupted);
  }
}

void TcpRendezvousStore::shutdown() {
  if (server) server->stop();
}

std::shared_ptr<store::Store> connect_rendezvous_reader(const Endpoint& endpoint,
                                                        const std::string& run_id, Ms timeout) {
  store::TcpStoreOptions options;
  options.host = endpoint.host;
  options.port = static_cast<std::uint16_t>(endpoint.port);
  options.timeout = timeout;
  options.connect_timeout = timeout;
  options.silent_peer_timeout = timeout;
  options.world_size.reset();  // no "init/" key: the reader is no participant
  options.wait_for_workers = false;
  try {
    return std::make_shared<store::PrefixStore>(kRdzvKeyPrefix + run_id,
                                                std::make_shared<store::TcpStore>(options));
  } catch (const store::StoreError& e) {
    throw RendezvousConnectionError("the rendezvous store at " + endpoint.to_string() +
                                    " cannot be reached: " + e.what());
  }
}

}  // namespace ddprun::rdzv
