// run_history.cpp: RunHistory (run_history.h): torchrun's events and the run record.
#include "launcher/run_history.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

namespace ddprun::launcher {
namespace {

// "2026-11-28T15:04:05.123Z"
std::string iso(std::chrono::system_clock::time_point t) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm utc{};
  ::gmtime_r(&secs, &utc);
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:03}Z", utc, ms % 1000);
}

// Writes `text` to `path` whole or not at all (a temporary file renamed over it).
bool write_whole(const std::string& path, const std::string& text, std::string& error) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    error = std::strerror(errno);
    return false;
  }
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int err = errno;
  if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    error = std::strerror(ok ? errno : err);
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace

RunHistory::RunHistory(const std::string& event_log_handler, Facts facts)
    : events_(event_log_handler), facts_(std::move(facts)) {}

void RunHistory::record(const EventFields& event, std::int64_t total_run_time) const {
  if (!events_.on()) return;
  EventContext c = facts_.context;
  c.total_run_time = total_run_time;
  events_.record(c, event);
}

void RunHistory::round_formed(const rdzv::RendezvousInfo& info, double waited_ms) {
  EventFields event("RENDEZVOUS");
  if (!rounds_.empty()) {  // torchrun's: the previous round's ranks
    event.group_rank = rounds_.back().info.group_rank;
    event.group_world_size = rounds_.back().info.group_world_size;
  }
  event.duration_ms = waited_ms;
  record(event);
  event.state = "ASSIGN_WORKER_RANKS";  // ranks come with the round here
  event.duration_ms = 0.0;
  record(event);
  rounds_.push_back({info, waited_ms, Clock::now()});
}

void RunHistory::attempt_started(int attempt, int restarts_spent) {
  facts_.context.agent_restarts = restarts_spent;
  if (rounds_.empty()) return;
  const rdzv::RendezvousInfo& info = rounds_.back().info;
  for (int lr = 0; lr < facts_.nproc_per_node; ++lr) {
    EventFields start("START");
    start.group_rank = info.group_rank;
    start.group_world_size = info.group_world_size;
    start.worker.emplace(lr, info.rank_base + lr, info.world_size);
    record(start);
  }
  attempts_.push_back({attempt, info.round, Clock::now(), std::nullopt, "", ""});
}

void RunHistory::flight_recorder_dumps(std::string folder) {
  if (attempts_.empty() || attempts_.back().ended) return;
  attempts_.back().flight_recorder = std::move(folder);
}

void RunHistory::attempt_ended(const std::string& why) {
  if (attempts_.empty() || attempts_.back().ended) return;
  attempts_.back().ended = Clock::now();
  attempts_.back().end = why;
}

void RunHistory::job_cause(std::string root_cause, std::vector<std::string> verdict) {
  root_cause_ = std::move(root_cause);
  verdict_ = std::move(verdict);
}

void RunHistory::run_ended(const std::vector<Failure>& failures, bool workers_ended, bool succeeded,
                           ExitClass cls, int exit_status, int restarts_spent) {
  facts_.context.agent_restarts = restarts_spent;
  const auto total =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started_)
          .count();
  EventFields agent("SUCCEEDED");
  const rdzv::RendezvousInfo* round = rounds_.empty() ? nullptr : &rounds_.back().info;
  if (round) agent.group_rank = round->group_rank;
  if (round) agent.group_world_size = round->group_world_size;
  // As torchrun: SUCCEEDED means the agent's run ended normally (the workers may have
  // failed); FAILED that it ended by a signal or an error of its own.
  if (workers_ended && round) {
    for (int lr = 0; lr < facts_.nproc_per_node; ++lr) {
      EventFields w = agent;
      w.worker.emplace(lr, round->rank_base + lr, round->world_size);
      w.state = succeeded ? "SUCCEEDED" : "TERMINATED";
      for (const auto& f : failures) {
        if (f.local_rank != lr) continue;
        w.state = "FAILED";
        w.worker->pid = f.pid;
        w.worker->exit_code = f.exitcode;
        w.raw_error = raw_error_of(f.error_file_path, f.error_file != "<N/A>", f.exitcode);
      }
      record(w, total);
    }
  }
  if (!workers_ended) agent.state = "FAILED";
  record(agent, total);
  if (facts_.record_path.empty()) return;
  std::string error;
  if (!write_whole(facts_.record_path,
                   record_json(failures, cls, exit_status, restarts_spent) + "\n", error)) {
    spdlog::warn("cannot write the run record {}: {}", facts_.record_path, error);
  }
}

std::string RunHistory::record_json(const std::vector<Failure>& failures, ExitClass cls,
                                    int exit_status, int restarts_spent) const {
  using nlohmann::json;
  json rounds = json::array();
  for (const Round& r : rounds_) {
    rounds.push_back({{"round", r.info.round},
                      {"formed_at", iso(r.formed)},
                      {"rendezvous_ms", r.rendezvous_ms},
                      {"group_rank", r.info.group_rank},
                      {"group_world_size", r.info.group_world_size},
                      {"rank_base", r.info.rank_base},
                      {"world_size", r.info.world_size},
                      {"master_addr", r.info.master_addr},
                      {"master_port", r.info.master_port}});
  }
  json attempts = json::array();
  for (const Attempt& a : attempts_) {
    attempts.push_back(
        {{"attempt", a.attempt},
         {"round", a.round},
         {"started_at", iso(a.started)},
         {"ended_at", a.ended ? json(iso(*a.ended)) : json(nullptr)},
         {"end", a.ended ? json(a.end) : json(nullptr)},
         {"flight_recorder", a.flight_recorder.empty() ? json(nullptr) : json(a.flight_recorder)}});
  }
  json fails = json::array();
  for (const Failure& f : failures) {
    fails.push_back({{"rank", f.global_rank},
                     {"local_rank", f.local_rank},
                     {"pid", f.pid},
                     {"exitcode", f.exitcode},
                     {"time", iso(Clock::time_point(std::chrono::seconds(f.timestamp)))},
                     {"summary", f.summary}});
  }
  json startup = json::array();
  for (const RankPhases& r : startup_) {
    json phases = json::object();
    const char* const names[4] = {"interpreter_s", "import_torch_s", "process_group_s",
                                  "first_collective_s"};
    for (int p = 0; p < 4; ++p) phases[names[p]] = r.phase[p] ? json(*r.phase[p]) : json(nullptr);
    startup.push_back({{"rank", r.rank}, {"host", r.host}, {"phases", phases}});
  }
  const json record = {
      {"schema", "ddprun-run-record"},
      {"version", 3},
      {"run_id", facts_.context.run_id},
      {"host", facts_.context.hostname},
      {"rdzv_backend", facts_.context.rdzv_backend},
      {"started_at", iso(started_at_)},
      {"ended_at", iso(Clock::now())},
      {"exit_class", exit_class_name(cls)},
      {"exit_status", exit_status},
      {"restarts_spent", restarts_spent},
      {"rounds", rounds},
      {"attempts", attempts},
      {"failures", fails},
      {"root_cause", root_cause_.empty() ? json(nullptr) : json(root_cause_)},
      {"stall_verdict", verdict_.empty() ? json(nullptr) : json(verdict_)},
      {"stragglers", stragglers_},
      {"startup", startup},
  };
  return record.dump(2, ' ', false, json::error_handler_t::replace);
}

}  // namespace ddprun::launcher
