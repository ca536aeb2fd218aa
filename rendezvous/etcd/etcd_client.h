// etcd_client.h: EtcdClient, a small client of etcd's v3 JSON gateway over HTTP/1.1
// (EtcdConnection: Beast, plain or TLS), failing over along the member list. Used by
// EtcdRendezvous and EtcdSession; contract tests against a real etcd in
// tests/rendezvous/etcd/etcd_client_test.cpp. Thread-safety: one EtcdClient per thread
// (it owns one connection); the cancel flag may be set from any thread; the process-wide
// record of the members a call left (one warning per member and minute) is locked.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/etcd/etcd_types.h"

namespace ddprun::rdzv {

// The gateway etcd 3.4+ serves on its client URLs: POST /v3/kv/range, /v3/kv/put,
// /v3/kv/txn, /v3/kv/deleterange, /v3/kv/compaction, /v3/lease/grant,
// /v3/lease/keepalive, /v3/lease/revoke; JSON bodies, keys and values base64, 64-bit
// numbers as decimal strings. Every call goes to the member it last reached, requiring a
// leader; on a connection loss, a timeout or an "unavailable" answer (no leader, leader
// changed) it fails over to the next listed member, round the list, until the call's
// failover deadline; a member that failed slowly (silent, stalled) is tried again in that
// call only once every member has. Leaving a member is said in one warning line. Watches
// are EtcdWatch's (etcd_watch.h).
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
  // How many keys there are under `prefix` (none in the answer).
  std::int64_t count(const std::string& prefix);
  // The key under `prefix` created first (keys only: no value) and, in `count`, how many
  // keys there are: one answer of one key however many there are (etcd sorts).
  std::optional<EtcdKv> oldest(const std::string& prefix, std::int64_t* count = nullptr);
  // The same for the key created last.
  std::optional<EtcdKv> newest(const std::string& prefix, std::int64_t* count = nullptr);
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
  std::optional<EtcdKv> first_by_creation(const std::string& prefix, const char* order,
                                          std::int64_t* count);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun::rdzv
