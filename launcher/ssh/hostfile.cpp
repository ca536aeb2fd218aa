// hostfile.cpp: hostfile, --hosts and --include/--exclude parsing (see hostfile.h). Used
// by ssh_launch.cpp.
#include "launcher/ssh/hostfile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>

#include "base/file.h"
#include "base/text.h"
#include "launcher/options/usage_error.h"

namespace ddprun::launcher {
namespace {

// The pieces of `s` between `sep`s, each trimmed.
std::vector<std::string> split_trimmed(std::string_view s, char sep) {
  std::vector<std::string> out = split(s, sep);
  for (auto& piece : out) piece = std::string(trim(piece));
  return out;
}

// `text` for a message: bytes outside printable ASCII (a byte-order mark, a non-breaking
// space, control characters: invisible or misleading on a terminal) as \xNN.
std::string shown(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      out += c;
    } else {
      out += fmt::format("\\x{:02x}", u);
    }
  }
  return out;
}

// "" when `name` is a usable host name, else why not. A name that ssh would read as an
// option, or that a shell would split, is refused.
std::string bad_host_name(const std::string& name) {
  if (name.empty()) return "empty host name";
  if (name.front() == '-') return fmt::format("host name '{}' starts with '-'", shown(name));
  for (const char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x80 || (!std::isalnum(u) && c != '.' && c != '-' && c != '_' && c != '@')) {
      return fmt::format(
          "host name '{}' has the character '{}' (letters, digits, '.', '-', "
          "'_' and user@ only)",
          shown(name), shown(std::string_view(&c, 1)));
    }
  }
  if (std::count(name.begin(), name.end(), '@') > 1 || name.back() == '@') {
    return fmt::format("host name '{}' is not [user@]host", shown(name));
  }
  return "";
}

// A UTF-8 byte-order mark: what some editors put at the start of a text file.
constexpr std::string_view kUtf8Bom = "\xef\xbb\xbf";

// A positive count of at most 6 digits, or nullopt.
std::optional<int> positive_int(const std::string& text) {
  const auto v = text.size() <= 6 ? parse_int<unsigned>(text) : std::nullopt;
  return v && *v > 0 ? std::optional<int>(static_cast<int>(*v)) : std::nullopt;
}

// GPU indices "0,2" (each a non-negative int, distinct).
std::vector<int> parse_gpus(const std::vector<std::string>& parts, const std::string& what) {
  std::vector<int> gpus;
  for (const auto& p : parts) {
    const auto index = p.size() <= 4 ? parse_int<unsigned>(p) : std::nullopt;
    if (!index) throw UsageError(fmt::format("{}: '{}' is not a GPU index", what, p));
    const int g = static_cast<int>(*index);
    if (std::find(gpus.begin(), gpus.end(), g) != gpus.end()) {
      throw UsageError(fmt::format("{}: GPU {} named twice", what, g));
    }
    gpus.push_back(g);
  }
  return gpus;
}

void add_host(std::vector<HostEntry>& hosts, HostEntry h, const std::string& where) {
  if (const std::string bad = bad_host_name(h.name); !bad.empty()) {
    throw UsageError(where + ": " + bad);
  }
  for (const auto& other : hosts) {
    if (other.name == h.name) {
      throw UsageError(fmt::format(
          "{}: host '{}' is listed twice{}", where, h.name,
          other.line > 0 ? fmt::format(" (first at line {})", other.line) : std::string()));
    }
  }
  hosts.push_back(std::move(h));
}

// "host[:gpu,gpu]@host..." → host → GPUs (empty: the whole host).
std::map<std::string, std::vector<int>> parse_filter(const std::string& flag,
                                                     const std::string& text) {
  std::map<std::string, std::vector<int>> out;
  for (const auto& item : split_trimmed(text, '@')) {
    const auto colon = item.find(':');
    const std::string name = item.substr(0, colon);
    if (const std::string bad = bad_host_name(name); !bad.empty()) {
      throw UsageError(fmt::format("{} '{}': {}", flag, text, bad));
    }
    std::vector<int> gpus;
    if (colon != std::string::npos) {
      gpus = parse_gpus(split_trimmed(std::string_view(item).substr(colon + 1), ','),
                        fmt::format("{} '{}'", flag, text));
      if (gpus.empty()) throw UsageError(fmt::format("{} '{}': no GPU after ':'", flag, text));
    }
    if (!out.emplace(name, std::move(gpus)).second) {
      throw UsageError(fmt::format("{} '{}': host '{}' named twice", flag, text, name));
    }
  }
  return out;
}

}  // namespace

std::vector<HostEntry> parse_hostfile(std::string_view text, const std::string& source) {
  // A byte-order mark at the start is an editor's, not part of the first host's name.
  if (text.substr(0, kUtf8Bom.size()) == kUtf8Bom) text.remove_prefix(kUtf8Bom.size());
  std::vector<HostEntry> hosts;
  std::istringstream in{std::string(text)};
  std::string raw;
  for (int line = 1; std::getline(in, raw); ++line) {
    const std::string where = fmt::format("{}:{}", source, line);
    std::string_view body(raw);
    body = trim(body.substr(0, body.find('#')));
    if (body.empty()) continue;
    std::istringstream words{std::string(body)};
    HostEntry h;
    h.line = line;
    words >> h.name;
    for (std::string word; words >> word;) {
      if (word.rfind("slots=", 0) != 0) {
        throw UsageError(
            fmt::format("{}: unexpected '{}' (expected: host [slots=N])", where, shown(word)));
      }
      if (h.slots) throw UsageError(where + ": slots= given twice");
      h.slots = positive_int(word.substr(6));
      if (!h.slots) {
        throw UsageError(
            fmt::format("{}: '{}': slots must be a positive integer", where, shown(word)));
      }
    }
    add_host(hosts, std::move(h), where);
  }
  if (hosts.empty()) throw UsageError(source + ": no host in the hostfile");
  return hosts;
}

std::vector<HostEntry> read_hostfile(const std::string& path) {
  const std::optional<std::string> text = read_file(path);
  if (!text) throw UsageError(fmt::format("--hostfile {}: cannot read the file", path));
  return parse_hostfile(*text, path);
}

std::vector<HostEntry> parse_hosts_list(const std::string& text) {
  std::vector<HostEntry> hosts;
  const std::string where = "--hosts '" + shown(text) + "'";
  for (const auto& item : split_trimmed(text, ',')) {
    HostEntry h;
    const auto colon = item.find(':');
    h.name = item.substr(0, colon);
    if (colon != std::string::npos) {
      h.slots = positive_int(item.substr(colon + 1));
      if (!h.slots) {
        throw UsageError(
            fmt::format("{}: '{}': the count after ':' must be a positive integer", where, item));
      }
    }
    add_host(hosts, std::move(h), where);
  }
  return hosts;
}

std::vector<HostEntry> filter_hosts(std::vector<HostEntry> hosts, const std::string& include,
                                    const std::string& exclude) {
  if (!include.empty() && !exclude.empty()) {
    throw UsageError("--include and --exclude cannot be combined");
  }
  const bool inc = !include.empty();
  const std::string flag = inc ? "--include" : "--exclude";
  if (!inc && exclude.empty()) return hosts;
  const auto filter = parse_filter(flag, inc ? include : exclude);
  for (const auto& entry : filter) {
    const std::string& name = entry.first;
    const std::vector<int>& gpus = entry.second;
    const auto it = std::find_if(hosts.begin(), hosts.end(),
                                 [&](const HostEntry& h) { return h.name == name; });
    if (it == hosts.end()) {
      throw UsageError(fmt::format("{}: host '{}' is not in the host list", flag, name));
    }
    for (const int g : gpus) {
      if (it->slots && g >= *it->slots) {
        throw UsageError(fmt::format("{}: host '{}' has {} slots; GPU {} is out of range", flag,
                                     name, *it->slots, g));
      }
    }
    if (!inc && !gpus.empty() && !it->slots) {
      throw UsageError(fmt::format(
          "{}: host '{}' has no slots count, so its other GPUs are unknown (give slots=N)", flag,
          name));
    }
  }
  std::vector<HostEntry> out;
  for (auto& h : hosts) {
    const auto it = filter.find(h.name);
    if (inc) {
      if (it == filter.end()) continue;
      if (!it->second.empty()) h.gpus = it->second;
    } else if (it != filter.end()) {
      if (it->second.empty()) continue;  // the whole host
      std::vector<int> left;
      for (int g = 0; g < *h.slots; ++g) {
        if (std::find(it->second.begin(), it->second.end(), g) == it->second.end()) {
          left.push_back(g);
        }
      }
      if (left.empty()) continue;
      h.gpus = std::move(left);
    }
    out.push_back(std::move(h));
  }
  if (out.empty()) throw UsageError(flag + ": no host is left to run on");
  return out;
}

std::string host_address(const std::string& name) {
  const auto at = name.find('@');
  return at == std::string::npos ? name : name.substr(at + 1);
}

std::optional<int> host_nproc(const HostEntry& host) {
  if (host.gpus) return static_cast<int>(host.gpus->size());
  return host.slots;
}

}  // namespace ddprun::launcher
