// host_port.cpp: see host_port.h.
#include "store/core/host_port.h"

#include <algorithm>
#include <charconv>

namespace ddprun::store {

std::string split_host_port(std::string_view text, std::string& host, std::string_view& port) {
  port = {};
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos) return "missing ']'";
    host = std::string(text.substr(1, close - 1));
    const auto rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return "unexpected text after ']'";
      port = rest.substr(1);
      if (port.empty()) return "empty port";
    }
  } else if (std::count(text.begin(), text.end(), ':') > 1) {
    host = std::string(text);  // a bare IPv6 literal: no port possible
  } else {
    const auto colon = text.find(':');
    host = std::string(text.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = text.substr(colon + 1);
      if (port.empty()) return "empty port";
    }
  }
  if (host.empty()) return "empty host";
  return {};
}

std::optional<int> parse_port(std::string_view text) {
  int port = -1;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, port);
  // from_chars accepts a leading '-'; a port is digits only.
  if (text.empty() || text.front() == '-' || ec != std::errc() || ptr != end || port > 65535) {
    return std::nullopt;
  }
  return port;
}

std::string format_host_port(std::string_view host, int port) {
  std::string out =
      host.find(':') != std::string_view::npos ? "[" + std::string(host) + "]" : std::string(host);
  if (port >= 0) out += ":" + std::to_string(port);
  return out;
}

}  // namespace ddprun::store
