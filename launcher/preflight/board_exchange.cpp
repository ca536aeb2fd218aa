// board_exchange.cpp: the pre-flight check's board traffic (see board_exchange.h).
#include "launcher/preflight/board_exchange.h"

#include <thread>

namespace ddprun::launcher::preflight {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

namespace {

// Node 0's part, and a node's whose node 0 is silent: every value ("" for a node that has
// not shared), waiting for those missing until `deadline`.
std::optional<std::vector<std::string>> read_all(rdzv::JobBoard& board, int nodes,
                                                 const std::string& prefix, Ms look,
                                                 Clock::time_point deadline,
                                                 const BoardWait& wait) {
  std::int64_t shared = board.add(prefix + "count", 0);
  while (shared < nodes && Clock::now() < deadline) {
    if (!wait(look)) return std::nullopt;
    shared = board.add(prefix + "count", 0);
  }
  std::vector<std::string> names;
  for (int i = 0; i < nodes; ++i) names.push_back(prefix + std::to_string(i));
  const auto values = board.get(names, shared >= nodes ? kVerdictReadWait : Ms(0));
  std::vector<std::string> out;
  for (const auto& v : values) out.push_back(v.value_or(""));
  return out;
}

}  // namespace

std::optional<std::string> decide_on_board(rdzv::JobBoard& board, int nodes, int node,
                                           const std::string& prefix, const std::string& mine,
                                           Clock::time_point deadline, const BoardWait& wait,
                                           const Decide& decide) {
  board.set(prefix + std::to_string(node), mine);
  board.add(prefix + "count", 1);
  const Ms look = kBoardPoll * (1 + nodes / 64);
  const std::string key = prefix + "answer";
  std::optional<std::string> answer;
  if (node != 0) {
    const auto give_up = deadline + kLeaderSlack;
    while (!(answer = board.get({key}, Ms(0)).front()) && Clock::now() < give_up) {
      if (!wait(look)) return std::nullopt;
    }
  }
  if (!answer) {
    const auto values = read_all(board, nodes, prefix, look, deadline, wait);
    if (!values) return std::nullopt;
    answer = board.set_once(key, decide(*values));
  }
  board.add(key + "/read", 1);
  return answer;
}

void wait_until_read(rdzv::JobBoard& board, int nodes, const std::string& prefix) {
  const std::string counter = prefix + "answer/read";
  const auto deadline = Clock::now() + kVerdictReadWait;
  while (board.add(counter, 0) < nodes && Clock::now() < deadline) {
    std::this_thread::sleep_for(kBoardPoll);
  }
}

}  // namespace ddprun::launcher::preflight
