// straggler_watch.cpp: StragglerWatch (straggler_watch.h).
#include "launcher/jobwide/straggler_watch.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <map>
#include <utility>

#include "base/numbers.h"
#include "base/text.h"

namespace ddprun::launcher {
namespace {

using Ms = std::chrono::milliseconds;

// The part of a finding's line that names whom: a new one is said, the same one is not
// said again.
std::string who(const std::string& line) { return line.substr(0, line.find(" arrived last")); }

}  // namespace

StragglerWatch::StragglerWatch(StallGate& gate, rdzv::JobBoard* board, Params params)
    : gate_(gate), board_(board), params_(std::move(params)), next_(Clock::now() + params_.window) {
  if (!params_.wall_ns) {
    params_.wall_ns = [] {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
          .count();
    };
  }
  if (board_ != nullptr) clock_.emplace(*board_, params_.wall_ns, Clock::now());
  gate_.want_arrivals(true);
}

StragglerWatch::Clock::time_point StragglerWatch::next_tick() const {
  const bool syncing = clock_ && !failed_ && !clock_->done();
  return syncing ? std::min(next_, clock_->next_tick()) : next_;
}

std::optional<ClockSync::Offset> StragglerWatch::clock_offset() const {
  return clock_ && clock_->done() ? clock_->offset() : std::nullopt;
}

StragglerWatch::~StragglerWatch() {
  gate_.want_arrivals(false);
  if (ranked_ > 0) {
    spdlog::info("straggler ranking: {} window(s) of the job ranked, {} naming a straggler",
                 ranked_, named_);
  }
}

void StragglerWatch::tick(Clock::time_point now) {
  try {
    if (clock_ && !failed_ && !clock_->done()) {
      clock_->poll(now);
      if (clock_->done()) say_offset();
    }
    if (now < next_) return;
    next_ = now + params_.window;
    ++window_;
    check_recorder();
    if (board_ != nullptr && !failed_) {
      // Arrivals taken before this host's clock is known against node 0's are dropped.
      std::vector<RankArrivals> arrivals = collect();
      if (clock_->done()) judge_job(arrivals);
      return;
    }
  } catch (const std::exception& e) {
    spdlog::warn(
        "straggler ranking: the job-wide view failed ({}); ranking this node's ranks alone "
        "from now on",
        e.what());
    failed_ = true;
    carry_.clear();  // other nodes' ranks among them
    return;
  }
  const std::vector<RankArrivals> arrivals = rank_with_carry(collect());
  const auto found = find_straggler(arrivals, params_.threshold_s);
  count(arrivals, found);
  say(found);
}

std::vector<RankArrivals> StragglerWatch::rank_with_carry(const std::vector<RankArrivals>& window) {
  JoinedWindow joined = join_window(carry_, window);
  carry_ = std::move(joined.carry);
  return std::move(joined.ranks);
}

std::vector<RankArrivals> StragglerWatch::collect() {
  const auto known = clock_offset();
  const std::int64_t offset = known ? known->first : 0;
  std::map<int, RankArrivals> by_rank;
  for (auto& [local_rank, a] : gate_.take_arrivals()) {
    RankArrivals& r = by_rank[local_rank];
    r.rank = params_.rank_base + local_rank;
    r.host = params_.host;
    a.t_ns += offset;
    r.arrivals.push_back(a);
  }
  std::vector<RankArrivals> out;
  for (auto& [local_rank, r] : by_rank) out.push_back(std::move(r));
  return out;
}

// Workers whose torch has no flight recorder that records their collectives (PyTorch
// before 2.14 for gloo, or TORCH_FR_BUFFER_SIZE=0) never report a first collective: said
// once, as a warning when the user asked for --exclude-stragglers.
void StragglerWatch::check_recorder() {
  if (recorder_said_) return;
  const auto times = gate_.startup();
  bool grouped = static_cast<int>(times.size()) == params_.workers;
  for (const auto& [local_rank, t] : times) {
    if (t.first_collective > 0) {
      recorder_said_ = true;  // a recorder reports: nothing to say
      return;
    }
    grouped = grouped && t.group > 0;
  }
  if (!grouped || ++windows_without_recorder_ < kNoRecorderWindows) return;
  recorder_said_ = true;
  const std::string line = fmt::format(
      "straggler ranking: no worker of this node reported a collective from PyTorch's flight "
      "recorder {} s after forming its process group; the ranking needs one that records "
      "the workers' collectives (PyTorch 2.14+, TORCH_FR_BUFFER_SIZE unset or above 0): no "
      "ranking of this node's ranks",
      seconds_text(static_cast<double>(params_.window.count()) * kNoRecorderWindows / 1000, 0));
  if (params_.exclude) {
    spdlog::warn("{}", line);
  } else {
    spdlog::info("{}", line);
  }
}

void StragglerWatch::say_offset() const {
  const auto& o = clock_->offset();
  if (o->second < 0) {
    spdlog::warn(
        "straggler ranking: node 0 stamped no clock within {} s; taking this host's clock as "
        "node 0's",
        ClockSync::kStampWait.count() / 1000);
  } else if (board_->node() != 0) {
    spdlog::info("straggler ranking: this host's clock is {:.3f} ms {} node 0's (within {:.3f} ms)",
                 std::abs(static_cast<double>(o->first)) / 1e6,
                 o->first > 0 ? "behind" : "ahead of", static_cast<double>(o->second) / 1e6);
  }
}

void StragglerWatch::judge_job(const std::vector<RankArrivals>& mine) {
  std::vector<RankArrivals> sampled = mine;
  for (RankArrivals& r : sampled) r.arrivals = sample_arrivals(r.arrivals);
  board_->set(fmt::format("strag/{}/{}", board_->node(), window_ % 2),
              encode_window(window_, sampled));
  if (board_->node() != 0) {
    const auto values = board_->get({"strag/found", "strag/out"}, Ms(0));
    hear(values[0], values[1]);
    return;
  }
  // The previous window: every node has put it on the board by now.
  if (window_ < 2) return;
  std::vector<std::string> names;
  for (int n = 0; n < board_->nodes(); ++n) {
    names.push_back(fmt::format("strag/{}/{}", n, (window_ - 1) % 2));
  }
  std::vector<RankArrivals> job;
  for (const auto& value : board_->get(names, Ms(0))) {
    std::string error;
    auto w = value ? decode_window(*value, error) : std::nullopt;
    if (!w || w->first != window_ - 1) continue;
    for (RankArrivals& r : w->second) job.push_back(std::move(r));
  }
  job = rank_with_carry(job);
  const auto found = find_straggler(job, params_.threshold_s);
  std::vector<NamedLine> lines;
  if (found) {
    lines.push_back({straggler_line(*found, params_.window, params_.threshold_s),
                     found->host_wide ? found->ranks : std::vector<int>{found->rank}});
  }
  board_->set("strag/found", encode_named_lines(lines));
  count(job, found);
  say(found);
  maybe_exclude(found, lines.empty() ? std::string() : lines.front().line);
}

// Node 0's findings, as another node reads them: the line said here when it names one of
// this node's ranks; the leave-out when it names one.
void StragglerWatch::hear(const std::optional<std::string>& found,
                          const std::optional<std::string>& out) {
  std::string error;
  const auto named = [&](const std::optional<std::string>& value) -> std::optional<NamedLine> {
    const auto lines = value ? decode_named_lines(*value, error) : std::nullopt;
    if (!lines) return std::nullopt;
    for (const NamedLine& l : *lines) {
      if (l.names_any_of(params_.rank_base, params_.workers)) return l;
    }
    return std::nullopt;
  };
  if (const auto o = named(out); o && !leave_) leave_ = o->line;
  if (!found) return;
  const auto mine = named(found);
  const std::string line = mine ? mine->line : std::string();
  if (!line.empty() && who(line) != who(last_said_)) {
    spdlog::warn("{}", line);
    said_.push_back(line);
  }
  last_said_ = line;
}

// Node 0, with --exclude-stragglers: the straggler named kExcludeAfter windows in a row
// leaves the job, when it is not node 0's (which holds the rendezvous) and the job can
// go on without its node.
void StragglerWatch::maybe_exclude(const std::optional<Straggler>& found, const std::string& line) {
  if (!params_.exclude || excluded_) return;
  if (!found) {
    streak_ = 0;
    return;
  }
  streak_ = who(line) == who(streak_line_) ? streak_ + 1 : 1;
  streak_line_ = line;
  if (streak_ < kExcludeAfter) return;
  const std::vector<int> ranks = found->host_wide ? found->ranks : std::vector<int>{found->rank};
  const NamedLine out{line, ranks};
  std::string why;
  if (out.names_any_of(params_.rank_base, params_.workers)) {
    why = "it is on node 0, which holds the rendezvous";
  } else {
    int spares = 0;
    try {
      spares = params_.spares ? params_.spares() : 0;
    } catch (const std::exception& e) {
      spdlog::debug("straggler ranking: spares: {}", e.what());
    }
    if (board_->nodes() - 1 < params_.min_nodes && spares == 0) {
      why = fmt::format(
          "the job has {} nodes, --nnodes allows no fewer than {}, and no spare "
          "waits",
          board_->nodes(), params_.min_nodes);
    }
  }
  if (!why.empty()) {
    if (who(line) != refused_) {
      spdlog::warn("straggler: {} is not left out of the job (--exclude-stragglers): {}",
                   who(line).substr(std::string("straggler: ").size()), why);
      refused_ = who(line);
    }
    return;
  }
  board_->set_once("strag/out", encode_named_lines({out}));
  excluded_ = true;
  spdlog::warn(
      "straggler: leaving {} out of the job: the straggler in {} rankings in a row "
      "(--exclude-stragglers); the others go on in a new round without its node",
      who(line).substr(std::string("straggler: ").size()), streak_);
}

void StragglerWatch::count(const std::vector<RankArrivals>& judged,
                           const std::optional<Straggler>& found) {
  if (judged.size() < 2) return;
  ++ranked_;
  if (found) ++named_;
}

void StragglerWatch::say(const std::optional<Straggler>& found) {
  const std::string line =
      found ? straggler_line(*found, params_.window, params_.threshold_s) : std::string();
  if (!line.empty() && who(line) != who(last_said_)) {
    spdlog::warn("{}", line);
    said_.push_back(line);
  }
  last_said_ = line;
}

}  // namespace ddprun::launcher
