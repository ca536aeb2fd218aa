// etcd_client.h: EtcdClient, a small client of etcd's v3 JSON gateway (the grpc-gateway
// that etcd 3.4+ serves on its client URLs: POST /v3/kv/range, /v3/kv/put, /v3/kv/txn,
// /v3/kv/deleterange, /v3/kv/compaction, /v3/lease/grant, /v3/lease/keepalive,
// /v3/lease/revoke; JSON bodies, keys and values base64, 64-bit numbers as decimal
// strings) over HTTP/1.1 with Boost.Beast, plain or TLS (EtcdConnection,
// etcd_connection.h). Every call goes to the member it last reached; on a connection loss,
// a timeout or an "unavailable" answer (no leader, leader changed) it fails over to the
// next listed member, round the list, until the call's failover deadline. Watches are
// EtcdWatch's (etcd_watch.h). Used by EtcdRendezvous (etcd_rendezvous.h); contract tests
// against a real etcd in tests/rendezvous/etcd_client_test.cpp.
// Thread-safety: one EtcdClient per thread (it owns one connection); the cancel flag may
// be set from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
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
  // When set and true, a call gives up between tries (RendezvousInterruptedError).
  const std::atomic<bool>* cancel = nullptr;
};

// A member was reachable but refused or could not serve the call, or none was reachable
// before the failover deadline: one line naming the endpoints and the last cause.
class EtcdError : public RendezvousConnectionError {
 public:
  using RendezvousConnectionError::RendezvousConnectionError;
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

class EtcdClient {
 public:
  // Checks the endpoints (RendezvousError on a bad one, none, or a TLS file that cannot
  // be read); connects on the first call.
  explicit EtcdClient(EtcdOptions options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // `revision` (when given) receives the store revision of the answer: watch from
  // revision + 1 to see every later change (EtcdWatch).
  std::optional<EtcdKv> get(const std::string& key, std::int64_t* revision = nullptr);
  // Every key starting with `prefix`, in key order (values omitted with keys_only);
  // `revision` receives the store revision of the answer.
  std::vector<EtcdKv> get_prefix(const std::string& prefix, bool keys_only = false,
                                 std::int64_t* revision = nullptr);
  std::int64_t put(const std::string& key, const std::string& value, std::int64_t lease = 0);
  // Deletes `key` (or every key under it with `prefix`); the number deleted.
  std::int64_t del(const std::string& key, bool prefix = false);
  // All `compares` hold -> the puts are applied atomically (true); else nothing (false).
  bool txn(const std::vector<EtcdCompare>& compares, const std::vector<EtcdPut>& puts);

  // Drops the history before `revision` (etcd's compaction): a watch from an older
  // revision is then refused with the compact revision (EtcdWatch reports it).
  void compact(std::int64_t revision);

  // A lease of `ttl_s` seconds; its id.
  std::int64_t lease_grant(std::int64_t ttl_s);
  // Renews the lease: its TTL, or 0 when it has expired or was revoked.
  std::int64_t lease_keepalive(std::int64_t id);
  // Revokes the lease (its keys are deleted); an unknown lease is not an error.
  void lease_revoke(std::int64_t id);

  // "etcd at http://a:1, http://b:2": how messages name the cluster.
  std::string where() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun::rdzv
