#include "rendezvous/rdzv_conf.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "rendezvous/rendezvous.h"

namespace ddprun::rdzv {
namespace {

[[noreturn]] void bad(const std::string& key, const std::string& value, const char* want) {
  throw RendezvousError("--rdzv-conf " + key + "='" + value + "' is not " + want);
}

}  // namespace

std::chrono::milliseconds conf_seconds(const ConfMap& conf, const std::string& key,
                                       double default_seconds) {
  double s = default_seconds;
  if (auto it = conf.find(key); it != conf.end()) {
    const std::string& v = it->second;
    char* end = nullptr;
    s = std::strtod(v.c_str(), &end);
    if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(s) || s < 0) {
      bad(key, v, "a non-negative number of seconds");
    }
  }
  return std::chrono::milliseconds(static_cast<long long>(std::llround(s * 1000.0)));
}

int conf_int(const ConfMap& conf, const std::string& key, int default_value, int min) {
  auto it = conf.find(key);
  if (it == conf.end()) return default_value;
  const std::string& v = it->second;
  int out = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (v.empty() || ec != std::errc() || ptr != v.data() + v.size() || out < min) {
    bad(key, v, ("an integer >= " + std::to_string(min)).c_str());
  }
  return out;
}

std::optional<bool> conf_bool(const ConfMap& conf, const std::string& key) {
  auto it = conf.find(key);
  if (it == conf.end()) return std::nullopt;
  std::string v = it->second;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "1" || v == "true" || v == "t" || v == "yes" || v == "y") return true;
  if (v == "0" || v == "false" || v == "f" || v == "no" || v == "n") return false;
  bad(key, it->second, "a boolean (1/true/t/yes/y or 0/false/f/no/n)");
}

void warn_unknown_conf_keys(const ConfMap& conf, std::initializer_list<const char*> known,
                            const std::string& backend) {
  for (const auto& entry : conf) {
    // Not a structured binding: clang 14 (scripts/tidy) cannot capture one in a lambda.
    const std::string& key = entry.first;
    bool found = std::any_of(known.begin(), known.end(), [&](const char* k) { return key == k; });
    if (!found) {
      std::string list;
      for (const char* k : known) list += std::string(list.empty() ? "" : ", ") + k;
      spdlog::warn(
          "--rdzv-conf key '{}' is not used by the {} rendezvous and is ignored "
          "(known keys: {})",
          key, backend, list);
    }
  }
}

}  // namespace ddprun::rdzv
