// option_values.cpp: one option's text to a checked value (see option_values.h), and the
// value parsers config.h declares (--redirects/--tee, --nnodes, string.Template's $name).
#include "launcher/options/option_values.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <random>

#include "base/text.h"
#include "launcher/options/config.h"

namespace ddprun::launcher {

std::string trimmed(const std::string& s) { return std::string(trim(s)); }

std::optional<long long> to_int(const std::string& text) {
  std::string_view t = trim(text);
  if (!t.empty() && t.front() == '+') t.remove_prefix(1);
  return parse_int<long long>(t);
}

std::optional<double> to_double(const std::string& text) {
  const std::string t = trimmed(text);
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(t.c_str(), &end);
  if (errno != 0 || end != t.c_str() + t.size() || v != v) return std::nullopt;
  return v;
}

int int_in_range(const std::string& flag, const std::string& text, long long lo, long long hi) {
  const auto v = to_int(text);
  if (!v) throw UsageError(fmt::format("{}: invalid int value: '{}'", flag, text));
  if (*v < lo || *v > hi) {
    throw UsageError(fmt::format("{}: {} is out of range [{}, {}]", flag, *v, lo, hi));
  }
  return static_cast<int>(*v);
}

double seconds_value(const std::string& flag, const std::string& text) {
  const auto v = to_double(text);
  if (!v || *v < 0) {
    throw UsageError(
        fmt::format("{}: expected a non-negative number of seconds, got '{}'", flag, text));
  }
  return *v;
}

std::string choice(const std::string& flag, const std::string& text,
                   std::initializer_list<const char*> choices) {
  std::string t = trimmed(text);
  std::string all;
  for (const char* c : choices) {
    if (t == c) return t;
    all += (all.empty() ? "" : ", ") + std::string(c);
  }
  throw UsageError(fmt::format("{}: invalid choice '{}' (choose from {})", flag, text, all));
}

std::string random_uuid() {
  std::random_device rd;
  std::mt19937_64 gen((static_cast<std::uint64_t>(rd()) << 32) ^ rd());
  std::uniform_int_distribution<int> hex(0, 15);
  std::string out;
  for (int i = 0; i < 32; ++i) {
    if (i == 8 || i == 12 || i == 16 || i == 20) out += '-';
    int d = hex(gen);
    if (i == 12) d = 4;
    if (i == 16) d = 8 | (d & 3);
    out += "0123456789abcdef"[d];
  }
  return out;
}

std::string temp_dir(const std::map<std::string, std::string>& env) {
  const auto usable = [](const std::string& dir) {
    struct stat st {};
    return !dir.empty() && ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
           ::access(dir.c_str(), W_OK | X_OK) == 0;
  };
  for (const char* name : {"TMPDIR", "TEMP", "TMP"}) {
    if (const auto* dir = find(env, name); dir && usable(*dir)) return *dir;
  }
  for (const char* dir : {"/tmp", "/var/tmp", "/usr/tmp"}) {
    if (usable(dir)) return dir;
  }
  return "/tmp";
}

const std::string* find(const std::map<std::string, std::string>& m, const std::string& k) {
  const auto it = m.find(k);
  return it == m.end() ? nullptr : &it->second;
}

int StdStreams::for_rank(int local_rank) const {
  if (per_rank.empty()) return all;
  const auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? 0 : it->second;
}

StdStreams parse_std_streams(const std::string& flag, const std::string& text) {
  StdStreams out;
  const std::string t = trimmed(text);
  const auto bad = [&] {
    return UsageError(
        fmt::format("{}: invalid value '{}' (expected 0-3 or local_rank:value pairs like 0:1,1:3)",
                    flag, text));
  };
  if (t.find(':') == std::string::npos) {
    const auto v = to_int(t);
    if (!v || *v < 0 || *v > 3) throw bad();
    out.all = static_cast<int>(*v);
    return out;
  }
  for (const auto& pair : split(t, ',')) {
    const auto colon = pair.find(':');
    if (colon == std::string::npos) throw bad();
    const auto rank = to_int(pair.substr(0, colon));
    const auto v = to_int(pair.substr(colon + 1));
    if (!rank || *rank < 0 || !v || *v < 0 || *v > 3) throw bad();
    out.per_rank[static_cast<int>(*rank)] = static_cast<int>(*v);
  }
  return out;
}

std::pair<int, int> parse_nnodes(const std::string& text) {
  const auto parts = split(trimmed(text), ':');
  const auto bad = [&](const std::string& why) {
    return UsageError(fmt::format("--nnodes: invalid value '{}' ({})", text, why));
  };
  if (parts.size() > 2) throw bad("expected N or MIN:MAX");
  const auto lo = to_int(parts[0]);
  const auto hi = parts.size() == 2 ? to_int(parts[1]) : lo;
  if (!lo || !hi) throw bad("expected N or MIN:MAX with integers");
  if (*lo <= 0) throw bad("the node count must be positive");
  if (*lo > *hi) throw bad("MIN must not exceed MAX");
  if (*hi > 1000000) throw bad("too many nodes");
  return {static_cast<int>(*lo), static_cast<int>(*hi)};
}

std::string substitute_local_rank(const std::string& arg, int local_rank) {
  return safe_substitute(arg, {{"local_rank", std::to_string(local_rank)}});
}

std::string safe_substitute(const std::string& arg,
                            const std::map<std::string, std::string>& values) {
  // Python's rules, reproduced: "$$" is a literal "$"; "$name" and "${name}" are replaced
  // when name is one of `values` and kept otherwise; any other "$" is kept.
  const auto is_start = [](char c) {
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');  // ASCII only
  };
  const auto is_rest = [&](char c) { return is_start(c) || (c >= '0' && c <= '9'); };
  std::string out;
  std::string::size_type i = 0;
  while (i < arg.size()) {
    const auto dollar = arg.find('$', i);
    if (dollar == std::string::npos || dollar + 1 == arg.size()) break;
    out.append(arg, i, dollar - i);
    std::string::size_type at = dollar + 1;
    if (arg[at] == '$') {
      out += '$';
      i = at + 1;
      continue;
    }
    const bool braced = arg[at] == '{';
    if (braced) ++at;
    auto end = at;
    if (end < arg.size() && is_start(arg[end])) {
      while (end < arg.size() && is_rest(arg[end])) ++end;
    }
    const bool closed = !braced || (end < arg.size() && arg[end] == '}');
    const auto value = end > at && closed ? values.find(arg.substr(at, end - at)) : values.end();
    if (value != values.end()) {
      out += value->second;
      i = end + (braced ? 1 : 0);
    } else {
      out += '$';  // an unknown or malformed placeholder stays as written
      i = dollar + 1;
    }
  }
  out.append(arg, std::min(i, arg.size()), std::string::npos);
  return out;
}

}  // namespace ddprun::launcher
