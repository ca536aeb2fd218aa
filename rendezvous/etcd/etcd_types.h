// etcd_types.h: the plain types and pure helpers of the etcd-v3 backend: client options,
// the error, a key-value, a transaction's compare and put, a member's endpoint, base64.
// The bottom of rendezvous/etcd/: EtcdConnection, EtcdClient, EtcdWatch and
// EtcdRendezvous include it. Thread-safety: plain values and pure functions.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/rendezvous.h"

namespace ddprun::rdzv {

struct EtcdOptions {
  // Client URLs: "http://host:port", "https://host:port" or "host[:port]" (port 2379).
  std::vector<std::string> endpoints;
  // TLS (any given, or an https:// endpoint, means TLS for every endpoint): the CA that
  // signed the members' certificates (else the system's), and this client's certificate
  // and key for members that require client certificates.
  std::string cacert, cert, key;
  std::chrono::milliseconds request_timeout{5'000};    // one HTTP exchange
  std::chrono::milliseconds failover_timeout{30'000};  // one call, across all members
  // A member whose kernel acknowledges nothing for this long (a cut link, a host gone) is
  // given up: keepalive probes and TCP_USER_TIMEOUT on every connection
  // (base/silent_peer.h); 0 leaves the kernel's defaults. EtcdRendezvous derives it from
  // the lease (EtcdSession::silent_member_bound).
  std::chrono::milliseconds silent_member_timeout{0};
  // When set and true, a call gives up between tries (RendezvousInterruptedError).
  const std::atomic<bool>* cancel = nullptr;
};

// A member was reachable but refused or could not serve the call, or none was reachable
// before the failover deadline: one line naming the endpoints and the last cause.
class EtcdError : public RendezvousConnectionError {
 public:
  static constexpr std::int64_t kNotFound = 5;  // gRPC NOT_FOUND (e.g. a lease gone)
  explicit EtcdError(const std::string& what, std::int64_t grpc_code = 0)
      : RendezvousConnectionError(what), grpc_code_(grpc_code) {}
  // The gRPC status code etcd answered with; 0 when none (no member reached, no JSON).
  std::int64_t grpc_code() const { return grpc_code_; }

 private:
  std::int64_t grpc_code_;
};

struct EtcdKv {
  std::string key;
  std::string value;
  std::int64_t create_revision = 0;
  std::int64_t mod_revision = 0;
  std::int64_t version = 0;
  std::int64_t lease = 0;
};

// One comparison of a transaction: `target` of `key` compared with a number
// (CREATE / MOD / VERSION revisions; 0 = the key does not exist) or a value.
struct EtcdCompare {
  enum class Target { kCreate, kMod, kVersion, kValue };
  std::string key;
  Target target = Target::kMod;
  std::int64_t number = 0;
  std::string value;  // kValue only
};

struct EtcdPut {
  std::string key;
  std::string value;
  std::int64_t lease = 0;  // 0 = none
};

// Parses "host[:port]" or a URL into what EtcdClient connects to; throws RendezvousError
// naming the text (usage error) on a bad one.
struct EtcdEndpoint {
  bool tls = false;
  std::string host;
  int port = 2379;
  std::string to_string() const;  // "http://host:port"
};
EtcdEndpoint parse_etcd_endpoint(std::string_view text);

std::string base64_encode(std::string_view in);
// nullopt when `in` is not base64.
std::optional<std::string> base64_decode(std::string_view in);

}  // namespace ddprun::rdzv
