// etcd_cluster.h: EtcdCluster, a real etcd cluster (Debian's /usr/bin/etcd, 3.4) of n
// members on loopback for the etcd tests: client and peer ports reserved (ReservedPort)
// until etcd binds them, one data dir each in a TempDir, started and waited for in the
// constructor, every member SIGKILLed and reaped in the destructor. Used by
// etcd_client_test.cpp and etcd_rendezvous_test.cpp. Skips nothing: a test that builds one
// on a machine without etcd fails, naming the binary.
// Thread-safety: one thread (the test's).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/support/reserved_port.h"
#include "tests/support/temp_dir.h"

namespace ddprun::test {

class EtcdCluster {
 public:
  explicit EtcdCluster(int members);
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  // "http://127.0.0.1:<port>" of member i, and of every member.
  std::string url(int i) const;
  std::vector<std::string> urls() const;
  // SIGKILLs member i and reaps it (no-op when already gone).
  void kill(int i);
  // The log of member i (its stderr).
  std::string log(int i) const;

 private:
  TempDir dir_;
  std::vector<std::unique_ptr<ReservedPort>> client_, peer_;
  std::vector<pid_t> pids_;
};

}  // namespace ddprun::test
