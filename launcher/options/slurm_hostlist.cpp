// slurm_hostlist.cpp: expansion of Slurm's compressed host lists (see slurm_hostlist.h).
// Used by slurm_env.cpp.
#include "launcher/options/slurm_hostlist.h"

#include <fmt/format.h>

#include <cctype>

namespace ddprun::launcher {
namespace {

// Splits `text` at commas that are outside brackets.
std::vector<std::string> split_top_level(const std::string& text, const std::string& whole) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (const char ch : text) {
    if (ch == '[') {
      if (depth > 0) throw HostlistError(fmt::format("host list '{}': nested '['", whole));
      ++depth;
    } else if (ch == ']') {
      if (depth == 0) throw HostlistError(fmt::format("host list '{}': ']' without '['", whole));
      --depth;
    }
    if (ch == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  if (depth != 0) throw HostlistError(fmt::format("host list '{}': '[' without ']'", whole));
  out.push_back(cur);
  return out;
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (const char ch : s) {
    if (!std::isdigit(static_cast<unsigned char>(ch))) return false;
  }
  return true;
}

// The values of one bracket body ("01-04,07"), as strings of their padded width.
std::vector<std::string> expand_bracket(const std::string& body, const std::string& whole,
                                        std::size_t max_hosts) {
  if (body.empty()) throw HostlistError(fmt::format("host list '{}': empty '[]'", whole));
  std::vector<std::string> out;
  std::string::size_type start = 0;
  while (start <= body.size()) {
    const auto comma = body.find(',', start);
    const std::string part =
        body.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? body.size() + 1 : comma + 1;
    const auto dash = part.find('-');
    const std::string lo = part.substr(0, dash);
    const std::string hi = dash == std::string::npos ? lo : part.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi) || lo.size() > 18 || hi.size() > 18) {
      throw HostlistError(
          fmt::format("host list '{}': '{}' is not a number or a range a-b", whole, part));
    }
    const unsigned long long a = std::stoull(lo);
    const unsigned long long b = std::stoull(hi);
    if (b < a) {
      throw HostlistError(fmt::format("host list '{}': range '{}' is descending", whole, part));
    }
    if (b - a >= max_hosts || out.size() + (b - a) >= max_hosts) {
      throw HostlistError(fmt::format("host list '{}': more than {} hosts", whole, max_hosts));
    }
    const std::size_t width = lo.size() > 1 && lo[0] == '0' ? lo.size() : 0;
    for (unsigned long long v = a; v <= b; ++v) out.push_back(fmt::format("{:0{}}", v, width));
  }
  return out;
}

// Appends the expansion of one name ("rack[1-2]-n[01-02]") to `out`.
void expand_name(const std::string& name, const std::string& whole, std::size_t max_hosts,
                 std::vector<std::string>& out) {
  if (name.empty()) throw HostlistError(fmt::format("host list '{}': empty host name", whole));
  std::vector<std::string> partial{""};
  std::string::size_type at = 0;
  while (at < name.size()) {
    const auto open = name.find('[', at);
    const std::string text =
        name.substr(at, open == std::string::npos ? std::string::npos : open - at);
    for (auto& p : partial) p += text;
    if (open == std::string::npos) break;
    const auto close = name.find(']', open);  // balanced: split_top_level checked
    const auto values = expand_bracket(name.substr(open + 1, close - open - 1), whole, max_hosts);
    if (partial.size() * values.size() > max_hosts) {
      throw HostlistError(fmt::format("host list '{}': more than {} hosts", whole, max_hosts));
    }
    std::vector<std::string> next;
    next.reserve(partial.size() * values.size());
    for (const auto& p : partial) {
      for (const auto& v : values) next.push_back(p + v);
    }
    partial = std::move(next);
    at = close + 1;
  }
  if (out.size() + partial.size() > max_hosts) {
    throw HostlistError(fmt::format("host list '{}': more than {} hosts", whole, max_hosts));
  }
  out.insert(out.end(), partial.begin(), partial.end());
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& list, std::size_t max_hosts) {
  for (const char ch : list) {
    if (std::isspace(static_cast<unsigned char>(ch))) {
      throw HostlistError(fmt::format("host list '{}': contains white space", list));
    }
  }
  if (list.empty()) throw HostlistError("host list is empty");
  std::vector<std::string> out;
  for (const auto& name : split_top_level(list, list)) expand_name(name, list, max_hosts, out);
  return out;
}

}  // namespace ddprun::launcher
