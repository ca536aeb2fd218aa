// named_line.cpp: NamedLine and its codec (named_line.h).
#include "launcher/jobwide/named_line.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "launcher/jobwide/board_json.h"

namespace ddprun::launcher {
namespace {

constexpr std::size_t kMaxNamedLineChars = 4096;  // one line, cut beyond

std::vector<NamedLine> read_named_lines(const nlohmann::json& j) {
  std::vector<NamedLine> out;
  for (const nlohmann::json& l : j.at("lines")) {
    NamedLine n;
    n.line = l.at("line").get<std::string>().substr(0, kMaxNamedLineChars);
    n.ranks = l.at("ranks").get<std::vector<int>>();
    out.push_back(std::move(n));
  }
  return out;
}

}  // namespace

bool NamedLine::names_any_of(int first, int count) const {
  return std::any_of(ranks.begin(), ranks.end(),
                     [&](int r) { return r >= first && r < first + count; });
}

std::string encode_named_lines(const std::vector<NamedLine>& lines) {
  nlohmann::json ls = nlohmann::json::array();
  for (const NamedLine& l : lines) {
    ls.push_back({{"line", l.line.substr(0, kMaxNamedLineChars)}, {"ranks", l.ranks}});
  }
  const nlohmann::json j = {{"version", 1}, {"lines", ls}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::optional<std::vector<NamedLine>> decode_named_lines(const std::string& text,
                                                         std::string& error) {
  return decode_board_json(text, "list of named lines", kMaxNamedLinesBytes, 1, error,
                           read_named_lines);
}

}  // namespace ddprun::launcher
