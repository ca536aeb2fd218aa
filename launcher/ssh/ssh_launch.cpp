// ssh_launch.cpp: the multi-host launch (see ssh_launch.h): the plan, one supervised ssh
// per host, exits classified per host. Used by main.cpp.
#include "launcher/ssh/ssh_launch.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <random>
#include <set>
#include <string_view>

#include "launcher/process/signals.h"
#include "launcher/process/supervisor.h"
#include "launcher/ssh/ssh_config.h"
#include "launcher/supervision.h"
#include "store/core/host_port.h"

namespace ddprun::launcher {
namespace {

// Exit statuses of ssh and of the remote command that mean "this host never ran the job".
constexpr int kSshFailed = 255;      // ssh: connection, authentication, host key
constexpr int kCannotExecute = 126;  // env: the remote ddprun is not executable
constexpr int kNotFound = 127;       // env: no such remote ddprun
// The remote shell's status for a command killed by signal N is 128 + N (ddprun itself
// exits 0, 1 or 2): the agent died there, while ssh and its link were fine.
constexpr int kSignalBase = 128;
constexpr int kLastSignal = 64;

std::string self_path() {
  std::string buf(PATH_MAX, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size());
  if (n <= 0) return "ddprun";
  buf.resize(static_cast<std::size_t>(n));
  return buf;
}

std::string current_dir() {
  std::string buf(PATH_MAX, '\0');
  if (::getcwd(buf.data(), buf.size()) == nullptr) return "";
  buf.resize(std::char_traits<char>::length(buf.c_str()));
  return buf;
}

std::string generated_run_id() {
  std::random_device rd;
  return fmt::format("ddprun-{:08x}{:04x}", rd(), rd() & 0xffffU);
}

// The last non-empty line of `text`.
std::string last_line(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  const auto nl = text.rfind('\n');
  return std::string(nl == std::string_view::npos ? text : text.substr(nl + 1));
}

// "rank 2 (local_rank: 0), rank 3 (local_rank: 1)" from the failure report a remote agent
// wrote to its stderr (failure_report.cpp: "  rank      : N (local_rank: M)").
std::string failed_ranks(std::string_view tail) {
  static constexpr std::string_view kKey = "  rank      : ";
  std::string out;
  std::set<std::string> seen;
  for (std::size_t at = tail.find(kKey); at != std::string_view::npos;
       at = tail.find(kKey, at + 1)) {
    const auto start = at + kKey.size();
    const auto end = tail.find('\n', start);
    std::string rank(tail.substr(start, end == std::string_view::npos ? tail.npos : end - start));
    if (seen.insert(rank).second) out += (out.empty() ? "rank " : ", rank ") + rank;
  }
  return out;
}

class SshLaunch {
 public:
  SshLaunch(const LaunchConfig& config, SshPlan plan, const std::map<std::string, std::string>& env)
      : config_(config), plan_(std::move(plan)) {
    for (const auto& [k, v] : env) env_.push_back(k + "=" + v);
    lost_.assign(plan_.hosts.size(), false);
  }

  int run(ProcessSupervisor& supervisor) {
    std::vector<WorkerSpec> specs;
    std::vector<UniqueFd> child_ends;
    for (std::size_t i = 0; i < plan_.hosts.size(); ++i) {
      const RemoteHost& h = plan_.hosts[i];
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("pipe2");
      child_ends.emplace_back(fds[0]);
      stdin_writers_.emplace_back(fds[1]);
      WorkerSpec spec;
      spec.local_rank = spec.global_rank = static_cast<int>(i);
      spec.argv = ssh_argv(plan_.job, h);
      spec.env = env_;
      spec.stdin_fd = fds[0];
      spec.line_prefix = "[" + h.name + "]:";
      spec.prefix_all = true;
      if (!config_.log_dir.empty() && config_.log_dir != "/dev/null") {
        const std::string dir = config_.log_dir + "/" + h.name;
        spec.out = {StreamMode::kTee, dir + "/stdout.log", true};
        spec.err = {StreamMode::kTee, dir + "/stderr.log", true};
      }
      specs.push_back(std::move(spec));
    }
    std::string names;
    for (const auto& h : plan_.hosts) names += (names.empty() ? "" : ", ") + h.name;
    spdlog::info("launching on {} host(s) over ssh: {} (rendezvous {}, run id {})",
                 plan_.hosts.size(), names, plan_.endpoint.empty() ? "as given" : plan_.endpoint,
                 plan_.run_id.empty() ? "as given" : plan_.run_id);
    supervisor.start(std::move(specs));
    child_ends.clear();  // only the ssh processes hold the read ends now

    std::size_t exited = 0;
    while (exited < plan_.hosts.size()) {
      const SupervisorEvent ev = supervisor.next_event(std::chrono::seconds(1));
      if (ev.kind == SupervisorEvent::Kind::kSignal) {
        if (ev.signo == SIGUSR1 || ev.signo == SIGUSR2) continue;
        return stop(supervisor, ev.signo);
      }
      if (ev.kind != SupervisorEvent::Kind::kWorkerExited) continue;
      ++exited;
      on_exit(ev.exit);
      if (live_hosts() < plan_.min_nodes) {
        std::fprintf(stderr,
                     "ddprun: error: %d of %zu hosts can run the job and --nnodes needs %d: "
                     "stopping the others\n",
                     live_hosts(), plan_.hosts.size(), plan_.min_nodes);
        end_all(supervisor);
        return 1;
      }
      if (rendezvous_host_lost() && exited < plan_.hosts.size()) {
        std::fprintf(stderr,
                     "ddprun: error: host %s hosted the rendezvous and is lost: the others "
                     "cannot go on; stopping them\n",
                     plan_.hosts.front().name.c_str());
        end_all(supervisor);
        return 1;
      }
    }
    if (failed_ || live_hosts() == 0) return 1;
    if (live_hosts() < static_cast<int>(plan_.hosts.size())) {
      spdlog::warn("the job ran on {} of {} hosts", live_hosts(), plan_.hosts.size());
    }
    return 0;
  }

 private:
  int live_hosts() const { return static_cast<int>(std::count(lost_.begin(), lost_.end(), false)); }

  // The launcher chose the endpoint (the first host) and that host is gone mid-job: the
  // rendezvous store went with its agent, so no other host can finish (an elastic job
  // included).
  bool rendezvous_host_lost() const { return !plan_.endpoint.empty() && lost_.front(); }

  void on_exit(const WorkerExit& e) {
    const auto i = static_cast<std::size_t>(e.local_rank);
    const RemoteHost& h = plan_.hosts[i];
    if (!e.failed()) return;
    const std::string line = last_line(e.stderr_tail);
    if (e.signal != 0) {
      // Not a stop of the launcher's (end_all reports none of these): the host is lost,
      // and its agent stops at the end of its stdin, as sshd closes the session.
      lost_[i] = true;
      std::fprintf(stderr,
                   "ddprun: error: host %s (node rank %d): the launcher's ssh client for it "
                   "was killed by %s: the host is lost (its agent stops as the session "
                   "closes)\n",
                   h.name.c_str(), h.node_rank, signal_name(e.signal).c_str());
    } else if (e.exit_code > kSignalBase && e.exit_code <= kSignalBase + kLastSignal) {
      lost_[i] = true;
      std::fprintf(stderr,
                   "ddprun: error: host %s (node rank %d): the ddprun agent there died of %s "
                   "(the remote shell's status %d; the ssh link was fine)\n",
                   h.name.c_str(), h.node_rank, signal_name(e.exit_code - kSignalBase).c_str(),
                   e.exit_code);
    } else if (e.exit_code == kSshFailed) {
      lost_[i] = true;
      std::string why = line.empty() ? "no message" : line;
      // OpenSSH's "Timeout, server H not responding.": its keep-alives went unanswered.
      if (why.find("not responding") != std::string::npos) {
        why += " (ssh's keep-alives unanswered: its link or the host went silent)";
      }
      std::fprintf(stderr, "ddprun: error: host %s: ssh failed (exit 255): %s\n", h.name.c_str(),
                   why.c_str());
    } else if (e.exit_code == kNotFound || e.exit_code == kCannotExecute) {
      lost_[i] = true;
      std::fprintf(stderr,
                   "ddprun: error: host %s: cannot run %s there (see --remote-ddprun): %s\n",
                   h.name.c_str(), plan_.job.remote_ddprun.c_str(), line.c_str());
    } else {
      failed_ = true;
      const std::string ranks = failed_ranks(e.stderr_tail);
      std::fprintf(stderr, "ddprun: error: host %s (node rank %d) failed with exit code %d%s%s\n",
                   h.name.c_str(), h.node_rank, e.exit_code, ranks.empty() ? "" : ": ",
                   ranks.c_str());
    }
  }

  // Closes every ssh's stdin: each remote agent stops as on SIGTERM (its workers get
  // --shutdown-timeout) and exits, which ends its ssh. ssh processes still running after
  // that grace and a margin are killed (their agents then see end of file all the same).
  // Signal 0 to the ssh processes' groups: only the closed pipe tells the hosts to stop.
  void end_all(ProcessSupervisor& supervisor) {
    stdin_writers_.clear();
    const auto grace = std::chrono::milliseconds(
        static_cast<long long>(config_.shutdown_timeout_s * 1000) + kStopMargin.count());
    // A failure is the stop's doing then; only a host that never ran the job is named.
    for (const WorkerExit& e : supervisor.stop(0, grace)) {
      if (!e.failed() || e.signal != 0) continue;
      if (e.exit_code == kSshFailed || e.exit_code == kNotFound || e.exit_code == kCannotExecute) {
        on_exit(e);
      }
    }
  }

  int stop(ProcessSupervisor& supervisor, int signo) {
    std::fprintf(stderr, "ddprun: received %s: stopping the agents on every host\n",
                 signal_name(signo).c_str());
    end_all(supervisor);
    return 1;
  }

  static constexpr std::chrono::milliseconds kStopMargin{10000};

  const LaunchConfig& config_;
  SshPlan plan_;
  std::vector<std::string> env_;
  std::vector<UniqueFd> stdin_writers_;
  std::vector<bool> lost_;  // by host: never ran the job (ssh or exec failed)
  bool failed_ = false;
};

}  // namespace

SshPlan make_ssh_plan(const LaunchConfig& config, const std::map<std::string, std::string>& env,
                      const std::vector<HostEntry>& hosts, const std::string& self,
                      const std::string& cwd, const std::string& run_id,
                      const std::string& first_address) {
  const SshLaunchOptions& o = config.ssh;
  SshPlan plan;
  RemoteJob& job = plan.job;
  job.ssh_command = split_command_words(o.ssh_command);
  job.ssh_port = o.ssh_port;
  job.remote_ddprun = o.remote_ddprun.empty() ? self : o.remote_ddprun;
  job.cwd = cwd;
  job.env = forwarded_env(env, o.env);
  job.options = o.agent_options;
  const int n = static_cast<int>(hosts.size());
  if (o.given.count("nnodes") > 0) {
    if (config.max_nodes < n) {
      throw UsageError(fmt::format("--nnodes {}:{}: the host list has {} hosts", config.min_nodes,
                                   config.max_nodes, n));
    }
    if (config.min_nodes > n) {
      throw UsageError(fmt::format("--nnodes needs at least {} nodes but the host list has {}",
                                   config.min_nodes, n));
    }
    plan.min_nodes = config.min_nodes;
  } else {
    plan.min_nodes = n;
    job.options.push_back(fmt::format("--nnodes={}", n));
  }
  if (o.given.count("rdzv_backend") == 0) job.options.emplace_back("--rdzv-backend=c10d");
  if (o.given.count("rdzv_endpoint") == 0) {
    plan.endpoint = store::format_host_port(
        first_address.empty() ? host_address(hosts.front().name) : first_address,
        kSshRendezvousPort);
    job.options.push_back("--rdzv-endpoint=" + plan.endpoint);
  }
  if (o.given.count("rdzv_id") == 0) {
    plan.run_id = run_id;
    job.options.push_back("--rdzv-id=" + run_id);
  }
  // ssh's keep-alives follow the rendezvous's heartbeats (issue 33): a host whose link
  // goes silent ends its ssh after the heartbeat budget I x A (whole seconds; 15 s by
  // default), when the rendezvous declares it dead too, and not later.
  const auto interval = config.rdzv_conf.keep_alive_interval.value_or(std::chrono::seconds(5));
  job.alive_interval_s = static_cast<int>(std::max<long long>(1, (interval.count() + 999) / 1000));
  job.alive_count_max = config.rdzv_conf.keep_alive_max_attempt.value_or(3) - 1;
  job.program.push_back(config.training_script);
  job.program.insert(job.program.end(), config.script_args.begin(), config.script_args.end());
  for (int i = 0; i < n; ++i) {
    RemoteHost h;
    h.name = hosts[static_cast<std::size_t>(i)].name;
    h.node_rank = i;
    h.hosts_rendezvous = i == 0 && !plan.endpoint.empty();
    h.nproc = host_nproc(hosts[static_cast<std::size_t>(i)]);
    if (const auto& gpus = hosts[static_cast<std::size_t>(i)].gpus) {
      std::string list;
      for (const int g : *gpus) list += (list.empty() ? "" : ",") + std::to_string(g);
      h.visible_gpus = list;
    }
    plan.hosts.push_back(std::move(h));
  }
  return plan;
}

int run_ssh_launch(const LaunchConfig& config, const std::map<std::string, std::string>& env) {
  SshPlan plan;
  try {
    std::vector<HostEntry> hosts = config.ssh.hostfile.empty() ? parse_hosts_list(config.ssh.hosts)
                                                               : read_hostfile(config.ssh.hostfile);
    hosts = filter_hosts(std::move(hosts), config.ssh.include, config.ssh.exclude);
    // An ssh-config alias is no name the agents can resolve: ask ssh what it connects to.
    std::string first_address;
    if (config.ssh.given.count("rdzv_endpoint") == 0) {
      first_address =
          ssh_config_hostname(split_command_words(config.ssh.ssh_command), hosts.front().name)
              .value_or("");
    }
    plan = make_ssh_plan(config, env, hosts, self_path(), current_dir(), generated_run_id(),
                         first_address);
  } catch (const UsageError& e) {
    return usage_error_exit(e.what());
  }
  return run_supervised(config, Watchdogs::kNone, [&](ProcessSupervisor& supervisor) {
    SshLaunch launch(config, std::move(plan), env);
    return launch.run(supervisor);
  });
}

}  // namespace ddprun::launcher
