// text.h: ddprun's one home for small text helpers: trim, split and whole-string integer
// parsing. Header-only (library ddprun_base, below every other target); used by the
// launcher's option readers, the hostfile and Slurm parsers and the rendezvous conf.
// Thread-safety: pure functions.
#pragma once

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

}  // namespace ddprun
