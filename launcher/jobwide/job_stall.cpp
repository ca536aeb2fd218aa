// job_stall.cpp: JobStallJudge (job_stall.h): the job-wide stall decision over the board.
#include "launcher/jobwide/job_stall.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>

#include "base/numbers.h"
#include "launcher/jobwide/stall_verdict.h"

namespace ddprun::launcher {
namespace {

using Ms = std::chrono::milliseconds;

std::string seconds(std::chrono::steady_clock::duration d) {
  return seconds_text(std::chrono::duration<double>(d).count(), 1);
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace

JobStallJudge::JobStallJudge(StallGate& gate, rdzv::JobBoard& board, Params params)
    : gate_(gate),
      board_(board),
      params_(std::move(params)),
      interval_(std::clamp<Ms>(params_.timeout / 4, Ms(250), Ms(1000))),
      next_(Clock::now() + interval_),
      pushed_progress_(gate.sample().last_progress),  // only later progress is news
      job_progress_(Clock::now()) {
  gate_.set_judged(true);
}

JobStallJudge::~JobStallJudge() { gate_.set_judged(false); }

std::vector<std::string> JobStallJudge::verdict() const {
  return gate_.decision().value_or(std::vector<std::string>());
}

void JobStallJudge::tick(Clock::time_point now) {
  if (done_ || now < next_) return;
  try {
    exchange(now);
    // The next look at the next tick, or as soon as the job has been quiet for the
    // timeout (the verdict does not wait for the tick after it).
    next_ = now + interval_;
    if (const auto due = job_progress_ + params_.timeout; due > now && due < next_) next_ = due;
  } catch (const std::exception& e) {
    spdlog::warn("stall: the job-wide view failed ({}); this node's watchdog decides alone now",
                 e.what());
    gate_.set_judged(false);
    done_ = true;
  }
}

void JobStallJudge::exchange(Clock::time_point now) {
  const NodeSample sample = gate_.sample();
  if (sample.last_progress != pushed_progress_) {  // this node's workers progressed
    pushed_progress_ = sample.last_progress;
    seen_ = board_.bump("progress");
    job_progress_ = now;
    waiting_said_ = false;
    return;
  }
  // Quiet here since the last tick: did any other node progress, or declare a stall?
  const std::int64_t count = board_.mark("progress");
  if (count != seen_) {
    seen_ = count;
    job_progress_ = now;
    others_progressed_ = true;
  }
  std::optional<std::string> declared = board_.get({"stall"}, Ms(0)).front();
  if (!declared) {
    if (!sample.all_idle) return;
    if (now - job_progress_ < params_.timeout) {
      if (!waiting_said_ && others_progressed_) {
        waiting_said_ = true;
        const WorkerPosition& w = sample.workers.front();
        spdlog::warn(
            "stall: every worker of this node made no progress for {} s (local rank {} at {}), "
            "but ranks on other nodes progressed {} s ago: this node waits for them, which is "
            "not a stall until no rank of the job progresses for {} s",
            seconds(now - sample.last_progress), w.local_rank,
            w.user_where.empty() ? w.where : w.user_where, seconds(now - job_progress_),
            seconds(params_.timeout));
      }
      return;
    }
    declared = board_.set_once("stall", std::to_string(board_.node()));
  }
  decide(sample, *declared == std::to_string(board_.node()));
}

void JobStallJudge::decide(const NodeSample& sample, bool declared_here) {
  done_ = true;
  NodeSnapshot mine{board_.node(), params_.host, {}};
  for (const WorkerPosition& w : sample.workers) {
    mine.ranks.push_back({params_.rank_base + w.local_rank, w.pid, w.sampled, w.where, w.user_where,
                          w.state, w.idle_s, w.collectives});
  }
  board_.set("snap/" + std::to_string(board_.node()), encode_snapshot(mine));
  // Every quiet node looks once a tick: two ticks and a margin to publish.
  const Ms collect = std::max<Ms>(Ms(2000), 2 * interval_ + Ms(500));
  std::vector<std::string> verdict;
  if (declared_here) {
    std::vector<std::string> names;
    for (int n = 0; n < board_.nodes(); ++n) names.push_back("snap/" + std::to_string(n));
    const auto values = board_.get(names, collect);
    std::vector<NodeSnapshot> snapshots;
    std::vector<std::string> missing;
    for (std::size_t n = 0; n < values.size(); ++n) {
      std::string error;
      std::optional<NodeSnapshot> s;
      if (values[n]) s = decode_snapshot(*values[n], error);
      if (s) {
        snapshots.push_back(std::move(*s));
      } else {
        missing.push_back(values[n] ? fmt::format("node {} ({})", n, error)
                                    : fmt::format("node {}", n));
      }
    }
    verdict = stall_verdict(snapshots, missing, params_.timeout);
    std::string text;
    for (const std::string& l : verdict) text += (text.empty() ? "" : "\n") + l;
    board_.set("verdict", text);
  } else if (const auto text = board_.get({"verdict"}, collect + Ms(2000)).front()) {
    verdict = split_lines(*text);
  } else {
    verdict =
        stall_verdict({mine}, {"the other nodes (no job-wide verdict came)"}, params_.timeout);
  }
  for (const std::string& line : verdict) spdlog::error("{}", line);
  gate_.decide(std::move(verdict));
}

}  // namespace ddprun::launcher
