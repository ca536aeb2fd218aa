// keys.cpp: StoreRendezvous's key names and the reading of its counters (keys.h).
#include "rendezvous/c10d/keys.h"

#include <exception>

#include "base/text.h"
#include "rendezvous/rendezvous.h"

namespace ddprun::rdzv::keys {
namespace {

std::string round_key(int round, const char* what) {
  // Built by appending: GCC 12 at -O2 warns falsely (-Wrestrict) on "lit" + std::string.
  std::string key(1, 'r');
  key.append(std::to_string(round)).append(1, '/').append(what);
  return key;
}

std::string slot_key(int round, const char* what, int slot) {
  return round_key(round, what).append(1, '/').append(std::to_string(slot));
}

std::vector<std::string> slot_keys(int round, const char* what, int n) {
  std::vector<std::string> out;
  out.reserve(static_cast<std::size_t>(n > 0 ? n : 0));
  for (int i = 0; i < n; ++i) out.push_back(slot_key(round, what, i));
  return out;
}

}  // namespace

std::string joined(int round) { return round_key(round, "joined"); }
std::string node(int round, int slot) { return slot_key(round, "node", slot); }
std::string heartbeat(int round, int slot) { return slot_key(round, "hb", slot); }
std::string final_size(int round) { return round_key(round, "final"); }
std::string master(int round) { return round_key(round, "master"); }
std::string exit_seen(int round) { return round_key(round, "exit_seen"); }
std::string rank(int round, int slot) { return slot_key(round, "rank", slot); }
std::string refused(int round) { return round_key(round, "refused"); }
std::string note(int round) { return round_key(round, "note"); }
std::string broken(int round) { return round_key(round, "broken"); }
std::string gone(int round, int slot) { return slot_key(round, "gone", slot); }
std::string out(int round) { return round_key(round, "out"); }
std::string done(int round) { return round_key(round, "done"); }
std::string exit_all(int round) { return round_key(round, "exit"); }
std::string view(int round, const std::string& name) {
  return round_key(round, "view").append(1, '/').append(name);
}
std::vector<std::string> ranks(int round, int n) { return slot_keys(round, "rank", n); }
std::vector<std::string> nodes(int round, int n) { return slot_keys(round, "node", n); }
std::vector<std::string> heartbeats(int round, int n) { return slot_keys(round, "hb", n); }

int parse_count(const std::string& value, const std::string& key) {
  if (const auto n = parse_int<int>(value); n && *n >= 0) return *n;
  throw RendezvousStateError("corrupt rendezvous key " + key + " = '" + value + "'");
}

}  // namespace ddprun::rdzv::keys
