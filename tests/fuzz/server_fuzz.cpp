// server_fuzz.cpp: see server_fuzz.h.
#include "tests/fuzz/server_fuzz.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "store/tcp_store_server.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/support/raw_client.h"

namespace ddprun::store::fuzz {
namespace {

using namespace std::chrono_literals;
using testing::RawClient;

ServerOptions small_caps() {
  ServerOptions o;
  o.host = "127.0.0.1";
  o.limits.max_key_bytes = 256;
  o.limits.max_value_bytes = 64 * 1024;
  o.limits.max_keys_per_request = 64;
  o.limits.max_request_bytes = 256 * 1024;
  o.max_reply_bytes = 4 * 1024 * 1024;  // over the 1 MiB above which replies are streamed
  o.max_connection_output_bytes = 32 * 1024;
  o.max_output_bytes = 256 * 1024;
  o.max_connections = 16;
  return o;
}

// The output that may be unsent at once: the budget, plus one reply or piece that
// crossed it, plus a small reply per connection.
constexpr std::size_t kUnsentBound = 256 * 1024 + 1024 * 1024 + 3 * 64 * 1024;

TcpStoreServer& server() {
  static TcpStoreServer s = [] {
    spdlog::set_level(spdlog::level::off);  // every input is bad input; no log flood
    return TcpStoreServer(small_caps());
  }();
  static const bool started = (s.start(), true);
  (void)started;
  return s;
}

// Sends what the server takes within a short while (it may stop reading or close).
void send_some(RawClient& c, std::string_view bytes) {
  const auto deadline = std::chrono::steady_clock::now() + 200ms;
  while (!bytes.empty() && std::chrono::steady_clock::now() < deadline) {
    const ssize_t n = ::send(c.fd(), bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      pollfd p{c.fd(), POLLOUT, 0};
      ::poll(&p, 1, 10);
    } else {
      return;  // closed by the server
    }
  }
}

// Reads replies until the connection is quiet for a few ms (or closed).
void drain(RawClient& c) {
  char buf[64 * 1024];
  const auto deadline = std::chrono::steady_clock::now() + 500ms;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{c.fd(), POLLIN, 0};
    if (::poll(&p, 1, 5) <= 0) return;
    if (::recv(c.fd(), buf, sizeof buf, MSG_DONTWAIT) <= 0) return;
  }
}

}  // namespace

void run_server(const std::uint8_t* data, std::size_t size) {
  TcpStoreServer& s = server();
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  {
    RawClient reader(s.port());
    RawClient silent(s.port());
    // In two writes, so that requests also arrive split.
    const std::size_t cut = size / 2;
    send_some(silent, bytes.substr(0, cut));
    send_some(reader, bytes.substr(0, cut));
    drain(reader);
    send_some(silent, bytes.substr(cut));
    send_some(reader, bytes.substr(cut));
    drain(reader);
    FUZZ_CHECK(s.unsent_output_bytes() <= kUnsentBound);
    // Whatever those two did, a new client is served at once.
    RawClient probe(s.port());
    probe.send(std::string_view("\x00\xce\xf7\x85\x3c\x0d\x2a\x00\x00\x00", 10));
    const auto echo = probe.read_exact(4, 10s);
    FUZZ_CHECK(echo && *echo == std::string_view("\x2a\x00\x00\x00", 4));
  }
  s.reset();
  FUZZ_CHECK(s.unsent_output_bytes() == 0);
  FUZZ_CHECK(s.pending_waits() == 0);
}

}  // namespace ddprun::store::fuzz
