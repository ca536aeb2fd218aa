// events.cpp: torchrun's elastic event records as JSON lines (see events.h): Python's
// json.dumps layout (", " and ": " separators, ASCII-only strings), written by hand
// because nlohmann's dump has other separators.
#include "launcher/events.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "launcher/error_file.h"

namespace ddprun::launcher {
namespace {

using ordered_json = nlohmann::ordered_json;

std::string quoted(const std::string& s) {
  // ensure_ascii, as json.dumps; bytes that are not UTF-8 become U+FFFD.
  return ordered_json(s).dump(-1, ' ', true, ordered_json::error_handler_t::replace);
}

std::string python_float(double v) {
  std::string out = fmt::format("{}", v);
  if (out.find_first_of(".eni") == std::string::npos) out += ".0";  // repr(5.0) == "5.0"
  return out;
}

// json.dumps(value) of a parsed document.
std::string dumps(const ordered_json& v) {
  if (v.is_object()) {
    std::string out = "{";
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (it != v.begin()) out += ", ";
      out += quoted(it.key()) + ": " + dumps(it.value());
    }
    return out + "}";
  }
  if (v.is_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + dumps(v[i]);
    return out + "]";
  }
  if (v.is_string()) return quoted(v.get<std::string>());
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_null()) return "null";
  if (v.is_number_float()) return python_float(v.get<double>());
  return v.dump();
}

template <typename T>
std::string or_null(const std::optional<T>& v) {
  if (!v) return "null";
  if constexpr (std::is_same_v<T, std::string>) {
    return quoted(*v);
  } else if constexpr (std::is_same_v<T, double>) {
    return python_float(*v);
  } else {
    return std::to_string(*v);
  }
}

// The inner "metadata" string: json.dumps of the agent's md dict (worker values are
// one-element tuples in torchrun, hence the lists).
std::string inner_metadata(const EventContext& c, const EventFields& e) {
  std::string md = fmt::format(R"({{"group_world_size": {}, "entry_point": {})",
                               or_null(e.group_world_size), quoted(c.entry_point));
  if (e.worker) {
    const auto& w = *e.worker;
    const std::optional<int> pid = w.exit_code ? w.pid : std::nullopt;
    md += fmt::format(
        R"(, "local_rank": [{}], "role_rank": [{}], "role_world_size": [{}], "exit_code": [{}], "worker_pid": [{}])",
        w.local_rank, w.global_rank, w.world_size, or_null(w.exit_code), or_null(pid));
  }
  return md + "}";
}

}  // namespace

std::string format_event(const EventContext& c, const EventFields& e) {
  // A string, not an optional<int>: GCC 12 at -O3 warns (maybe-uninitialized) through the
  // optional's inlined to_string.
  const std::string global_rank = e.worker ? std::to_string(e.worker->global_rank) : "null";
  const std::optional<std::string> worker_id =
      e.worker && e.worker->pid ? std::optional(std::to_string(*e.worker->pid)) : std::nullopt;
  return fmt::format(
      R"({{"name": {}, "source": "{}", "timestamp": 0, "metadata": {{"run_id": {}, )"
      R"("global_rank": {}, "group_rank": {}, "worker_id": {}, "role": {}, "hostname": {}, )"
      R"("state": {}, "total_run_time": {}, "rdzv_backend": {}, "raw_error": {}, )"
      R"("metadata": {}, "agent_restarts": {}, "duration_ms": {}}}}})",
      quoted("torchelastic.worker.status." + e.state), e.worker ? "WORKER" : "AGENT",
      quoted(c.run_id), global_rank, or_null(e.group_rank), or_null(worker_id), quoted(c.role),
      quoted(c.hostname), quoted(e.state), c.total_run_time, quoted(c.rdzv_backend),
      or_null(e.raw_error), quoted(inner_metadata(c, e)), c.agent_restarts, or_null(e.duration_ms));
}

std::string raw_error_of(const std::string& error_file_path, bool written, int exitcode) {
  struct stat st {};
  if (written && ::stat(error_file_path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
      st.st_size <= static_cast<off_t>(kMaxErrorFileBytes)) {
    const ordered_json doc =
        ordered_json::parse(read_file(error_file_path).value_or(""), nullptr, false);
    if (!doc.is_discarded()) return dumps(doc);
  }
  if (exitcode < 0) return R"({"message": "<NONE>"})";
  return R"({"message": "<NONE>", "errorTraits": {"category": "system_terminated_error", )"
         R"("retryability": "False"}})";
}

void EventLog::record(const EventContext& context, const EventFields& event) const {
  if (!console_) return;
  std::fputs((format_event(context, event) + "\n").c_str(), stderr);
}

}  // namespace ddprun::launcher
