// etcd_board_reader.cpp: EtcdBoardReader (etcd_board_reader.h).
#include "rendezvous/etcd/etcd_board_reader.h"

#include <utility>

#include "base/text.h"
#include "rendezvous/rendezvous.h"

namespace ddprun::rdzv {

EtcdBoardReader::EtcdBoardReader(EtcdOptions options, std::string base)
    : client_(std::move(options)), keys_{std::move(base)} {}

BoardSnapshot EtcdBoardReader::read(const std::string& name) {
  BoardSnapshot s;
  if (auto closed = client_.get(keys_.key("closed"))) {
    s.kind = BoardSnapshot::Kind::kClosed;
    s.closed = std::move(closed->value);
    return s;
  }
  const std::optional<EtcdKv> kv = client_.get(keys_.key("state"));
  if (!kv) {
    s.kind =
        client_.get(keys_.key("job")) ? BoardSnapshot::Kind::kForming : BoardSnapshot::Kind::kNoRun;
    return s;
  }
  const std::optional<EtcdRoundState> state = decode_round_state(kv->value);
  if (!state) {
    throw RendezvousStateError(where() + ": " + keys_.key("state") +
                               " is not a ddprun round state ('" + kv->value.substr(0, 40) + "')");
  }
  s.round = state->round;
  if (!state->final) {
    s.kind = BoardSnapshot::Kind::kForming;
    return s;
  }
  s.kind = BoardSnapshot::Kind::kRound;
  s.nodes = static_cast<int>(state->members.size());
  s.values.resize(state->members.size());
  const std::string prefix = keys_.rkey(s.round, "view/" + name);
  for (EtcdKv& v : client_.get_prefix(prefix)) {
    const auto node = parse_int<int>(v.key.substr(prefix.size()));
    if (node && *node >= 0 && *node < s.nodes) {
      s.values[static_cast<std::size_t>(*node)] = std::move(v.value);
    }
  }
  return s;
}

}  // namespace ddprun::rdzv
