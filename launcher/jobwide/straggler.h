// straggler.h: the straggler ranking (issue 34; docs/usage.md, "Stragglers"), pure: from
// the times at which ranks entered the same collectives (PyTorch's flight recorder,
// flight_record.h; every time on one clock), who arrives last consistently. A rank is the
// straggler of a window when, over at least kMinCollectives collectives of one process
// group that every reporting rank entered, it arrived last at kLastShare of them or more,
// by a median margin (its arrival minus the next-latest one's) of at least the threshold.
// When no single rank is, a host is (every rank of the host late together: a slow
// network link or host): the same rule with each host's latest rank against the other
// hosts'. Also the codec of one node's window on the job-wide board. Used by
// StragglerWatch (straggler_watch.h). Thread-safety: pure functions.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launcher/process/flight_record.h"

namespace ddprun::launcher {

inline constexpr int kMinCollectives = 8;
inline constexpr double kLastShare = 0.75;
// A node's window carries at most this many arrivals per rank (every 2^k-th sequence
// number, the same choice on every rank, so that the ranks' samples meet).
inline constexpr std::size_t kArrivalsPerWindow = 32;
// A window's text larger than this is refused.
inline constexpr std::size_t kMaxWindowBytes = 256 * 1024;

struct RankArrivals {
  int rank = 0;  // global
  std::string host;
  std::vector<Arrival> arrivals;  // on the job's one clock
};

struct Straggler {
  bool host_wide = false;  // every rank of `host` late together, no single rank
  int rank = 0;            // the rank (host_wide: the host's latest one most often)
  std::vector<int> ranks;  // host_wide: the host's ranks
  std::string host;
  int pg = 0;
  int last = 0;         // collectives it arrived last at
  int collectives = 0;  // collectives judged
  double median_margin_s = 0;
};

// The straggler among `ranks` (nullopt: none by the rule above).
std::optional<Straggler> find_straggler(const std::vector<RankArrivals>& ranks, double threshold_s);

// A window's arrivals joined with those the previous window carried over. Each rank reports
// its arrivals on its own beat (the sampler's, a node's window), so a window's end cuts
// some collectives in two: one rank's arrival in this window, a later rank's in the next.
// `ranks`: `carry` and `window` joined by rank; `carry`: the arrivals of `window` at
// collectives that a member of their group (a rank with an arrival in it) has not entered
// in `ranks`, for the next window. A carried arrival is carried once.
struct JoinedWindow {
  std::vector<RankArrivals> ranks;
  std::vector<RankArrivals> carry;
};
JoinedWindow join_window(const std::vector<RankArrivals>& carry,
                         const std::vector<RankArrivals>& window);

// "straggler: rank 3 on b arrived last at 19 of 20 collectives of group 0 in the last
// 10 s, by a median of 0.3 s (threshold 0.05 s)".
std::string straggler_line(const Straggler& s, std::chrono::milliseconds window,
                           double threshold_s);

// At most kArrivalsPerWindow arrivals per group: those whose sequence number is a multiple
// of the smallest power of two that leaves no more.
std::vector<Arrival> sample_arrivals(const std::vector<Arrival>& arrivals);

// One node's window on the board: its number and its ranks' (sampled) arrivals.
std::string encode_window(std::int64_t window, const std::vector<RankArrivals>& ranks);
// nullopt, with `error` set (one line), when `text` is not a window.
std::optional<std::pair<std::int64_t, std::vector<RankArrivals>>> decode_window(
    const std::string& text, std::string& error);

}  // namespace ddprun::launcher
