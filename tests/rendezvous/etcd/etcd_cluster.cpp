// etcd_cluster.cpp: EtcdCluster (see etcd_cluster.h).
#include "tests/rendezvous/etcd/etcd_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "rendezvous/etcd/etcd_client.h"

extern char** environ;

namespace ddprun::test {

EtcdCluster::EtcdCluster(int members) {
  std::string initial;
  for (int i = 0; i < members; ++i) {
    client_.push_back(std::make_unique<ReservedPort>());
    peer_.push_back(std::make_unique<ReservedPort>());
    initial += (i ? "," : "") + ("m" + std::to_string(i)) +
               "=http://127.0.0.1:" + std::to_string(peer_.back()->number());
  }
  for (int i = 0; i < members; ++i) {
    const std::string name = "m" + std::to_string(i);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_[i]->number());
    std::vector<std::string> args = {
        "/usr/bin/etcd", "--name=" + name, "--data-dir=" + dir_.str() + "/" + name,
        "--listen-client-urls=" + url(i), "--advertise-client-urls=" + url(i),
        "--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
        "--initial-cluster=" + initial, "--initial-cluster-state=new",
        "--initial-cluster-token=ddprun-test",
        // Short elections keep the failover tests short.
        "--heartbeat-interval=100", "--election-timeout=1000"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string log_file = dir_.str() + "/" + name + ".log";
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_file.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      for (std::size_t k = 0; k < pids_.size(); ++k) kill(static_cast<int>(k));
      throw std::runtime_error("cannot start /usr/bin/etcd (apt-get install etcd-server)");
    }
    pids_.push_back(pid);
  }
  // Ready when a write is accepted (a leader exists) through every member.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int i = 0; i < members; ++i) {
    rdzv::EtcdOptions o;
    o.endpoints = {url(i)};
    o.failover_timeout = std::chrono::seconds(1);
    o.request_timeout = std::chrono::seconds(2);
    rdzv::EtcdClient c(o);
    for (;;) {
      try {
        c.put("/ddprun-test/ready", "1");
        break;
      } catch (const std::exception& e) {
        if (std::chrono::steady_clock::now() > deadline) {
          std::string why = e.what();
          for (std::size_t k = 0; k < pids_.size(); ++k) kill(static_cast<int>(k));
          throw std::runtime_error("etcd member " + std::to_string(i) +
                                   " not ready within 60 s: " + why);
        }
      }
    }
  }
}

EtcdCluster::~EtcdCluster() {
  for (std::size_t i = 0; i < pids_.size(); ++i) kill(static_cast<int>(i));
}

std::string EtcdCluster::url(int i) const {
  return "http://127.0.0.1:" + std::to_string(client_.at(i)->number());
}

std::vector<std::string> EtcdCluster::urls() const {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < client_.size(); ++i) out.push_back(url(static_cast<int>(i)));
  return out;
}

void EtcdCluster::kill(int i) {
  pid_t& pid = pids_.at(i);
  if (pid <= 0) return;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  pid = -1;
}

std::string EtcdCluster::log(int i) const {
  return slurp(dir_.path / ("m" + std::to_string(i) + ".log"));
}

}  // namespace ddprun::test
