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
