// board_json.h: the one preamble of every versioned JSON value a node puts on the round's
// JobBoard (a failure record, a stall snapshot, a straggler window, a start-up timeline):
// the size bound, the parse, the version check, and one error line naming what was wrong
// ("a stall snapshot of version 7", "a malformed failure record: ..."). Used by the codecs
// of launcher/jobwide/ (job_failures, stall_verdict, straggler, startup_timeline).
// Thread-safety: pure functions.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

namespace ddprun::launcher {

// The value `text` of the kind `noun` ("stall snapshot") read by `read` (a callable taking
// the parsed object and returning the value; it may throw nlohmann's exceptions), or
// nullopt with `error` set: more than `max_bytes`, not JSON, another version than
// `version`, or a field `read` found missing or of the wrong type.
template <typename Read>
auto decode_board_json(const std::string& text, const char* noun, std::size_t max_bytes,
                       int version, std::string& error, Read&& read)
    -> std::optional<decltype(read(std::declval<const nlohmann::json&>()))> {
  if (text.size() > max_bytes) {
    error = fmt::format("a {} of {} bytes (more than {})", noun, text.size(), max_bytes);
    return std::nullopt;
  }
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (j.at("version").get<int>() != version) {
      error = fmt::format("a {} of version {}", noun, j.at("version").dump());
      return std::nullopt;
    }
    return std::forward<Read>(read)(j);
  } catch (const nlohmann::json::exception& e) {
    error = fmt::format("a malformed {}: {}", noun, e.what());
    return std::nullopt;
  }
}

}  // namespace ddprun::launcher
