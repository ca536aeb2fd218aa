// startup_watch.cpp: StartupWatch (startup_watch.h).
#include "launcher/jobwide/startup_watch.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <utility>

namespace ddprun::launcher {
namespace {

constexpr std::chrono::seconds kTick{1};
// After the process group formed, how long a flight recorder's first collective is waited
// for (none: PyTorch before 2.14, or the recorder off).
constexpr std::chrono::seconds kCollectiveWait{10};

}  // namespace

StartupWatch::StartupWatch(StallGate& gate, rdzv::JobBoard* board, Params params)
    : gate_(gate),
      board_(board),
      params_(std::move(params)),
      started_(Clock::now()),
      next_(started_ + kTick) {}

StartupWatch::Clock::time_point StartupWatch::next_tick() const {
  return state_ == State::kDone ? Clock::time_point::max() : next_;
}

std::optional<std::vector<RankStartup>> StartupWatch::mine(Clock::time_point now) const {
  const auto times = gate_.startup();
  bool all_first = static_cast<int>(times.size()) == params_.workers;
  bool all_group = all_first;
  std::vector<RankStartup> ranks;
  for (const auto& [local_rank, t] : times) {
    all_first = all_first && t.first_collective > 0;
    all_group = all_group && t.group > 0;
    ranks.push_back({params_.rank_base + local_rank, params_.host, t});
  }
  if (all_first || (all_group && now - started_ >= kCollectiveWait) ||
      now - started_ >= kStartupWait) {
    return ranks;
  }
  return std::nullopt;
}

void StartupWatch::tick(Clock::time_point now) {
  if (state_ == State::kDone || now < next_) return;
  next_ = now + kTick;
  try {
    if (state_ == State::kLocal) {
      const auto ranks = mine(now);
      if (!ranks) return;
      if (board_ == nullptr) {
        report_ = startup_report(*ranks);
        log(*report_);
        state_ = State::kDone;
        return;
      }
      board_->set(fmt::format("start/{}", board_->node()), encode_startup(*ranks));
      if (board_->node() != 0) report_ = startup_report(*ranks);
      state_ = State::kShared;
      shared_ = now;
      return;
    }
    const bool late = now - shared_ >= kJobWait;
    if (board_->node() != 0) {
      const auto found = board_->get({"start/found"}, std::chrono::milliseconds(0)).front();
      if (!found && !late) return;
      state_ = State::kDone;
      if (!found) return;
      std::string error;
      const auto lines = decode_named_lines(*found, error);
      if (!lines) {
        spdlog::warn("start-up timeline: node 0's findings are unreadable ({})", error);
        return;
      }
      for (const NamedLine& l : *lines) {
        if (l.names_any_of(params_.rank_base, params_.workers)) spdlog::warn("{}", l.line);
      }
      return;
    }
    std::vector<std::string> names;
    for (int n = 0; n < board_->nodes(); ++n) names.push_back(fmt::format("start/{}", n));
    const auto values = board_->get(names, std::chrono::milliseconds(0));
    std::vector<RankStartup> job;
    int missing = 0;
    for (const auto& v : values) {
      std::string error;
      auto ranks = v ? decode_startup(*v, error) : std::nullopt;
      if (!ranks) {
        ++missing;
        continue;
      }
      for (RankStartup& r : *ranks) job.push_back(std::move(r));
    }
    if (missing > 0 && !late) return;
    report_ = startup_report(job);
    log(*report_);
    if (missing > 0) {
      spdlog::warn("start-up: {} of {} nodes sent no start-up times within {} s", missing,
                   board_->nodes(), kJobWait.count());
    }
    board_->set("start/found", encode_named_lines(report_->warnings));
    state_ = State::kDone;
  } catch (const std::exception& e) {
    spdlog::warn("start-up timeline: the job-wide view failed ({}); none for this attempt",
                 e.what());
    state_ = State::kDone;
  }
}

void StartupWatch::log(const StartupReport& report) const {
  for (const std::string& l : report.summary) spdlog::info("{}", l);
  for (const NamedLine& l : report.warnings) spdlog::warn("{}", l.line);
}

}  // namespace ddprun::launcher
