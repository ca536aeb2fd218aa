// ddprun-rdzv-sim: the in-process rendezvous simulator (docs/benchmarks.md, "Rendezvous
// simulator"). N agents, each a thread of this one process, run the real join logic
// (make_rendezvous_handler: c10d or etcd-v3, as the launcher builds it) against a real
// store: a TcpStoreServer on loopback that no agent hosts, counted at the server
// (TcpStoreServer::stats; with --store-process in a forked child of its own), or a real
// etcd, counted from its /metrics. Per N it reports one round: requests, bytes and wall
// time to form, the rounds it took (1 when nothing cascaded), then the exit barrier's. Run
// by bench/run (bench.py) and by a ctest. Single-threaded apart from the agents' threads.
#include <pthread.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/text.h"
#include "bench/rdzv_sim/etcd_member.h"
#include "bench/rdzv_sim/forked_store.h"
#include "bench/rdzv_sim/preflight_phase.h"
#include "bench/rdzv_sim/stall_phase.h"
#include "rendezvous/registry.h"
#include "rendezvous/rendezvous.h"
#include "store/tcp_store_server.h"

namespace ddprun::bench {
namespace {

using Clock = std::chrono::steady_clock;
using Handler = std::unique_ptr<rdzv::RendezvousHandler>;

struct Options {
  std::vector<int> nodes{4, 16, 64};
  std::string backend = "c10d";
  bool json = false;
  double timeout_s = 120;
  double hold_s = 0;
  std::vector<std::string> etcd;  // external members; empty = start one
  std::string etcd_bin = "/usr/bin/etcd";
  std::string log_level = "error";
  int expect_rounds = 0;       // > 0: a size whose agents took another number of rounds fails
  bool store_process = false;  // c10d: the store in a forked child, not among the agents
  int stall_ranks = 0;         // > 0: the job-wide stall phase, this many ranks per node
  double stall_timeout_s = 3;
  bool preflight = false;  // the pre-flight check's board traffic after forming
};

// One phase's cost at the store host.
struct Phase {
  double wall_s = 0;
  Counters delta;
};

struct Result {
  int n = 0;
  std::string status = "ok";  // or "skipped: ..." / "failed: ..."
  std::string note;
  double spawn_s = 0;  // starting the N agent threads
  Phase form, hold, stall, preflight, exit;
  PreflightPhase checked;  // the pre-flight phase's outcome (when run)
  int stall_ranks = 0;     // the stall phase's ranks per node (0: not run)
  StallPhase verdict;
  int rounds = 0;       // rounds the agents went through (1: the first one formed)
  int failed = 0;       // agents whose next_rendezvous() threw
  int exit_failed = 0;  // agents whose exit barrier timed out
};

Counters minus(const Counters& a, const Counters& b) {
  return {a.requests - b.requests, a.bytes_in - b.bytes_in, a.bytes_out - b.bytes_out};
}

long read_long(const char* path) {
  std::ifstream in(path);
  std::string s;
  in >> s;
  return parse_int<long>(s).value_or(-1);
}

// Tasks that exist now, machine-wide (the 4th field of /proc/loadavg is running/total).
long tasks_now() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c, d;
  in >> a >> b >> c >> d;
  auto slash = d.find('/');
  return slash == std::string::npos ? -1 : parse_int<long>(d.substr(slash + 1)).value_or(-1);
}

// Open files per agent in this process: 2 store connections, both ends here unless the
// store is a process of its own.
long files_per_agent(const Options& o) { return o.store_process ? 2 : 4; }

// Why N agents cannot run here ("" when they can): threads (pid_max is shared by every
// thread of the machine: an agent's join and its round watch) and open files.
std::string limits_say_no(int n, const Options& o) {
  const long threads = (o.backend == "c10d" ? 2L : 3L) * n + 256;
  const long pid_max = read_long("/proc/sys/kernel/pid_max");
  const long tasks = tasks_now();
  if (pid_max > 0 && tasks > 0 && tasks + threads > pid_max) {
    return "needs about " + std::to_string(threads) + " threads; kernel.pid_max is " +
           std::to_string(pid_max) + " and " + std::to_string(tasks) + " tasks exist";
  }
  const long pids = read_long("/sys/fs/cgroup/pids/pids.max");
  if (pids > 0 && tasks + threads > pids) {
    return "needs about " + std::to_string(threads) + " threads; the cgroup's pids.max is " +
           std::to_string(pids);
  }
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  const long per = files_per_agent(o);
  const rlim_t files = per * static_cast<rlim_t>(n) + 256;
  if (rl.rlim_cur < files) {
    return "needs about " + std::to_string(files) + " open files (2 store connections per agent" +
           (o.store_process ? "" : ", both ends in this process") + "); RLIMIT_NOFILE is " +
           std::to_string(rl.rlim_cur) + " and this process may not raise its hard limit (" +
           std::to_string(rl.rlim_max) + "; that takes CAP_SYS_RESOURCE): at most " +
           std::to_string((static_cast<long>(rl.rlim_cur) - 256) / per) + " agents fit";
  }
  return "";
}

// Lets the largest size fit: RLIMIT_NOFILE up to what it needs (the hard limit too where
// this process may raise it), and 256 KiB stacks for every thread from now on (the
// handlers' own threads included), so that 16 384 agents do not reserve 8 MiB each.
void prepare_process(int max_n) {
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  const rlim_t want = 4 * static_cast<rlim_t>(max_n) + 1024;  // enough either way
  if (rl.rlim_max < want) {
    rlimit more{want, want};
    if (::setrlimit(RLIMIT_NOFILE, &more) == 0) rl = more;
  }
  rl.rlim_cur = rl.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &rl);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  pthread_setattr_default_np(&attr);
  pthread_attr_destroy(&attr);
}

// Runs fn(i) for i in [0, n) on a thread each (all at once: they block on each other),
// joins them; returns the time the last thread took to start, or the error of a thread
// that could not start (then `give_up` runs first, to make the started ones return).
std::string run_threads(int n, const std::function<void(int)>& fn,
                        const std::function<void()>& give_up, double& spawn_s,
                        Clock::duration bound) {
  std::vector<std::thread> ts;
  ts.reserve(static_cast<std::size_t>(n));
  std::atomic<int> finished{0};
  const auto t0 = Clock::now();
  std::string error;
  for (int i = 0; i < n; ++i) {
    try {
      ts.emplace_back([&fn, &finished, i] {
        fn(i);
        finished.fetch_add(1);
      });
    } catch (const std::system_error& e) {
      error = "could not start agent thread " + std::to_string(i) + ": " + e.what();
      give_up();
      break;
    }
  }
  spawn_s = std::chrono::duration<double>(Clock::now() - t0).count();
  // A handler stuck past its own timeouts is told to give up (interrupt()), once.
  while (error.empty() && finished.load() < static_cast<int>(ts.size())) {
    if (Clock::now() - t0 > bound) {
      error = "agents still busy " +
              std::to_string(static_cast<long>(std::chrono::duration<double>(bound).count())) +
              " s after the start: interrupted";
      give_up();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (auto& t : ts) t.join();
  return error;
}

rdzv::RendezvousParams agent_params(const Options& o, int n, int i, const std::string& endpoint) {
  rdzv::RendezvousParams p;
  p.backend = rdzv::parse_backend(o.backend);
  p.run_id = "sim" + std::to_string(::getpid()) + "-" + std::to_string(n);
  p.endpoint = endpoint;
  p.min_nodes = p.max_nodes = n;
  // 127.0.1.1 onwards: never 127.0.0.1, the store's address, so no agent hosts the store.
  p.local_addr = "127.0." + std::to_string(1 + i / 250) + "." + std::to_string(1 + i % 250);
  p.local_world_size = 1;
  p.job_command = {"--no-python", "true"};
  p.conf.join_timeout = std::chrono::milliseconds(static_cast<long>(o.timeout_s * 1000));
  if (o.backend == "c10d") p.conf.is_host = false;  // the store runs here, not in an agent
  return p;
}

// One size: N handlers, one round, the exit barrier; the counters read by `counters`.
Result simulate(const Options& o, int n, const std::function<std::string(int)>& endpoint,
                const std::function<Counters()>& counters) {
  Result r;
  r.n = n;
  std::vector<Handler> hs;
  for (int i = 0; i < n; ++i) {
    hs.push_back(rdzv::make_rendezvous_handler(agent_params(o, n, i, endpoint(i))));
  }
  auto interrupt_all = [&] {
    for (auto& h : hs) h->interrupt();
  };
  std::vector<std::optional<rdzv::RendezvousInfo>> infos(static_cast<std::size_t>(n));
  std::vector<Clock::time_point> done(static_cast<std::size_t>(n));
  std::atomic<int> failed{0};
  // The join and the exit barrier are bounded by --timeout; past it and the store's read
  // timeout (60 s), the run is stuck.
  const auto grace =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.timeout_s + 90));
  std::string first_error;
  std::mutex mu;
  const Counters c0 = counters();
  const auto t0 = Clock::now();
  std::string err = run_threads(
      n,
      [&](int i) {
        try {
          infos[static_cast<std::size_t>(i)] = hs[static_cast<std::size_t>(i)]->next_rendezvous();
        } catch (const std::exception& e) {
          if (failed.fetch_add(1) == 0) {
            std::lock_guard lock(mu);
            first_error = e.what();
          }
        }
        done[static_cast<std::size_t>(i)] = Clock::now();
      },
      interrupt_all, r.spawn_s, grace);
  const auto t1 = *std::max_element(done.begin(), done.end());
  r.form = {std::chrono::duration<double>(std::max(t1, t0) - t0).count(), minus(counters(), c0)};
  r.failed = failed.load();
  std::set<int> rounds, ranks;
  for (const auto& info : infos) {
    if (!info) continue;
    rounds.insert(info->round);
    ranks.insert(info->group_rank);
    r.rounds = std::max(r.rounds, info->round + 1);
    if (info->group_world_size != n) r.note = "a round formed with fewer than N nodes";
  }
  if (!err.empty()) {
    r.status = "failed: " + err;
  } else if (r.failed > 0) {
    r.status = "failed: " + std::to_string(r.failed) + " of " + std::to_string(n) +
               " agents did not join (first: " + first_error + ")";
  } else if (rounds.size() != 1 || static_cast<int>(ranks.size()) != n || !r.note.empty()) {
    r.status = "failed: the agents disagree on the round (" + std::to_string(rounds.size()) +
               " rounds, " + std::to_string(ranks.size()) + " distinct group ranks)";
  }
  if (r.status == "ok" && o.hold_s > 0) {
    const Counters h0 = counters();
    const auto th = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(o.hold_s));
    r.hold = {std::chrono::duration<double>(Clock::now() - th).count(), minus(counters(), h0)};
  }
  if (r.status == "ok" && o.stall_ranks > 0) {
    const Counters s0 = counters();
    const auto ts = Clock::now();
    const auto timeout = std::chrono::milliseconds(static_cast<long>(o.stall_timeout_s * 1000));
    r.stall_ranks = o.stall_ranks;
    r.verdict = run_stall_phase(hs, o.stall_ranks, timeout, std::chrono::seconds(60));
    r.stall = {std::chrono::duration<double>(Clock::now() - ts).count(), minus(counters(), s0)};
    if (r.verdict.undecided > 0 || !r.verdict.same) {
      r.status = "failed: stall verdict: " + std::to_string(r.verdict.undecided) +
                 " agents without one" + (r.verdict.same ? "" : ", not the same on every agent");
    }
  }
  if (r.status == "ok" && o.preflight) {
    const Counters p0 = counters();
    const auto tp = Clock::now();
    r.checked = run_preflight_phase(hs, std::chrono::seconds(60));
    r.preflight = {std::chrono::duration<double>(Clock::now() - tp).count(), minus(counters(), p0)};
    if (r.checked.undecided > 0 || !r.checked.same || r.checked.action != "run") {
      r.status = "failed: pre-flight verdict: " + std::to_string(r.checked.undecided) +
                 " agents without one" + (r.checked.same ? "" : ", not the same on every agent") +
                 ", action " + r.checked.action;
    }
  }
  if (r.status == "ok") {
    std::atomic<int> exit_failed{0};
    const Counters e0 = counters();
    const auto te = Clock::now();
    const auto bound = std::chrono::milliseconds(static_cast<long>(o.timeout_s * 1000));
    double ignored = 0;
    err = run_threads(
        n,
        [&](int i) {
          if (!hs[static_cast<std::size_t>(i)]->exit_barrier(bound)) exit_failed.fetch_add(1);
        },
        interrupt_all, ignored, grace);
    r.exit = {std::chrono::duration<double>(Clock::now() - te).count(), minus(counters(), e0)};
    r.exit_failed = exit_failed.load();
    if (!err.empty()) r.status = "failed: exit barrier: " + err;
    if (r.exit_failed > 0) {
      r.status = "failed: " + std::to_string(r.exit_failed) + " agents' exit barrier timed out";
    }
  } else {
    interrupt_all();
  }
  for (auto& h : hs) h->shutdown();
  return r;
}

// One size against a fresh store (c10d): in this process, or with --store-process in a
// forked child.
Result simulate_c10d(const Options& o, int n) {
  // 2 connections per agent to one address: past the ephemeral port range (one source
  // address, 127.0.0.1) the store listens on every address and agents spread their
  // endpoints over 127.0.0.1-16 (the same store; its keys do not name the endpoint).
  long lo = 32768, hi = 60999;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> lo >> hi;
  const int spread = 2L * n + 2048 > hi - lo + 1 ? 16 : 1;
  store::ServerOptions so;
  so.host = spread > 1 ? "0.0.0.0" : "127.0.0.1";
  std::optional<store::TcpStoreServer> server;
  std::optional<ForkedStore> forked;
  std::uint16_t port = 0;
  std::function<Counters()> counters;
  if (o.store_process) {
    forked.emplace(so);
    port = forked->port();
    counters = [&] { return forked->stats(); };
  } else {
    server.emplace(so);
    port = server->start();
    counters = [&] { return server->stats(); };
  }
  Result r = simulate(
      o, n,
      [&](int i) {
        return "127.0.0." + std::to_string(1 + i % spread) + ":" + std::to_string(port);
      },
      counters);
  if (server) server->stop();
  if (spread > 1 && r.note.empty()) {
    r.note = "store on 0.0.0.0, endpoints spread over 127.0.0.1-" + std::to_string(spread);
  }
  if (o.store_process)
    r.note += std::string(r.note.empty() ? "" : "; ") + "store in its own process";
  return r;
}

std::string join(const std::vector<std::string>& xs) {
  std::string out;
  for (const auto& x : xs) out += (out.empty() ? "" : ",") + x;
  return out;
}

double per(std::uint64_t x, int n) { return static_cast<double>(x) / n; }

nlohmann::json to_json(const Result& r) {
  auto phase = [&](const Phase& p) {
    return nlohmann::json{{"wall_s", p.wall_s},
                          {"requests", p.delta.requests},
                          {"bytes_in", p.delta.bytes_in},
                          {"bytes_out", p.delta.bytes_out},
                          {"requests_per_agent", per(p.delta.requests, r.n)},
                          {"bytes_in_per_agent", per(p.delta.bytes_in, r.n)},
                          {"bytes_out_per_agent", per(p.delta.bytes_out, r.n)}};
  };
  return {
      {"n", r.n},
      {"status", r.status},
      {"note", r.note},
      {"spawn_s", r.spawn_s},
      {"rounds", r.rounds},
      {"failed_agents", r.failed},
      {"form", phase(r.form)},
      {"hold", phase(r.hold)},
      {"stall", phase(r.stall)},
      {"stall_verdict_after_timeout_s", r.verdict.latency_s},
      {"stall_bytes_per_rank",
       r.stall_ranks > 0 ? static_cast<double>(r.stall.delta.bytes_in + r.stall.delta.bytes_out) /
                               (static_cast<double>(r.n) * r.stall_ranks)
                         : 0.0},
      {"stall_headline", r.verdict.headline},
      {"preflight", phase(r.preflight)},
      {"preflight_last_s", r.checked.last_s},
      {"preflight_median_s", r.checked.median_s},
      {"preflight_value_bytes", r.checked.value_bytes},
      {"exit", phase(r.exit)}};
}

void print_row(const Result& r, std::FILE* f) {
  if (r.status.rfind("skipped", 0) == 0) {
    std::fprintf(f, "%6d  %s\n", r.n, r.status.c_str());
  } else {
    std::fprintf(f, "%6d  %6d  %8.3f  %9llu  %8.1f  %9.0f  %9.0f  %8.1f  %8.3f  %s%s%s\n", r.n,
                 r.rounds, r.form.wall_s, static_cast<unsigned long long>(r.form.delta.requests),
                 per(r.form.delta.requests, r.n), per(r.form.delta.bytes_in, r.n),
                 per(r.form.delta.bytes_out, r.n), per(r.exit.delta.requests, r.n), r.exit.wall_s,
                 r.status.c_str(), r.note.empty() ? "" : "; ", r.note.c_str());
    if (r.stall_ranks > 0) {
      std::fprintf(f,
                   "        stall verdict on every agent %.2f s after the timeout, %.0f bytes "
                   "per rank through the store (%d ranks per node)\n",
                   r.verdict.latency_s,
                   static_cast<double>(r.stall.delta.bytes_in + r.stall.delta.bytes_out) /
                       (static_cast<double>(r.n) * r.stall_ranks),
                   r.stall_ranks);
    }
    if (!r.checked.action.empty()) {
      std::fprintf(f,
                   "        pre-flight board traffic: verdict on every agent after %.2f s "
                   "(median %.2f s), %.0f requests and %.0f bytes per agent (findings %zu "
                   "bytes a node)\n",
                   r.checked.last_s, r.checked.median_s, per(r.preflight.delta.requests, r.n),
                   per(r.preflight.delta.bytes_in + r.preflight.delta.bytes_out, r.n),
                   r.checked.value_bytes);
    }
  }
  std::fflush(f);
}

int run(int argc, char** argv) {
  Options o;
  CLI::App app{
      "ddprun-rdzv-sim: N rendezvous agents as threads of one process, running ddprun's "
      "real join logic against a real store (c10d: an in-process TcpStoreServer on "
      "loopback) or etcd; reports per N one round's requests, bytes and time at the store "
      "host (docs/benchmarks.md)"};
  app.add_option("--nodes", o.nodes, "agent counts, comma-separated or repeated")
      ->delimiter(',')
      ->check(CLI::Range(2, 1 << 20));
  app.add_option("--backend", o.backend, "c10d or etcd-v3")
      ->check(CLI::IsMember({"c10d", "etcd-v3"}));
  app.add_flag("--json", o.json, "one JSON document on stdout (the table goes to stderr)");
  app.add_option("--timeout", o.timeout_s, "seconds: join timeout, and the exit barrier's")
      ->check(CLI::Range(1.0, 3600.0));
  app.add_option("--hold", o.hold_s, "seconds to stay formed, counting the heartbeats' cost")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--etcd", o.etcd, "etcd-v3: these members' client URLs instead of a fresh one")
      ->delimiter(',');
  app.add_option("--etcd-bin", o.etcd_bin, "etcd-v3: the etcd to start");
  app.add_option("--expect-rounds", o.expect_rounds,
                 "exit 1 unless every size formed in this many rounds (tests: 1)")
      ->check(CLI::Range(1, 1000));
  app.add_flag("--store-process", o.store_process,
               "c10d: run the store in a forked process of its own, so that this one holds "
               "2 open files per agent instead of 4 (twice the agents under RLIMIT_NOFILE)");
  app.add_option("--stall-ranks", o.stall_ranks,
                 "after forming: the job-wide stall verdict with this many ranks per node "
                 "(the real JobStallJudge on every agent)")
      ->check(CLI::Range(0, 64));
  app.add_option("--stall-timeout", o.stall_timeout_s, "the stall phase's --stall-timeout")
      ->check(CLI::Range(0.5, 600.0));
  app.add_flag("--preflight", o.preflight,
               "after forming: the pre-flight check's board traffic on every agent (the real "
               "exchange and judge, findings of a real check's size, no check program)");
  app.add_option("--log-level", o.log_level, "the agents' log level (spdlog)")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  CLI11_PARSE(app, argc, argv);
  // The agents' log lines go to stderr: stdout is the table, or the JSON document.
  spdlog::set_default_logger(spdlog::stderr_color_mt("agents"));
  spdlog::set_level(spdlog::level::from_str(o.log_level));
  prepare_process(*std::max_element(o.nodes.begin(), o.nodes.end()));

  std::unique_ptr<EtcdMember> etcd;
  std::vector<std::string> urls = o.etcd;
  std::string where = o.store_process ? "a TcpStoreServer on loopback in a forked process"
                                      : "an in-process TcpStoreServer on loopback";
  try {
    if (o.backend == "etcd-v3") {
      if (urls.empty()) {
        etcd = std::make_unique<EtcdMember>(o.etcd_bin);
        urls = {etcd->url()};
        where = "a fresh 1-member etcd (" + etcd->url() + ", data in /dev/shm)";
      } else {
        where = "etcd at " + join(urls);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddprun-rdzv-sim: %s\n", e.what());
    return 1;
  }
  std::FILE* table = o.json ? stderr : stdout;
  std::fprintf(table, "ddprun-rdzv-sim: backend %s, store: %s; per agent = / N\n",
               o.backend.c_str(), where.c_str());
  std::fprintf(table, "%6s  %6s  %8s  %9s  %8s  %9s  %9s  %8s  %8s  %s\n", "N", "rounds", "form_s",
               "requests", "req/agt", "in B/agt", "out B/agt", "exit r/a", "exit_s", "status");
  nlohmann::json out = {
      {"backend", o.backend}, {"store", where}, {"results", nlohmann::json::array()}};
  bool bad = false;
  for (int n : o.nodes) {
    Result r;
    r.n = n;
    if (std::string why = limits_say_no(n, o); !why.empty()) {
      r.status = "skipped: " + why;
    } else {
      try {
        if (o.backend == "c10d") {
          r = simulate_c10d(o, n);
        } else {
          std::string endpoint = join(urls);
          r = simulate(
              o, n, [&](int) { return endpoint; }, [&] { return etcd_counters(urls); });
        }
      } catch (const std::exception& e) {
        r.status = std::string("failed: ") + e.what();
      }
    }
    if (o.expect_rounds > 0 && r.status == "ok" && r.rounds != o.expect_rounds) {
      r.status = "failed: formed in " + std::to_string(r.rounds) + " rounds, expected " +
                 std::to_string(o.expect_rounds);
    }
    bad = bad || r.status.rfind("failed", 0) == 0;
    print_row(r, table);
    out["results"].push_back(to_json(r));
  }
  if (o.json) std::printf("%s\n", out.dump().c_str());
  return bad ? 1 : 0;
}

}  // namespace
}  // namespace ddprun::bench

int main(int argc, char** argv) {
  try {
    return ddprun::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddprun-rdzv-sim: %s\n", e.what());
    return 1;
  }
}
