// error_file.cpp: @record error files (see error_file.h): read a worker's, copy or write
// the agent's own. Used by failure_report.cpp.
#include "launcher/error_file.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace ddprun::launcher {
namespace {

using nlohmann::json;

// PyTorch writes the timestamp as a decimal string; accept numbers too.
std::optional<std::int64_t> as_timestamp(const json& v) {
  try {
    if (v.is_number_integer()) return v.get<std::int64_t>();
    if (v.is_number()) return static_cast<std::int64_t>(v.get<double>());
    if (v.is_string()) return std::stoll(v.get<std::string>());
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::string indent_continuations(const std::string& text) {
  std::string out;
  for (char ch : text) {
    out += ch;
    if (ch == '\n') out += "  ";
  }
  return out;
}

bool write_json(const std::string& to, const json& j, std::string* why) {
  std::ofstream out(to, std::ios::trunc);
  // Worker output need not be UTF-8; dump() would throw on it.
  if (out) out << j.dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
  if (!out) {
    if (why) *why = "cannot write " + to;
    return false;
  }
  return true;
}

}  // namespace

ErrorFileInfo read_error_file(const std::string& path) {
  ErrorFileInfo info;
  std::ifstream in(path);
  if (!in) return info;
  info.exists = true;
  std::stringstream buf;
  buf << in.rdbuf();
  const json j = json::parse(buf.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("message")) {
    info.parse_error = j.is_discarded() ? "not valid JSON" : "no \"message\" field";
    return info;
  }
  const json& msg = j["message"];
  if (msg.is_string()) {
    info.display = msg.get<std::string>();
    if (j.contains("timestamp")) info.timestamp = as_timestamp(j["timestamp"]);
  } else if (msg.is_object()) {
    std::string text = "<N/A>";
    const json* extra =
        msg.contains("extraInfo") && msg["extraInfo"].is_object() ? &msg["extraInfo"] : nullptr;
    if (extra && extra->contains("py_callstack") && (*extra)["py_callstack"].is_string()) {
      text = (*extra)["py_callstack"].get<std::string>();
    } else if (msg.contains("message") && msg["message"].is_string()) {
      text = msg["message"].get<std::string>();
    }
    info.display = indent_continuations(text);
    if (extra && extra->contains("timestamp")) info.timestamp = as_timestamp((*extra)["timestamp"]);
  } else {
    info.parse_error = "\"message\" is neither a string nor an object";
    return info;
  }
  info.parsed = true;
  return info;
}

bool copy_error_file(const std::string& from, const std::string& to, int exit_code,
                     std::string* why) {
  std::ifstream in(from);
  if (!in) {
    if (why) *why = "cannot read " + from;
    return false;
  }
  std::stringstream buf;
  buf << in.rdbuf();
  json j = json::parse(buf.str(), nullptr, false);
  if (j.is_discarded()) {
    if (why) *why = from + " is not valid JSON";
    return false;
  }
  if (j.is_object() && j.contains("message") && j["message"].is_object()) {
    j["message"]["errorCode"] = exit_code;
  }
  return write_json(to, j, why);
}

bool write_error_file(const std::string& to, const std::string& message,
                      const std::string& py_callstack, std::int64_t timestamp, int exit_code,
                      std::string* why) {
  json j = {{"message",
             {{"message", message},
              {"errorCode", exit_code},
              {"extraInfo",
               {{"py_callstack", py_callstack}, {"timestamp", std::to_string(timestamp)}}}}}};
  return write_json(to, j, why);
}

}  // namespace ddprun::launcher
