// fr_dump.cpp: the flight recorder dumps' pure parts (see fr_dump.h).
#include "launcher/process/fr_dump.h"

#include <fmt/format.h>

#include <cctype>
#include <filesystem>
#include <map>

#include "base/text.h"
#include "launcher/process/descendants.h"

namespace ddprun::launcher {

std::string fr_dump_prefix(const std::vector<std::string>& env) {
  for (const char* name : {"TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"}) {
    const auto value = find_env_entry(env, name);
    if (!value) continue;
    // The analyzer takes the rank from the digits after the prefix: a prefix ending in a
    // digit would read as part of it.
    std::string base = std::filesystem::path(*value).filename().string();
    if (!base.empty() && base != "." && base != ".." &&
        std::isdigit(static_cast<unsigned char>(base.back())) == 0) {
      return base;
    }
    break;
  }
  return std::string(kFrDefaultPrefix);
}

std::string fr_recorder_off(const std::vector<std::string>& env) {
  for (const char* name : {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"}) {
    const auto value = find_env_entry(env, name);
    if (!value) continue;
    const auto n = parse_int<long long>(trim(*value));
    return n && *n <= 0 ? fmt::format("{}={}", name, *value) : "";
  }
  return "";
}

bool parse_fr_answer(std::string_view answer, FrDump& d) {
  if (answer.starts_with("0 ") && answer.size() > 2) {
    d.answered = true;
    d.written = false;
    d.why = std::string(answer.substr(2));
    return true;
  }
  if (!answer.starts_with("1 ")) return false;
  answer.remove_prefix(2);
  const std::size_t space = answer.find(' ');
  const auto bytes = parse_int<std::uint64_t>(answer.substr(0, space));
  if (!bytes || space == std::string_view::npos || space + 1 == answer.size()) return false;
  d.answered = true;
  d.written = true;
  d.bytes = *bytes;
  d.python = std::string(answer.substr(space + 1));
  return true;
}

std::string fr_dump_folder(const std::vector<FrDump>& dumps) {
  for (const FrDump& d : dumps) {
    if (d.written && !d.file.empty()) return std::filesystem::path(d.file).parent_path().string();
  }
  return "";
}

std::string fr_analyzer_command(std::string_view python, std::string_view folder,
                                std::string_view prefix) {
  return fmt::format("{} -m torch.distributed.flight_recorder.fr_trace {} --prefix {}",
                     shell_quote(python), shell_quote(folder), shell_quote(prefix));
}

std::string fr_dump_summary(const std::vector<FrDump>& dumps, bool several_nodes) {
  std::vector<int> written;
  std::map<std::string, std::vector<int>> missing;  // why -> ranks
  const FrDump* first = nullptr;
  for (const FrDump& d : dumps) {
    if (d.file.empty()) continue;
    if (d.written) {
      written.push_back(d.rank);
      if (first == nullptr) first = &d;
    } else {
      missing[d.answered ? d.why : "no answer from ddprun's sampler in time"].push_back(d.rank);
    }
  }
  if (written.empty() && missing.empty()) return "";
  std::string line;
  if (first != nullptr) {
    const std::filesystem::path file(first->file);
    const std::string folder = fr_dump_folder(dumps);
    const std::string prefix = file.filename().string().substr(
        0, file.filename().string().size() - std::to_string(first->rank).size());
    line = fmt::format("stall: flight recorder dumps of {} {} are in {}; analyze them with: {}",
                       written.size() == 1 ? "rank" : "ranks", number_ranges(written), folder,
                       fr_analyzer_command(first->python, folder, prefix));
    if (several_nodes) {
      line +=
          " (this node's ranks: copy every node's files into one folder first, or add "
          "--allow-incomplete-ranks)";
    }
  } else {
    line = "stall: no flight recorder dumps";
  }
  for (const auto& [why, ranks] : missing) {
    line += fmt::format("; {} {} wrote none: {}", ranks.size() == 1 ? "rank" : "ranks",
                        number_ranges(ranks), why);
  }
  return line;
}

}  // namespace ddprun::launcher
