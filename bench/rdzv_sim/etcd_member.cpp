// etcd_member.cpp: EtcdMember and etcd_counters (etcd_member.h): starting a throwaway etcd
// for ddprun-rdzv-sim and reading its Prometheus /metrics over a plain socket.
#include "bench/rdzv_sim/etcd_member.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "base/sys_error.h"
#include "store/core/host_port.h"

namespace ddprun::bench {
namespace {

// A port the kernel just gave to a bind on 127.0.0.1 (released at once: etcd binds it a
// moment later; a collision makes the start fail with etcd's own message).
int loopback_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw_errno("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const int err = errno;
    ::close(fd);
    throw_errno("bind 127.0.0.1:0", err);
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

void split_url(const std::string& url, std::string& host, int& port) {
  std::string_view rest = url;
  if (rest.rfind("http://", 0) == 0) rest.remove_prefix(7);
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  std::string_view port_text;
  store::split_host_port(rest, host, port_text);
  auto p = store::parse_port(port_text);
  if (!p || host.empty()) throw std::runtime_error("not an http://host:port etcd URL: " + url);
  port = *p;
}

}  // namespace

std::string http_get(const std::string& host, int port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw_errno("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot connect to " + store::format_host_port(host, port));
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: " + host + "\r\n\r\n";
  std::string out;
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
    char buf[65536];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, n);
  }
  ::close(fd);
  const auto body = out.find("\r\n\r\n");
  if (body == std::string::npos) {
    throw std::runtime_error("no HTTP reply from " + store::format_host_port(host, port) + path);
  }
  return out.substr(body + 4);
}

EtcdMember::EtcdMember(const std::string& binary) {
  namespace fs = std::filesystem;
  if (::access(binary.c_str(), X_OK) != 0) {
    throw std::runtime_error(binary + " is not an executable (" + errno_text(errno) +
                             "); install Debian's etcd-server or pass --etcd-bin");
  }
  const fs::path base = fs::exists("/dev/shm") ? "/dev/shm" : fs::temp_directory_path();
  std::string tmpl = (base / "ddprun-rdzv-sim-etcd.XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw_errno("mkdtemp " + tmpl);
  dir_ = tmpl;
  const int client = loopback_port(), peer = loopback_port();
  url_ = "http://127.0.0.1:" + std::to_string(client);
  const std::string peer_url = "http://127.0.0.1:" + std::to_string(peer);
  std::vector<std::string> args = {binary,
                                   "--name=sim",
                                   "--data-dir=" + dir_ + "/data",
                                   "--listen-client-urls=" + url_,
                                   "--advertise-client-urls=" + url_,
                                   "--listen-peer-urls=" + peer_url,
                                   "--initial-advertise-peer-urls=" + peer_url,
                                   "--initial-cluster=sim=" + peer_url,
                                   "--initial-cluster-state=new",
                                   "--log-level=warn",
                                   "--logger=zap"};
  const std::string log = dir_ + "/etcd.log";
  pid_ = ::fork();
  if (pid_ < 0) throw_errno("fork");
  if (pid_ == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < until) {
    try {
      if (http_get("127.0.0.1", client, "/health").find("true") != std::string::npos) return;
    } catch (const std::runtime_error&) {
    }
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::ifstream in(log);
  std::string line, last;
  while (std::getline(in, line)) last = line;
  const bool exited = pid_ < 0;
  stop();
  throw std::runtime_error(binary + " did not become healthy" +
                           (exited ? " (it exited)" : " in 30 s") + ": " + last);
}

EtcdMember::~EtcdMember() { stop(); }

void EtcdMember::stop() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    dir_.clear();
  }
}

Counters etcd_counters(const std::vector<std::string>& urls) {
  Counters c;
  for (const auto& url : urls) {
    std::string host;
    int port = 0;
    split_url(url, host, port);
    std::istringstream body(http_get(host, port, "/metrics"));
    for (std::string line; std::getline(body, line);) {
      if (line.empty() || line[0] == '#') continue;
      const auto sp = line.rfind(' ');
      if (sp == std::string::npos) continue;
      const auto value = static_cast<std::uint64_t>(std::strtod(line.c_str() + sp + 1, nullptr));
      if (line.rfind("grpc_server_started_total", 0) == 0) {
        c.requests += value;
      } else if (line.rfind("etcd_network_client_grpc_received_bytes_total", 0) == 0) {
        c.bytes_in += value;
      } else if (line.rfind("etcd_network_client_grpc_sent_bytes_total", 0) == 0) {
        c.bytes_out += value;
      }
    }
  }
  return c;
}

}  // namespace ddprun::bench
