// etcd_member.h: the etcd side of ddprun-rdzv-sim (bench/rdzv_sim/): a one-member etcd
// (Debian's /usr/bin/etcd) started on loopback ports with its data in /dev/shm, killed and
// removed by the destructor; and the server-side counters read from any member's
// /metrics (gRPC calls started, gRPC bytes in and out). Thread-safety: one thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "store/tcp_store_server.h"

namespace ddprun::bench {

// Request and byte counters of a server, as the simulator reports them: the fields of
// TcpStoreServer::stats(), which etcd_counters() fills from etcd's /metrics.
using Counters = store::ServerStats;

class EtcdMember {
 public:
  // Starts `binary` and waits (up to 30 s) until /health answers; throws
  // std::runtime_error naming the binary and its log's last line otherwise.
  explicit EtcdMember(const std::string& binary);
  ~EtcdMember();
  EtcdMember(const EtcdMember&) = delete;
  EtcdMember& operator=(const EtcdMember&) = delete;

  const std::string& url() const { return url_; }  // "http://127.0.0.1:<port>"

 private:
  void stop();  // kills and reaps etcd, removes its directory; idempotent

  std::string dir_, url_;
  pid_t pid_ = -1;
};

// The sum over `urls` (etcd client URLs, http only) of grpc_server_started_total (every
// RPC, unary or stream, that the member started, including those of its v3 JSON
// gateway) and etcd_network_client_grpc_{received,sent}_bytes_total. Throws
// std::runtime_error when a member does not answer.
Counters etcd_counters(const std::vector<std::string>& urls);

// The body of GET `path` from http://host:port (HTTP/1.0, no TLS); throws
// std::runtime_error on a connection error.
std::string http_get(const std::string& host, int port, const std::string& path);

}  // namespace ddprun::bench
