// agent_preflight.cpp: the Agent's part of bad-node handling (issue 34, docs/preflight.md):
// the block-list read before the first rendezvous, --preflight between a round's forming
// and its workers' start: the check (launcher/preflight/), its table, and what the verdict
// makes this node do (start, leave the job, re-form the round without the bad nodes, or
// stop); and, with --exclude-stragglers, this node leaving a running job as the straggler
// (launcher/jobwide/straggler_watch.h). Part of agent.h's state machine.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdio>

#include "launcher/agent.h"
#include "launcher/preflight/blocklist.h"
#include "launcher/preflight/preflight.h"

namespace ddprun::launcher {
namespace {

// How the block-list and the verdict name this node: its --local-addr (several agents may
// share a host name, and the address is what a cluster's tools name), else the host name.
std::string node_key(const LaunchConfig& config) {
  return config.local_addr ? *config.local_addr : host_fqdn();
}

// Adds `entries` to --blocklist `file` (none: nothing), saying how many were new.
void keep_on_blocklist(const std::string& file, const std::vector<preflight::BlockEntry>& entries,
                       const char* who) {
  if (file.empty() || entries.empty()) return;
  try {
    if (const int added = preflight::add_to_blocklist(file, entries)) {
      spdlog::warn("{}: {} host(s) added to the block-list {}", who, added, file);
    }
  } catch (const preflight::BlocklistError& e) {
    spdlog::warn("{}", e.what());
  }
}

}  // namespace

bool Agent::blocked(RunResult& result) {
  if (config_.blocklist_file.empty() || preflight_passed_ || round_) return false;
  try {
    const auto entry =
        preflight::find_host(preflight::read_blocklist(config_.blocklist_file), node_key(config_));
    if (!entry) return false;
    spdlog::error(
        "this host ({}) is on the block-list {}{}{}: it does not join the job (remove its "
        "line to use it again)",
        entry->host, config_.blocklist_file, entry->when.empty() ? "" : " since " + entry->when,
        entry->why.empty() ? "" : ": " + entry->why);
  } catch (const preflight::BlocklistError& e) {
    spdlog::error("{}", e.what());
  }
  failure_ = {ExitClass::kInfrastructure, 0};
  handler_->shutdown();
  result.outcome = RunResult::Outcome::kFailed;
  result.exit_class = failure_.first;
  result.exit_code = exit_code();
  return true;
}

std::optional<Agent::Step> Agent::preflight(const rdzv::RendezvousInfo& info, RunResult& result) {
  std::vector<std::string> env_list;
  for (const auto& [k, v] : agent_env_) env_list.push_back(k + "=" + v);
  int waiting = 0;
  try {
    waiting = handler_->num_nodes_waiting();
  } catch (const std::exception& e) {
    spdlog::debug("num_nodes_waiting: {}", e.what());
  }
  const preflight::Context context{
      .supervisor = supervisor_,
      .board = handler_->job_board(),
      .info = info,
      .python = config_.python_exec,
      .env = std::move(env_list),
      .dir = run_log_dir(),
      .host = node_label(config_.local_addr          ? config_.local_addr
                         : info.node_address.empty() ? std::nullopt
                                                     : std::optional(info.node_address)),
      .key = node_key(config_),
      .address = info.node_address,
      .hosts_store = handler_->hosts_rendezvous_store(),
      .passed_before = preflight_passed_,
      .timeout =
          std::chrono::milliseconds(static_cast<std::int64_t>(config_.preflight_timeout_s * 1000)),
      .grace = grace_,
      .settings = {.slow_factor = config_.preflight_slow_factor,
                   .min_nodes = config_.min_nodes,
                   .waiting = waiting}};
  preflight::Outcome out;
  try {
    out = preflight::run(context);
  } catch (const std::exception& e) {
    spdlog::error("pre-flight check failed: {}", e.what());
    failure_ = {ExitClass::kInfrastructure, 0};
    return finish(result, RunResult::Outcome::kFailed);
  }
  using Kind = preflight::Outcome::Kind;
  using Action = preflight::Verdict::Action;
  if (out.kind == Kind::kSignal) return stopped_by(out.signo, result);
  if (out.kind == Kind::kSkipped) return std::nullopt;
  const preflight::Verdict& v = out.verdict;
  // The whole table on the round's node 0; the others show the bad nodes' rows (a
  // thousand nodes each printing a thousand rows would bury it).
  const bool all_rows = info.group_rank == 0;
  const std::string table = preflight::table(out.nodes, v, all_rows);
  if (v.bad.empty()) {
    preflight_passed_ = true;
    if (all_rows) {
      std::fprintf(stderr, "ddprun: pre-flight check passed on %zu node(s) in %.1f s:\n%s\n",
                   out.nodes.size(), out.seconds, table.c_str());
    } else {
      spdlog::info("pre-flight check passed on {} node(s) in {:.1f} s (the table is on node 0)",
                   out.nodes.size(), out.seconds);
    }
    return std::nullopt;
  }
  std::fprintf(stderr, "ddprun: pre-flight check found %zu bad node(s) of %zu in %.1f s:\n%s\n",
               v.bad.size(), out.nodes.size(), out.seconds, table.c_str());
  bool me = false;
  std::vector<preflight::BlockEntry> entries;
  for (const auto& b : v.bad) {
    const auto& r = out.nodes[static_cast<std::size_t>(b.node)];
    me = me || b.node == info.group_rank;
    if (!r.key.empty()) entries.push_back({r.key, preflight::utc_now(), b.why});
    spdlog::error("pre-flight: node {} {} is bad: {}", b.node, r.host, b.why);
  }
  keep_on_blocklist(config_.blocklist_file, entries, "pre-flight");
  failure_ = {ExitClass::kInfrastructure, 0};
  if (v.action == Action::kStop) {
    spdlog::error("pre-flight: the job stops before its workers start: {}", v.why);
    return finish(result, RunResult::Outcome::kFailed);
  }
  if (me) {
    spdlog::error("pre-flight: this node is left out of the job; the others go on without it");
    return finish(result, RunResult::Outcome::kFailed);
  }
  // Kept for the job: a bad node started again is refused at its first join instead of
  // making the running nodes stop for a new round.
  for (const auto& b : v.bad) {
    try {
      handler_->leave_out(out.nodes[static_cast<std::size_t>(b.node)].address, b.why);
    } catch (const std::exception& e) {
      spdlog::debug("leave_out: {}", e.what());
    }
  }
  preflight_passed_ = true;
  spdlog::warn(
      "pre-flight: the job goes on without the bad node(s) in a new rendezvous round (no "
      "restart spent; a waiting node may take their place)");
  return Step::kRendezvous;
}

Agent::Step Agent::leave_as_straggler(const std::string& why, RunResult& result) {
  spdlog::error(
      "this node leaves the job as a straggler (--exclude-stragglers; node 0's ranking: {}); "
      "the others go on in a new round without it",
      why);
  keep_on_blocklist(config_.blocklist_file,
                    {{node_key(config_), preflight::utc_now(), "straggler: " + why}}, "straggler");
  try {
    // Refused if started again while this job runs (as a node the pre-flight left out).
    if (round_) handler_->leave_out(round_->node_address, "the straggler: " + why);
  } catch (const std::exception& e) {
    spdlog::debug("leave_out: {}", e.what());
  }
  history_->attempt_ended("left out as a straggler");
  stop_workers(SIGTERM);
  failure_ = {ExitClass::kInfrastructure, 0};
  return finish(result, RunResult::Outcome::kFailed);
}

}  // namespace ddprun::launcher
