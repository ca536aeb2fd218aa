// board_exchange.cpp: the pre-flight check's board traffic (see board_exchange.h).
#include "launcher/preflight/board_exchange.h"

#include <thread>

namespace ddprun::launcher::preflight {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

std::optional<std::vector<std::string>> share_on_board(rdzv::JobBoard& board, int nodes, int node,
                                                       const std::string& prefix,
                                                       const std::string& mine,
                                                       Clock::time_point deadline,
                                                       const BoardWait& wait) {
  std::vector<std::string> names;
  for (int i = 0; i < nodes; ++i) names.push_back(prefix + std::to_string(i));
  board.set(names[static_cast<std::size_t>(node)], mine);
  std::int64_t shared = board.add(prefix + "count", 1);
  const Ms look = kBoardPoll * (1 + nodes / 64);
  while (shared < nodes && Clock::now() < deadline) {
    if (!wait(look)) return std::nullopt;
    shared = board.add(prefix + "count", 0);
  }
  const auto values = board.get(names, shared >= nodes ? kVerdictReadWait : Ms(0));
  std::vector<std::string> out;
  for (const auto& v : values) out.push_back(v.value_or(""));
  return out;
}

std::string agree_on_board(rdzv::JobBoard& board, int nodes, bool hosts_store,
                           const std::string& key, const std::string& mine) {
  std::string verdict = board.set_once(key, mine);
  std::int64_t read = board.add(key + "/read", 1);
  const auto read_deadline = Clock::now() + kVerdictReadWait;
  while (hosts_store && read < nodes && Clock::now() < read_deadline) {
    std::this_thread::sleep_for(kBoardPoll);
    read = board.add(key + "/read", 0);
  }
  return verdict;
}

}  // namespace ddprun::launcher::preflight
