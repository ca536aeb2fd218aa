// text.h: ddprun's one home for small text helpers: trim, split, whole-string integer
// parsing, POSIX shell quoting and number ranges ("0-4,6"). Header-only (library
// ddprun_base, below every other target); used by the launcher's option readers, the
// hostfile and Slurm parsers, the rendezvous conf, the ssh launch, the stall verdict and
// the flight recorder's dumps.
// Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace ddprun {

// `s` without leading and trailing white space (isspace: blanks, tabs, newlines).
inline std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// The pieces of `s` between `sep`s, empty pieces kept: "a,,b" -> {"a", "", "b"}, "" -> {""}.
inline std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  for (;;) {
    const auto at = s.find(sep);
    out.emplace_back(s.substr(0, at));
    if (at == std::string_view::npos) return out;
    s.remove_prefix(at + 1);
  }
}

// The integer that is all of `text` (no blanks, no sign for unsigned T, a leading '-' for
// signed T; base 16 takes no "0x"), or nullopt when `text` is empty, has other characters
// or does not fit T.
template <typename T>
std::optional<T> parse_int(std::string_view text, int base = 10) {
  T v{};
  const char* last = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), last, v, base);
  if (text.empty() || ec != std::errc() || ptr != last) return std::nullopt;
  return v;
}

// `s` as one word for a POSIX shell: unchanged when it holds only characters no shell
// treats specially, else in single quotes (a ' inside becomes '\'').
inline std::string shell_quote(std::string_view s) {
  const auto safe = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
           std::string_view("_-./:=,@%+").find(c) != std::string_view::npos;
  };
  if (!s.empty() && std::all_of(s.begin(), s.end(), safe)) return std::string(s);
  std::string out = "'";
  for (const char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// `numbers` sorted, runs of consecutive ones joined: {9, 0, 1, 2, 6, 10} -> "0-2,6,9-10".
inline std::string number_ranges(std::vector<int> numbers) {
  std::sort(numbers.begin(), numbers.end());
  std::string out;
  for (std::size_t i = 0; i < numbers.size();) {
    std::size_t j = i;
    while (j + 1 < numbers.size() && numbers[j + 1] == numbers[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(numbers[i]);
    if (j > i) out += "-" + std::to_string(numbers[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace ddprun
