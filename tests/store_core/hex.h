// hex.h: tiny helpers for the store_core tests: golden bytes written as hex text.
// Used by protocol_test.cpp and handler_test.cpp only. Thread-safety: pure functions.
#pragma once

#include <cctype>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ddprun::store::testing {

// "00 0300 | ff" -> bytes; spaces and '|' are ignored, so captures can be pasted as is.
inline std::string unhex(std::string_view text) {
  std::string out;
  int hi = -1;
  for (char c : text) {
    if (c == ' ' || c == '|' || c == '\n') continue;
    if (!std::isxdigit(static_cast<unsigned char>(c))) throw std::invalid_argument("bad hex");
    const int v = std::isdigit(static_cast<unsigned char>(c))
                      ? c - '0'
                      : std::tolower(static_cast<unsigned char>(c)) - 'a' + 10;
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(static_cast<char>(hi * 16 + v));
      hi = -1;
    }
  }
  if (hi >= 0) throw std::invalid_argument("odd hex digit count");
  return out;
}

inline std::string hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    if (!out.empty()) out.push_back(' ');
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

}  // namespace ddprun::store::testing
