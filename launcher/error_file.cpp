// error_file.cpp: @record error files (see error_file.h): read a worker's, copy or write
// the agent's own. Used by failure_report.cpp.
#include "launcher/error_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/text.h"

namespace ddprun::launcher {
namespace {

using nlohmann::json;

// PyTorch writes the timestamp as a decimal string; accept numbers too.
std::optional<std::int64_t> as_timestamp(const json& v) {
  try {
    if (v.is_number_integer()) return v.get<std::int64_t>();
    if (v.is_number()) return static_cast<std::int64_t>(v.get<double>());
    if (v.is_string()) return parse_int<std::int64_t>(v.get<std::string>());
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

// The file's text, bounded: a worker's error file is untrusted. Only a regular file (a
// symlink to one included, as torchrun's os.path.isfile) of at most kMaxErrorFileBytes is
// read; a FIFO is opened without blocking and refused, /dev/zero and a 50 MB file too.
// nullopt with `why` (empty when the file is missing).
std::optional<std::string> read_bounded(const std::string& path, std::string* why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *why = errno == ENOENT || errno == ENOTDIR ? "" : std::strerror(errno);
    return std::nullopt;
  }
  struct stat st {};
  std::optional<std::string> text;
  if (::fstat(fd, &st) != 0) {
    *why = std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    *why = "not a regular file";
  } else if (st.st_size > static_cast<off_t>(kMaxErrorFileBytes)) {
    *why = "larger than " + std::to_string(kMaxErrorFileBytes >> 20) + " MiB (" +
           std::to_string(st.st_size) + " bytes)";
  } else {
    text.emplace();
    char buf[65536];
    ssize_t n = 0;
    // Bounded even if the file grows while it is read.
    while (text->size() <= kMaxErrorFileBytes && (n = ::read(fd, buf, sizeof buf)) != 0) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      text->append(buf, static_cast<std::size_t>(n));
    }
    if (n < 0 || text->size() > kMaxErrorFileBytes) {
      *why = n < 0 ? std::strerror(errno) : "grew past the size limit while read";
      text.reset();
    }
  }
  ::close(fd);
  return text;
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
  std::string why;
  const std::optional<std::string> text = read_bounded(path, &why);
  if (!text && why.empty()) return info;
  info.exists = true;
  if (!text) {
    info.parse_error = why;
    return info;
  }
  const json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("message")) {
    info.parse_error = j.is_discarded() ? "not valid JSON" : "no \"message\" field";
    return info;
  }
  const json& msg = j["message"];
  if (msg.is_string()) {
    info.display = msg.get<std::string>();
    if (j.contains("timestamp")) info.timestamp = as_timestamp(j["timestamp"]);
  } else if (msg.is_object()) {
    std::string shown = "<N/A>";
    const json* extra =
        msg.contains("extraInfo") && msg["extraInfo"].is_object() ? &msg["extraInfo"] : nullptr;
    if (extra && extra->contains("py_callstack") && (*extra)["py_callstack"].is_string()) {
      shown = (*extra)["py_callstack"].get<std::string>();
    } else if (msg.contains("message") && msg["message"].is_string()) {
      shown = msg["message"].get<std::string>();
    }
    info.display = indent_continuations(shown);
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
  std::string reason;
  const std::optional<std::string> text = read_bounded(from, &reason);
  if (!text) {
    if (why) *why = "cannot read " + from + (reason.empty() ? "" : ": " + reason);
    return false;
  }
  json j = json::parse(*text, nullptr, false);
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
