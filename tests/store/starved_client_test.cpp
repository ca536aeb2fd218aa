// starved_client_test.cpp: a TcpStore client and its store starved together by real
// load (both threads SCHED_IDLE on one CPU beside busy-looping processes, as on a machine
// running more agents than it has cores): the client's reply waits discount the time its
// own thread was not scheduled, so an answer that is there does not turn into a timeout;
// and a store slower than the wait (a frozen ddprun-store) whose release crosses the
// client's CANCEL_WAIT counts as released.
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "store/tcp_store_client.h"
#include "store/tcp_store_server.h"
#include "tests/support/store_process.h"

namespace ddprun::store {
namespace {

using namespace std::chrono_literals;

int first_allowed_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) return cpu;
  }
  return 0;
}

bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return ::sched_setaffinity(0, sizeof set, &set) == 0;
}

// Busy-looping processes pinned to `cpu`, at the normal policy, killed on destruction.
struct Hogs {
  std::vector<pid_t> pids;
  Hogs(int count, int cpu) {
    for (int i = 0; i < count; ++i) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        pin_to(cpu);
        volatile int sink = 0;
        for (;;) (void)sink;  // a volatile read: a side effect, so the loop is kept
      }
      if (pid > 0) pids.push_back(pid);
    }
  }
  ~Hogs() {
    for (pid_t pid : pids) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

TEST_CASE("TcpStore: a client starved with its store by real load does not time out on it",
          "[client][net][load]") {
  const int cpu = first_allowed_cpu();
  std::promise<void> ready;
  std::promise<void> loaded;
  int answered = 0;
  int asked = 0;
  std::string error;
  bool readied = false;
  std::thread starved([&] {
    // The io thread started below inherits this thread's CPU and policy.
    sched_param none{};
    if (!pin_to(cpu) || ::pthread_setschedparam(::pthread_self(), SCHED_IDLE, &none) != 0) {
      error = "cannot pin the thread or make it SCHED_IDLE";
      ready.set_value();
      return;
    }
    try {
      ServerOptions so;
      so.host = "127.0.0.1";
      TcpStoreServer server(so);
      TcpStoreOptions co;
      co.host = "127.0.0.1";
      co.port = server.start();
      co.timeout = 30s;
      TcpStore store(co);
      store.set("k", "v");
      readied = true;
      ready.set_value();
      loaded.get_future().wait();
      // A present key: the store answers STOP_WAITING at once, when it runs. Measured
      // here: a SCHED_IDLE thread beside two busy processes wakes 0.7-3 s late.
      for (; asked < 4; ++asked) answered += store.wait_for({"k"}, 100ms) ? 1 : 0;
    } catch (const std::exception& e) {
      error = e.what();
      if (!readied) ready.set_value();
    }
  });
  ready.get_future().wait();
  {
    Hogs hogs(error.empty() ? 2 : 0, cpu);  // forked here: at the normal policy
    loaded.set_value();
    starved.join();
  }
  INFO(error);
  REQUIRE(error.empty());
  CHECK(answered == asked);
}

TEST_CASE("TcpStore: a timed wait whose release crosses its cancel reports the key there",
          "[client][net]") {
  test::StoreProcess proc(DDPRUN_STORE_BIN);
  TcpStoreOptions co;
  co.host = "127.0.0.1";
  co.port = proc.port();
  TcpStore store(co);
  store.set("k", "v");
  proc.freeze();  // the WAIT waits unread; the client's slice ends; its CANCEL_WAIT follows
  std::thread thaw([&] {
    std::this_thread::sleep_for(300ms);
    proc.thaw();  // then the store reads both: STOP_WAITING, WAIT_CANCELED
  });
  const bool there = store.wait_for({"k"}, 100ms);
  thaw.join();
  CHECK(there);
  CHECK(store.get("k") == "v");  // the connection is in sync
}

}  // namespace
}  // namespace ddprun::store
