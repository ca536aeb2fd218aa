// store.cpp: helpers shared by every Store implementation (argument checks, messages).
#include "store/store.h"

namespace ddprun::store {

std::string escape_bytes(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size());
  for (unsigned char c : bytes) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  return out;
}

std::string unescape_bytes(std::string_view text) {
  auto hex_digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == '\\') {
      out += '\\';
      ++i;
    } else if (i + 3 < text.size() && text[i + 1] == 'x' && hex_digit(text[i + 2]) >= 0 &&
               hex_digit(text[i + 3]) >= 0) {
      out += static_cast<char>(hex_digit(text[i + 2]) * 16 + hex_digit(text[i + 3]));
      i += 3;
    } else {
      throw std::invalid_argument("'" + std::string(text) + "': a backslash must start \\\\ or " +
                                  "\\xNN (at byte " + std::to_string(i) + ")");
    }
  }
  return out;
}

void Store::do_wait(const std::vector<std::string>& keys, Duration timeout) {
  if (!do_wait_for(keys, timeout)) throw StoreTimeoutError(timeout_message("wait", timeout, keys));
}

void check_multi_set_sizes(const std::vector<std::string>& keys,
                           const std::vector<std::string>& values) {
  if (keys.size() != values.size()) {
    throw std::invalid_argument("multi_set: " + std::to_string(keys.size()) + " keys but " +
                                std::to_string(values.size()) + " values");
  }
}

std::string timeout_message(std::string_view what, Store::Duration timeout,
                            const std::vector<std::string>& keys) {
  std::string msg(what);
  msg += " timed out after " + std::to_string(timeout.count()) + " ms for keys: [";
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (i != 0) msg += ", ";
    msg += escape_bytes(keys[i]);
  }
  msg += "]";
  return msg;
}

}  // namespace ddprun::store
