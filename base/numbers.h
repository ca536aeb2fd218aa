// numbers.h: ddprun's one home for the small numeric helpers its reports share: the median
// of a sample, and a count of seconds as short decimal text ("2.1", "0", "13.5"), rounded
// to a stated number of decimals. Header-only (library ddprun_base); used by the job-wide
// view's reports (stall verdict, stragglers, start-up timeline) and the pre-flight verdict.
// Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>
#include <vector>

namespace ddprun {

// The median of `v` (the mean of the middle two for an even count); 0 for an empty `v`.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const std::size_t n = v.size();
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n / 2), v.end());
  const double upper = v[n / 2];
  if (n % 2 == 1) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n / 2));
  return (lower + upper) / 2;
}

// `s` rounded to `decimals` places (0..6) as the shortest decimal text that reads back as
// that value: seconds_text(13.46, 1) == "13.5", seconds_text(2.0, 1) == "2",
// seconds_text(0.04, 1) == "0".
inline std::string seconds_text(double s, int decimals) {
  const double scale = std::pow(10.0, std::clamp(decimals, 0, 6));
  double rounded = std::round(s * scale) / scale;
  if (rounded == 0) rounded = 0;  // no "-0"
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, rounded);
  return std::string(buf, r.ptr);
}

}  // namespace ddprun
