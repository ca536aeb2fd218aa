#include "rendezvous/store_rendezvous.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "rendezvous/endpoint.h"
#include "store/store.h"
#include "store/tcp_store_server.h"

namespace ddprun::rdzv {
namespace {

using Clock = StoreRendezvous::Clock;
using Ms = StoreRendezvous::Ms;

// Key layout, relative to the handler's prefix (see docs/multinode.md):
//   closed                 set once the job has ended
//   job                    the job's fingerprint (JSON array: the workers' command), set
//                          once by the first agent of the run id
//   round                  hint: the latest formed round (fresh agents start there)
//   r<r>/joined            ADD counter: slots of round r
//   r<r>/node/<slot>       descriptor JSON of the agent holding the slot
//   r<r>/hb/<slot>         heartbeat: ADD counter, or "left" / "done"
//   r<r>/final             node count N of the formed round (CAS from "")
//   r<r>/master            JSON {addr, port} of the workers' store for round r
std::string rk(int r, const char* what) {
  // Built by appending: GCC 12 at -O2 warns falsely (-Wrestrict) on "lit" + std::string.
  std::string key(1, 'r');
  key.append(std::to_string(r)).append(1, '/').append(what);
  return key;
}
std::string rk(int r, const char* what, int slot) {
  return rk(r, what) + "/" + std::to_string(slot);
}
std::vector<std::string> slot_keys(int r, const char* what, int n) {
  std::vector<std::string> keys;
  keys.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) keys.push_back(rk(r, what, i));
  return keys;
}

// How often the heartbeat thread wakes (to beat when due, and to look at the others).
Ms heartbeat_tick(Ms keep_alive_interval) { return std::min<Ms>(keep_alive_interval, Ms(1000)); }

long long secs_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::seconds>(deadline - Clock::now()).count();
  return std::max<long long>(left, 0);
}

int parse_count(const std::string& v, const std::string& what) {
  try {
    std::size_t used = 0;
    int n = std::stoi(v, &used);
    if (used == v.size() && n >= 0) return n;
  } catch (const std::exception&) {
  }
  throw RendezvousStateError("corrupt rendezvous key " + what + " = '" + v + "'");
}

// `words` as one line for messages, quoted like a shell would need them.
std::string command_line(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) {
    if (!out.empty()) out += ' ';
    if (!w.empty() && w.find_first_of(" \t\n'\"\\$`;&|<>()*?") == std::string::npos) {
      out += w;
      continue;
    }
    out += '\'';
    for (char c : w) {
      if (c == '\'') {
        out += "'\\''";
      } else if (c == '\n') {
        out += "\\n";  // keeps the message on one line
      } else {
        out += c;
      }
    }
    out += '\'';
  }
  if (out.size() > 400) out = out.substr(0, 400) + "...";
  return out.empty() ? "(no command)" : out;
}

}  // namespace

std::string StoreRendezvous::NodeDesc::label() const {
  std::string out = addr;
  if (!host.empty() && host != addr) out += " (" + host + ")";
  out += " pid " + std::to_string(pid);
  return out;
}

std::vector<StoreRendezvous::Member> StoreRendezvous::Liveness::observe(
    int r, const std::vector<std::string>& values, Clock::time_point asked) {
  // A heartbeat that did not move while this observer could not look proves nothing:
  // the store was frozen (its host stopped: nobody could beat) or this thread was (the
  // peers' beats are then all in at once, or not yet). So the time between two looks
  // counts for at most max_gap: the clocks skip the rest; and after a whole threshold
  // without a look they start afresh. (Steadily slow looks still add up, so a dead node
  // is found however loaded the observer is, only later.)
  const auto gap = last_look ? asked - *last_look : Clock::duration{0};
  last_look = std::max(asked, last_look.value_or(asked));  // two threads' looks interleave
  if (round != r || last.size() != values.size()) {
    round = r;
    last.assign(values.size(), {std::string("\x01"), asked});
  } else if (gap >= threshold) {
    for (auto& l : last) l.second = asked;
  } else if (gap > max_gap) {
    for (auto& l : last) l.second = std::min(asked, l.second + (gap - max_gap));
  }
  std::vector<Member> out(values.size(), Member::kAlive);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i] == "left") {
      out[i] = Member::kLeft;
    } else if (values[i] == "done") {
      out[i] = Member::kDone;
    } else if (values[i] != last[i].first) {
      last[i] = {values[i], asked};
    } else if (asked - last[i].second >= threshold) {
      out[i] = Member::kDead;
    }
  }
  return out;
}

StoreRendezvous::StoreRendezvous(Config config, Connect connect, std::function<void()> on_shutdown,
                                 std::function<bool()> hosts_store,
                                 std::function<void()> clear_worker_keys)
    : config_(std::move(config)),
      connect_(std::move(connect)),
      on_shutdown_(std::move(on_shutdown)),
      hosts_store_(std::move(hosts_store)),
      clear_worker_keys_(std::move(clear_worker_keys)) {
  liveness_.threshold = config_.keep_alive_interval * config_.keep_alive_max_attempt;
  // Looks come every heartbeat tick (at most 1 s) plus a few store round trips: time
  // beyond two ticks between two looks is time the observer was blind.
  liveness_.max_gap = 2 * heartbeat_tick(config_.keep_alive_interval);
}

StoreRendezvous::~StoreRendezvous() { shutdown(); }

std::string StoreRendezvous::where() const {
  return "rendezvous '" + config_.run_id + "' (" + config_.backend + " at " + config_.endpoint +
         ")";
}

void StoreRendezvous::check_interrupted() {
  if (interrupted_.load()) {
    throw RendezvousInterruptedError(where() + ": interrupted while waiting for the other nodes");
  }
}

void StoreRendezvous::check_interrupted(int r, int slot) {
  if (!interrupted_.load()) return;
  // As on a timeout: the slot stays counted, but its heartbeat says "left", so the
  // round's other nodes see at once that this node will not run in it.
  try {
    store_->set(rk(r, "hb", slot), "left");
  } catch (const std::exception& e) {
    spdlog::debug("{}: could not announce leaving round {}: {}", where(), r, e.what());
  }
  check_interrupted();
}

void StoreRendezvous::check_closed() {
  if (closed_.load() || store_->check({"closed"})) {
    closed_.store(true);
    throw RendezvousClosedError(where() + " is closed: the job has ended");
  }
}

bool StoreRendezvous::sleep_slice(Ms d) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, d, [&] { return interrupted_.load(); });
  return !interrupted_.load();
}

void StoreRendezvous::interrupt() {
  interrupted_.store(true);
  std::lock_guard lock(mu_);
  cv_.notify_all();
}

std::string StoreRendezvous::desc_json() const {
  nlohmann::json j;
  j["addr"] = config_.advertise_addr;
  j["host"] = config_.hostname;
  j["pid"] = static_cast<long>(getpid());
  j["node_rank"] = config_.node_rank;
  j["node_rank_defaulted"] = config_.node_rank_defaulted;
  j["nproc"] = config_.local_world_size;
  if (config_.job_check) j["job"] = config_.job_command;
  return j.dump();
}

void StoreRendezvous::ensure_connected(Clock::time_point deadline) {
  if (store_) return;
  auto main = connect_(deadline, interrupted_);
  auto hb = connect_(deadline, interrupted_);
  store_ = main;
  hb_store_ = hb;
}

RendezvousInfo StoreRendezvous::next_rendezvous() {
  stop_heartbeats();
  check_interrupted();
  auto deadline = Clock::now() + config_.join_timeout;
  try {
    ensure_connected(deadline);
    return join(deadline);
  } catch (const store::StoreConnectionError& e) {
    throw RendezvousConnectionError(where() + ": lost the rendezvous store: " + e.what());
  } catch (const store::StoreTimeoutError& e) {
    throw RendezvousConnectionError(where() + ": the rendezvous store did not answer in time (" +
                                    e.what() + ")");
  } catch (const store::StoreError& e) {
    throw RendezvousStateError(where() + ": rendezvous store error: " + e.what());
  }
}

void StoreRendezvous::check_same_job() {
  if (job_checked_) return;
  // One round trip: sets the key only where it is missing (the first agent of the run
  // id); an existing fingerprint is left as it is, so a refused node writes nothing.
  const std::string mine = nlohmann::json(config_.job_command).dump();
  const std::string published = store_->compare_set("job", "", mine);
  if (published != mine) {
    auto j = nlohmann::json::parse(published, nullptr, false);
    if (j.is_discarded() || !j.is_array() ||
        !std::all_of(j.begin(), j.end(), [](const auto& w) { return w.is_string(); })) {
      throw RendezvousStateError(where() + ": corrupt job fingerprint '" + published +
                                 "' (is a non-ddprun agent using this run id?)");
    }
    throw RendezvousStateError(
        where() + " belongs to another job: its nodes run `" +
        command_line(j.get<std::vector<std::string>>()) + "`, this node would run `" +
        command_line(config_.job_command) +
        "`; give each job its own --rdzv-id (the nodes of one job run the same command)");
  }
  job_checked_ = true;
}

RendezvousInfo StoreRendezvous::join(Clock::time_point deadline) {
  if (config_.job_check) check_same_job();  // before this node writes anything
  int r = 0;
  if (in_round_) {
    // Leaving: peers of the old round see "left" and re-rendezvous too; waiters of the
    // next round treat this slot as gone.
    store_->set(rk(round_, "hb", slot_), "left");
    r = round_ + 1;
    in_round_ = false;
  } else if (store_->check({"round"})) {
    r = parse_count(store_->get("round"), "round");
  }
  {
    std::lock_guard lock(mu_);
    reason_.clear();
  }
  needs_new_round_.store(false);
  waiting_.store(0);

  for (;;) {
    check_interrupted();
    check_closed();
    if (Clock::now() >= deadline) {
      throw RendezvousTimeoutError(where() + ": no round formed within join_timeout");
    }
    if (store_->check({rk(r, "final")})) {  // formed (and running) without us: next one
      ++r;
      continue;
    }
    int slot = static_cast<int>(store_->add(rk(r, "joined"), 1)) - 1;
    store_->multi_set({rk(r, "node", slot), rk(r, "hb", slot)}, {desc_json(), "1"});
    spdlog::debug("{}: joined round {} in slot {}", where(), r, slot);
    int n = wait_for_final(r, slot, deadline);
    if (slot >= n) {
      spdlog::warn(
          "{}: round {} formed with {} nodes without this one (max {}); waiting for "
          "the next round",
          where(), r, n, config_.max_nodes);
      ++r;
      continue;
    }

    // Peers start watching our heartbeat as soon as they return; beat now and while
    // waiting below, so a slow finish here never looks like a dead node.
    store_->add(rk(r, "hb", slot), 1);
    // Every participant stores its descriptor right after its ADD, so this is short.
    std::vector<std::string> keys = slot_keys(r, "node", n);
    bool have_all = false;
    // A joiner that died between its ADD and its descriptor gets a heartbeat threshold.
    auto desc_deadline = std::min(
        deadline, Clock::now() + config_.keep_alive_interval * config_.keep_alive_max_attempt);
    while (!have_all && Clock::now() < desc_deadline) {
      check_interrupted(r, slot);
      try {
        store_->wait(keys, config_.poll_slice);
        have_all = true;
      } catch (const store::StoreTimeoutError&) {
      }
    }
    if (!have_all) {
      spdlog::warn("{}: a node of round {} never described itself; starting round {}", where(), r,
                   r + 1);
      store_->set(rk(r, "hb", slot), "left");
      ++r;
      continue;
    }
    std::vector<NodeDesc> descs = read_descs(r, n);
    std::vector<int> ranks = assign_group_ranks(descs);  // may throw RendezvousStateError

    RendezvousInfo info;
    info.round = r;
    info.group_rank = ranks[static_cast<std::size_t>(slot)];
    info.group_world_size = n;
    std::vector<const NodeDesc*> by_rank(static_cast<std::size_t>(n));
    for (int s = 0; s < n; ++s) by_rank[static_cast<std::size_t>(ranks[s])] = &descs[s];
    for (int g = 0; g < n; ++g) {
      const NodeDesc& d = *by_rank[static_cast<std::size_t>(g)];
      if (g < info.group_rank) info.rank_base += d.nproc;
      info.world_size += d.nproc;
      info.node_names.push_back(d.addr + (d.host.empty() || d.host == d.addr ? "" : "/" + d.host));
    }
    info.world_size -= 1;  // RendezvousInfo's default of 1 was counted too
    info.use_agent_store = config_.agent_store;

    if (info.group_rank == 0 && !config_.agent_store) {
      // No agent store (USE_LIBUV=0): worker rank 0 hosts one on this port.
      const std::uint16_t port = config_.workers_port > 0
                                     ? static_cast<std::uint16_t>(config_.workers_port)
                                     : free_tcp_port(config_.bind_addr);
      nlohmann::json m{{"addr", config_.advertise_addr}, {"port", port}};
      store_->set(rk(r, "master"), m.dump());
      store_->set("round", std::to_string(r));
    } else if (info.group_rank == 0 && config_.shared_store_port > 0) {
      // The workers share the rendezvous store: never reset it (the rendezvous keys
      // live there). The round number in 1.13 workers' key prefix separates the
      // attempts; newer workers do not prefix, so earlier workers' keys are erased.
      if (clear_worker_keys_) clear_worker_keys_();
      nlohmann::json m{{"addr", config_.shared_store_addr}, {"port", config_.shared_store_port}};
      store_->set(rk(r, "master"), m.dump());
      store_->set("round", std::to_string(r));
    } else if (info.group_rank == 0) {
      // Empty the workers' store before anyone can learn its address for this round, so
      // no worker of this attempt sees a key of an earlier one.
      if (workers_server_) {
        workers_server_->reset();
      } else {
        store::ServerOptions options;
        options.host = config_.bind_addr;
        options.port = static_cast<std::uint16_t>(config_.workers_port);
        auto server = std::make_unique<store::TcpStoreServer>(options);
        try {
          server->start();
        } catch (const std::exception& e) {
          throw RendezvousError(
              where() + ": cannot host the workers' store on " +
              Endpoint{options.host.empty() ? "*" : options.host, options.port}.to_string() + ": " +
              e.what());
        }
        workers_server_ = std::move(server);
      }
      nlohmann::json m{{"addr", config_.advertise_addr}, {"port", workers_server_->port()}};
      store_->set(rk(r, "master"), m.dump());
      store_->set("round", std::to_string(r));
    } else if (workers_server_) {
      workers_server_->stop();  // another node hosts this round's workers' store
      workers_server_.reset();
    }

    bool have_master = false;
    auto master_deadline =
        Clock::now() + config_.keep_alive_interval * config_.keep_alive_max_attempt;
    while (Clock::now() < std::min(deadline, master_deadline)) {
      check_interrupted(r, slot);
      try {
        store_->wait({rk(r, "master")}, config_.poll_slice);
        have_master = true;
        break;
      } catch (const store::StoreTimeoutError&) {
        store_->add(rk(r, "hb", slot), 1);
      }
    }
    if (!have_master) {
      spdlog::warn(
          "{}: group rank 0 ({}) of round {} did not publish the workers' store; "
          "starting round {}",
          where(), by_rank[0]->label(), r, r + 1);
      store_->set(rk(r, "hb", slot), "left");
      ++r;
      continue;
    }
    auto m = nlohmann::json::parse(store_->get(rk(r, "master")), nullptr, false);
    if (m.is_discarded() || !m.contains("addr") || !m.contains("port")) {
      throw RendezvousStateError(where() + ": corrupt workers' store address for round " +
                                 std::to_string(r));
    }
    info.master_addr = m["addr"].get<std::string>();
    info.master_port = m["port"].get<std::uint16_t>();

    in_round_ = true;
    exited_ = false;
    announced_ = false;
    round_ = r;
    slot_ = slot;
    nodes_ = n;
    members_ = descs;
    spdlog::info(
        "{}: round {} complete: {} nodes, this node is group rank {} of {} (ranks "
        "{}..{} of {}); workers' store at {}",
        where(), r, n, info.group_rank, n, info.rank_base,
        info.rank_base + config_.local_world_size - 1, info.world_size,
        Endpoint{info.master_addr, info.master_port}.to_string());
    start_heartbeats();
    return info;
  }
}

int StoreRendezvous::wait_for_final(int r, int slot, Clock::time_point deadline) {
  const std::string final_key = rk(r, "final");
  std::optional<Clock::time_point> last_call_start;
  bool retired = r == 0;
  auto start = Clock::now();
  auto next_log = start + config_.progress_interval;
  std::int64_t count = slot + 1;
  for (;;) {
    if (count >= config_.min_nodes) {
      if (!retired) retired = round_retired(r - 1);
      if (retired) {
        if (!last_call_start) last_call_start = Clock::now();
        if (count >= config_.max_nodes ||
            Clock::now() - *last_call_start >= config_.last_call_timeout) {
          std::int64_t n = std::min<std::int64_t>(count, config_.max_nodes);
          store_->compare_set(final_key, "", std::to_string(n));
        }
      }
    }
    try {
      store_->wait({final_key}, config_.poll_slice);
      break;
    } catch (const store::StoreTimeoutError&) {
    }
    check_interrupted(r, slot);
    check_closed();
    auto now = Clock::now();
    if (now >= deadline) {
      count = store_->add(rk(r, "joined"), 0);
      // Our slot stays counted; the heartbeat key says we left, so no round waits for us.
      store_->set(rk(r, "hb", slot), "left");
      throw RendezvousTimeoutError(
          where() + ": timed out after join_timeout " +
          std::to_string(config_.join_timeout.count() / 1000) + " s in round " + std::to_string(r) +
          " with " + std::to_string(count) + " of min " + std::to_string(config_.min_nodes) +
          " / max " + std::to_string(config_.max_nodes) + " nodes" +
          (retired ? "" : " (the previous round's nodes never left it)"));
    }
    if (now >= next_log) {
      log_progress(r, deadline, retired);
      next_log = now + config_.progress_interval;
    }
    count = store_->add(rk(r, "joined"), 0);
  }
  return parse_count(store_->get(final_key), final_key);
}

bool StoreRendezvous::round_retired(int r) {
  if (r < 0) return true;
  if (!store_->check({rk(r, "final")})) return true;  // never formed: nobody runs in it
  int n = parse_count(store_->get(rk(r, "final")), "final");
  const auto asked = Clock::now();
  auto values = store_->multi_get(slot_keys(r, "hb", n));
  std::lock_guard lock(mu_);
  auto members = liveness_.observe(r, values, asked);
  return std::all_of(members.begin(), members.end(), [](Member m) { return m != Member::kAlive; });
}

std::vector<StoreRendezvous::NodeDesc> StoreRendezvous::read_descs(int r, int count) {
  auto values = store_->multi_get(slot_keys(r, "node", count));
  std::vector<NodeDesc> out;
  for (int s = 0; s < count; ++s) {
    auto j = nlohmann::json::parse(values[static_cast<std::size_t>(s)], nullptr, false);
    NodeDesc d;
    d.slot = s;
    if (j.is_discarded() || !j.is_object()) {
      throw RendezvousStateError(where() + ": corrupt node descriptor in round " +
                                 std::to_string(r) + " slot " + std::to_string(s) +
                                 " (is a non-ddprun agent using this run id?)");
    }
    d.addr = j.value("addr", "");
    d.host = j.value("host", "");
    d.pid = j.value("pid", 0L);
    d.node_rank = j.value("node_rank", -1);
    d.node_rank_defaulted = j.value("node_rank_defaulted", false);
    d.nproc = j.value("nproc", 1);
    if (config_.job_check && j.contains("job") && j["job"] != nlohmann::json(config_.job_command)) {
      // check_same_job() keeps other jobs out; this is what a merge would have been.
      throw RendezvousStateError(where() + ": node " + d.label() + " of round " +
                                 std::to_string(r) + " runs another job (" + j["job"].dump() +
                                 "), this node `" + command_line(config_.job_command) + "`");
    }
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<int> StoreRendezvous::assign_group_ranks(const std::vector<NodeDesc>& descs) {
  const int n = static_cast<int>(descs.size());
  const int limit = config_.static_ranks ? n : config_.max_nodes;
  const auto note = [](const NodeDesc& x) {
    return x.label() + (x.node_rank_defaulted ? " (no --node-rank given: 0 assumed)" : "");
  };
  // The automatic order, (address, host, pid): the fallback, and the order in which the
  // node ranks are checked, so that every agent reports the same conflicts.
  std::vector<int> automatic(static_cast<std::size_t>(n));
  std::iota(automatic.begin(), automatic.end(), 0);
  std::sort(automatic.begin(), automatic.end(), [&](int a, int b) {
    const NodeDesc& x = descs[a];
    const NodeDesc& y = descs[b];
    return std::tie(x.addr, x.host, x.pid, x.slot) < std::tie(y.addr, y.host, y.pid, y.slot);
  });
  std::map<int, const NodeDesc*> by_node_rank;
  int given = 0;
  std::string conflict;  // c10d: every reason the given node ranks cannot be honoured
  for (int i : automatic) {
    const NodeDesc& d = descs[static_cast<std::size_t>(i)];
    if (d.node_rank < 0) continue;
    ++given;
    if (d.node_rank >= limit) {
      std::string why = "node " + d.label() + " has --node-rank " + std::to_string(d.node_rank) +
                        ", outside [0, " + std::to_string(limit) + ")";
      if (config_.static_ranks) throw RendezvousStateError(where() + ": " + why);
      conflict += (conflict.empty() ? "" : "; ") + why;
      continue;
    }
    auto [it, inserted] = by_node_rank.emplace(d.node_rank, &d);
    if (!inserted) {
      std::string why = "node rank " + std::to_string(d.node_rank) + " is claimed by both " +
                        note(*it->second) + " and " + note(d);
      if (config_.static_ranks) {
        throw RendezvousStateError(where() + ": " + why +
                                   "; give every node a distinct --node-rank in [0, " +
                                   std::to_string(limit) + ")");
      }
      conflict += (conflict.empty() ? "" : "; ") + why;
    }
  }
  std::vector<int> order = automatic;
  if (given == n && conflict.empty()) {
    // Every node gave a distinct --node-rank: honour it (in an elastic round with fewer
    // than max nodes the ranks are compacted, keeping their order).
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return descs[a].node_rank < descs[b].node_rank; });
  } else {
    // c10d, as torchrun (which ignores --node-rank there): a launch never fails over
    // node ranks. Scripts copied from one node often keep --node_rank=0 everywhere.
    if (given > 0 && !node_rank_warned_) {
      node_rank_warned_ = true;
      spdlog::warn(
          "{}: --node-rank ignored: {}; group ranks follow (address, host, pid) "
          "order instead",
          where(),
          conflict.empty()
              ? "only " + std::to_string(given) + " of " + std::to_string(n) + " nodes gave one"
              : conflict);
    }
  }
  std::vector<int> ranks(static_cast<std::size_t>(n));
  for (int g = 0; g < n; ++g) ranks[static_cast<std::size_t>(order[g])] = g;
  return ranks;
}

void StoreRendezvous::log_progress(int r, Clock::time_point deadline, bool retired) {
  std::int64_t count = store_->add(rk(r, "joined"), 0);
  std::vector<std::string> present;
  for (int s = 0; s < count; ++s) {
    if (store_->check({rk(r, "node", s)})) present.push_back(rk(r, "node", s));
    if (present.size() >= 64) break;  // enough for a log line
  }
  std::string joined;
  std::set<int> ranks;
  bool all_ranked = static_cast<std::int64_t>(present.size()) == count;
  std::vector<NodeDesc> descs;
  auto values = store_->multi_get(present);
  for (const auto& v : values) {
    auto j = nlohmann::json::parse(v, nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    NodeDesc d;
    d.addr = j.value("addr", "");
    d.host = j.value("host", "");
    d.pid = j.value("pid", 0L);
    d.node_rank = j.value("node_rank", -1);
    d.node_rank_defaulted = j.value("node_rank_defaulted", false);
    joined += (joined.empty() ? "" : ", ") + d.label();
    if (d.node_rank < 0) all_ranked = false;
    if (d.node_rank >= 0 && !ranks.insert(d.node_rank).second && config_.static_ranks) {
      throw RendezvousStateError(where() + ": node rank " + std::to_string(d.node_rank) +
                                 " is claimed twice (again by " + d.label() +
                                 (d.node_rank_defaulted ? ", which gave no --node-rank" : "") +
                                 "); give every node a distinct --node-rank in [0, " +
                                 std::to_string(config_.max_nodes) + ")");
    }
    descs.push_back(std::move(d));
  }
  std::string missing;
  if (config_.static_ranks) {
    for (int k = 0; k < config_.max_nodes; ++k) {
      if (!ranks.count(k)) missing += (missing.empty() ? "" : ", ") + std::to_string(k);
    }
    missing = missing.empty() ? "" : "; missing node ranks: " + missing;
  } else if (count < config_.min_nodes) {
    missing = "; waiting for " + std::to_string(config_.min_nodes - count) + " more";
    if (all_ranked && count > 0) {  // every node so far gave --node-rank: name the others
      std::string absent;
      for (int k = 0; k < config_.max_nodes; ++k) {
        if (!ranks.count(k)) absent += (absent.empty() ? "" : ", ") + std::to_string(k);
      }
      missing += " (node ranks not seen yet: " + absent + ")";
    }
  } else if (!retired) {
    missing = "; round " + std::to_string(r - 1) +
              " is still running (full, or its nodes have not left it yet)";
  } else {
    missing = "; in last call for up to " + std::to_string(config_.max_nodes - count) + " more";
  }
  // WARNING level on purpose: the agent's default level; a silent wait is what users
  // complain about most.
  spdlog::warn("{}: round {}: {} joined (min {}, max {}): [{}]{}; {} s left", where(), r, count,
               config_.min_nodes, config_.max_nodes, joined, missing, secs_left(deadline));
}

void StoreRendezvous::start_heartbeats() {
  {
    std::lock_guard lock(mu_);
    hb_stop_ = false;
  }
  hb_thread_ =
      std::thread([this, r = round_, slot = slot_, n = nodes_] { heartbeat_loop(r, slot, n); });
}

void StoreRendezvous::stop_heartbeats() {
  {
    std::lock_guard lock(mu_);
    hb_stop_ = true;
    cv_.notify_all();
  }
  if (hb_thread_.joinable()) hb_thread_.join();
}

std::string StoreRendezvous::watch_round(store::Store& s, int r, int n) {
  const auto asked = Clock::now();
  auto values = s.multi_get(slot_keys(r, "hb", n));
  int waiting = static_cast<int>(s.add(rk(r + 1, "joined"), 0));
  std::string reason;
  std::lock_guard lock(mu_);
  auto members = liveness_.observe(r, values, asked);
  const Ms threshold = liveness_.threshold;
  for (int i = 0; i < n && reason.empty(); ++i) {
    if (i == slot_) continue;
    const auto& d = members_[static_cast<std::size_t>(i)];
    if (members[i] == Member::kLeft) {
      reason = "node " + d.label() + " left round " + std::to_string(r);
    } else if (members[i] == Member::kDead) {
      reason = "node " + d.label() + " missed its heartbeats for " +
               std::to_string(threshold.count() / 1000.0).substr(0, 5) + " s";
    }
  }
  // A waiting node only forces a new round when the round has room for it.
  int admissible = (n < config_.max_nodes || !reason.empty()) ? waiting : 0;
  waiting_.store(admissible);
  if (reason.empty() && admissible > 0) {
    reason = std::to_string(waiting) + " node(s) waiting to join";
  }
  if (!reason.empty()) {
    if (reason_.empty()) reason_ = reason;
    needs_new_round_.store(true);
  }
  return reason;
}

void StoreRendezvous::heartbeat_loop(int r, int slot, int n) {
  const Ms tick = heartbeat_tick(config_.keep_alive_interval);
  auto next_beat = Clock::now();
  bool reported = false;
  for (;;) {
    try {
      auto now = Clock::now();
      if (now >= next_beat) {
        hb_store_->add(rk(r, "hb", slot), 1);
        next_beat = now + config_.keep_alive_interval;
      }
      std::string reason = watch_round(*hb_store_, r, n);
      if (!reason.empty() && !reported) {
        reported = true;
        spdlog::warn("{}: round {}: {}; a new round is needed", where(), r, reason);
      }
    } catch (const std::exception& e) {
      std::lock_guard lock(mu_);
      reason_ = std::string("lost the rendezvous store: ") + e.what();
      needs_new_round_.store(true);
      spdlog::error("{}: {}", where(), reason_);
      return;
    }
    std::unique_lock lock(mu_);
    if (cv_.wait_for(lock, tick, [&] { return hb_stop_; })) return;
  }
}

int StoreRendezvous::num_nodes_waiting() { return waiting_.load(); }

bool StoreRendezvous::needs_new_round() {
  if (!needs_new_round_.load()) return false;
  if (in_round_ && !exited_ && !announced_) {
    announced_ = true;
    // The heartbeat thread ADDs to our key; stop it before the key stops being a number.
    stop_heartbeats();
    try {
      store_->set(rk(round_, "hb", slot_), "left");
    } catch (const std::exception& e) {
      spdlog::debug("{}: could not announce leaving round {}: {}", where(), round_, e.what());
    }
  }
  return true;
}

bool StoreRendezvous::needs_new_round_now() {
  if (needs_new_round_.load()) return needs_new_round();
  if (!in_round_ || exited_) return false;
  try {
    watch_round(*store_, round_, nodes_);
  } catch (const std::exception& e) {
    std::lock_guard lock(mu_);
    reason_ = std::string("lost the rendezvous store: ") + e.what();
    needs_new_round_.store(true);
  }
  return needs_new_round();
}

std::string StoreRendezvous::new_round_reason() {
  std::lock_guard lock(mu_);
  return reason_;
}

bool StoreRendezvous::is_closed() {
  if (closed_.load()) return true;
  try {
    if (store_ && store_->check({"closed"})) closed_.store(true);
  } catch (const std::exception&) {
  }
  return closed_.load();
}

void StoreRendezvous::set_closed() {
  closed_.store(true);
  try {
    if (store_) store_->set("closed", "1");
  } catch (const std::exception& e) {
    spdlog::debug("{}: could not mark the rendezvous closed: {}", where(), e.what());
  }
}

bool StoreRendezvous::exit_barrier(std::chrono::milliseconds timeout) {
  if (!in_round_ || exited_) return true;
  stop_heartbeats();
  exited_ = true;
  const auto deadline = Clock::now() + timeout;
  try {
    store_->set(rk(round_, "hb", slot_), "done");
    const auto keys = slot_keys(round_, "hb", nodes_);
    auto next_log = Clock::now() + config_.progress_interval;
    for (;;) {
      const auto asked = Clock::now();
      auto values = store_->multi_get(keys);
      std::vector<Member> members;
      {
        std::lock_guard lock(mu_);
        members = liveness_.observe(round_, values, asked);
      }
      std::string pending;
      bool any_alive = false;
      bool all_done = true;
      for (int s = 0; s < nodes_; ++s) {
        if (members[s] != Member::kDone) all_done = false;
        if (members[s] == Member::kAlive) {
          any_alive = true;
          pending += (pending.empty() ? "" : ", ") + members_[static_cast<std::size_t>(s)].label();
        }
      }
      if (all_done) {
        // Everyone is done. Non-hosts acknowledge; the host waits (briefly) for the acks,
        // so it does not close the store under a peer that has not seen this yet.
        try {
          std::int64_t seen = store_->add(rk(round_, "exit_seen"), 1);
          if (hosts_store_ && hosts_store_()) {
            auto ack_deadline = Clock::now() + std::max<Ms>(config_.keep_alive_interval, Ms(5000));
            while (seen < nodes_ && Clock::now() < ack_deadline && sleep_slice(Ms(20))) {
              seen = store_->add(rk(round_, "exit_seen"), 0);
            }
          }
        } catch (const store::StoreError& e) {
          spdlog::debug("{}: exit barrier acknowledgement: {}", where(), e.what());
        }
        return true;
      }
      if (!any_alive) return false;  // the rest left or died: nobody else will come
      if (Clock::now() >= deadline) {
        if (!(hosts_store_ && hosts_store_())) {
          spdlog::warn("{}: exit barrier timed out waiting for [{}]", where(), pending);
          return false;
        }
        // The rendezvous store lives in this process: leaving now would fail the nodes
        // that are still running (their heartbeats would lose the store).
        if (Clock::now() >= next_log) {
          spdlog::warn("{}: keeping the rendezvous store up for the nodes still running: [{}]",
                       where(), pending);
          next_log = Clock::now() + std::max<Ms>(config_.progress_interval, Ms(30'000));
        }
      }
      if (Clock::now() >= next_log) {
        spdlog::warn("{}: waiting at the exit barrier for [{}]; {} s left", where(), pending,
                     secs_left(deadline));
        next_log = Clock::now() + config_.progress_interval;
      }
      if (!sleep_slice(std::min<Ms>(config_.poll_slice, Ms(100)))) return false;
    }
  } catch (const store::StoreConnectionError& e) {
    // The store host left: it leaves only once no peer is running (or it died, and
    // then nobody is left to wait for either).
    spdlog::debug("{}: exit barrier: the rendezvous store went away: {}", where(), e.what());
    return true;
  } catch (const std::exception& e) {
    spdlog::warn("{}: exit barrier: {}", where(), e.what());
    return false;
  }
}

void StoreRendezvous::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  stop_heartbeats();
  if (in_round_ && !exited_ && store_) {
    try {
      store_->set(rk(round_, "hb", slot_), "left");  // peers notice at once, not in 15 s
    } catch (const std::exception&) {
    }
  }
  if (workers_server_) workers_server_->stop();
  hb_store_.reset();
  store_.reset();
  if (on_shutdown_) on_shutdown_();
}

}  // namespace ddprun::rdzv
