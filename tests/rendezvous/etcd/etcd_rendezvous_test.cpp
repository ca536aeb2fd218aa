// EtcdRendezvous's etcd-specific story against one real etcd member (etcd_cluster.h):
// the new-round reasons, a round of many nodes, more joiners than MAX, a joiner leaving
// before its round closes, interrupt(). One case on one etcd on purpose: ctest runs each
// case in its own process, and each would start an etcd. The contract shared with c10d is
// handler_contract_test.cpp's; multi-member clusters and real workers are
// tests/multinode/etcd_test.py's.
#include "rendezvous/etcd/etcd_rendezvous.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <set>

#include "tests/rendezvous/etcd/etcd_cluster.h"
#include "tests/rendezvous/rdzv_test_util.h"
#include "tests/support/eventually.h"

using namespace ddprun::rdzv;
using ddprun::test::EtcdCluster;
using ddprun::test::eventually;
using namespace std::chrono_literals;

namespace {

EtcdRendezvous::Config config(const EtcdCluster& cluster, int i) {
  EtcdRendezvous::Config c;
  c.etcd.endpoints = cluster.urls();
  c.round = ddprun::test::loopback_round("threads", i, 2, 3);
  c.round.job_command = {"train.py"};
  c.round.join_timeout = 60s;
  c.round.last_call_timeout = 1s;
  c.round.keep_alive_interval = 1s;
  // A 6 s lease: nothing here waits for one to expire (a node leaves by shutdown(), or
  // the test revokes its lease), and a 3 s one expired under TSan beside ctest.
  c.round.keep_alive_max_attempt = 6;
  // Longer than any wait here: only the watches can wake the waits in time.
  c.recheck_interval = 120s;
  c.round.progress_interval = 120s;
  return c;
}

std::set<int> group_ranks(const std::vector<RendezvousInfo>& infos) {
  std::set<int> out;
  for (const auto& i : infos) out.insert(i.group_rank);
  return out;
}

}  // namespace

TEST_CASE("etcd-v3 rendezvous: last call, a late joiner, a node leaving, closing", "[etcd]") {
  EtcdCluster cluster(1);
  EtcdRendezvous a(config(cluster, 0)), b(config(cluster, 1)), c(config(cluster, 2));

  auto fa = std::async(std::launch::async, [&] { return a.next_rendezvous(); });
  auto fb = std::async(std::launch::async, [&] { return b.next_rendezvous(); });
  std::vector<RendezvousInfo> round0 = {fa.get(), fb.get()};
  CHECK(group_ranks(round0) == std::set<int>{0, 1});
  for (const auto& info : round0) {
    CHECK(info.round == round0[0].round);
    CHECK(info.group_world_size == 2);
    CHECK(info.world_size == 2);
    CHECK(info.master_port == round0[0].master_port);
    CHECK(info.master_port != 0);
  }
  CHECK_FALSE(a.needs_new_round());

  // A late joiner waits under the running round; its members see it and start the next.
  auto fc = std::async(std::launch::async, [&] { return c.next_rendezvous(); });
  CHECK(eventually([&] { return a.num_nodes_waiting() == 1 && b.needs_new_round(); }));
  CHECK(a.new_round_reason().find("waiting to join") != std::string::npos);
  fa = std::async(std::launch::async, [&] { return a.next_rendezvous(); });
  fb = std::async(std::launch::async, [&] { return b.next_rendezvous(); });
  std::vector<RendezvousInfo> round1 = {fa.get(), fb.get(), fc.get()};
  CHECK(group_ranks(round1) == std::set<int>{0, 1, 2});
  for (const auto& info : round1) {
    CHECK(info.round > round0[0].round);
    CHECK(info.round == round1[0].round);
    CHECK(info.group_world_size == 3);
  }

  // A node that goes away (its lease revoked) makes the others start a new round.
  c.shutdown();
  CHECK(eventually([&] { return a.needs_new_round() && b.needs_new_round_now(); }));
  CHECK(a.new_round_reason().find("left or its lease expired") != std::string::npos);

  // The job ends: a late agent is refused.
  a.set_closed();
  EtcdRendezvous d(config(cluster, 3));
  CHECK_THROWS_AS(d.next_rendezvous(), RendezvousClosedError);

  // Many nodes at once (another run id): one round with every node in it.
  constexpr int kMany = 8;
  std::vector<std::unique_ptr<EtcdRendezvous>> many;
  for (int i = 0; i < kMany; ++i) {
    auto conf = config(cluster, 10 + i);
    conf.round.run_id = "many";
    conf.round.min_nodes = conf.round.max_nodes = kMany;
    many.push_back(std::make_unique<EtcdRendezvous>(conf));
  }
  std::vector<std::future<RendezvousInfo>> joins;
  for (auto& r : many) {
    joins.push_back(std::async(std::launch::async, [&r] { return r->next_rendezvous(); }));
  }
  std::vector<RendezvousInfo> infos;
  for (auto& f : joins) infos.push_back(f.get());
  std::set<int> expected;
  for (int i = 0; i < kMany; ++i) expected.insert(i);
  CHECK(group_ranks(infos) == expected);
  for (const auto& info : infos) CHECK(info.group_world_size == kMany);

  // More joiners than MAX (another run id): the first MAX to join are the round, the
  // other one waits under it as a late joiner.
  std::vector<std::unique_ptr<EtcdRendezvous>> crowd;
  for (int i = 0; i < 4; ++i) {
    auto conf = config(cluster, 20 + i);
    conf.round.run_id = "crowd";
    conf.round.min_nodes = conf.round.max_nodes = 3;
    crowd.push_back(std::make_unique<EtcdRendezvous>(conf));
  }
  std::vector<std::future<RendezvousInfo>> crowd_joins;
  for (auto& r : crowd) {
    crowd_joins.push_back(std::async(std::launch::async, [&r] { return r->next_rendezvous(); }));
  }
  std::vector<RendezvousInfo> formed;
  std::size_t left_out = 0;
  CHECK(eventually([&] {
    for (std::size_t i = 0; i < crowd_joins.size(); ++i) {
      if (crowd_joins[i].valid() && crowd_joins[i].wait_for(0s) == std::future_status::ready) {
        formed.push_back(crowd_joins[i].get());
      }
    }
    return formed.size() == 3;
  }));
  for (std::size_t i = 0; i < crowd_joins.size(); ++i) {
    if (crowd_joins[i].valid()) left_out = i;
  }
  for (const auto& info : formed) CHECK(info.group_world_size == 3);
  CHECK(eventually([&] { return crowd[(left_out + 1) % 4]->num_nodes_waiting() == 1; }));
  crowd[left_out]->interrupt();
  CHECK_THROWS_AS(crowd_joins[left_out].get(), RendezvousInterruptedError);

  // A node waiting alone for a second one: interrupt() from another thread wakes it.
  auto conf = config(cluster, 30);
  conf.round.run_id = "alone";
  EtcdRendezvous alone(conf);
  auto blocked = std::async(std::launch::async, [&] { return alone.next_rendezvous(); });
  CHECK(blocked.wait_for(500ms) == std::future_status::timeout);
  alone.interrupt();
  REQUIRE(blocked.wait_for(10s) == std::future_status::ready);
  CHECK_THROWS_AS(blocked.get(), RendezvousInterruptedError);

  // It leaves before its round closes (its lease revoked, its join key with it): the
  // round the next two form is round 0, without it.
  alone.shutdown();
  auto joiner = [&](int i) {
    auto joiner_config = config(cluster, i);
    joiner_config.round.run_id = "alone";
    return joiner_config;
  };
  EtcdRendezvous e(joiner(31)), f(joiner(32));
  auto fe = std::async(std::launch::async, [&] { return e.next_rendezvous(); });
  auto ff = std::async(std::launch::async, [&] { return f.next_rendezvous(); });
  for (const auto& info : {fe.get(), ff.get()}) {
    CHECK(info.round == 0);
    CHECK(info.group_world_size == 2);
  }

  // A joiner's lease expires while it joins (its agent starved of CPU past the TTL; here
  // the test revokes it): etcd deletes its keys, and it joins again under a new lease.
  ddprun::rdzv::EtcdOptions raw_options;
  raw_options.endpoints = cluster.urls();
  EtcdClient raw(raw_options);
  auto only_leaf = [&](const std::string& prefix) {
    const std::vector<EtcdKv> kvs = raw.get_prefix(prefix, /*keys_only=*/true);
    return kvs.size() == 1 ? key_leaf(kvs[0].key) : std::string();
  };
  // A node of MAX 1 of run `run_id`.
  auto lapse = [&](const std::string& run_id, int i, std::chrono::milliseconds recheck,
                   std::chrono::milliseconds keep_alive = 1s) {
    auto lapse_config = config(cluster, i);
    lapse_config.round.keep_alive_interval = keep_alive;
    lapse_config.round.run_id = run_id;
    lapse_config.round.min_nodes = lapse_config.round.max_nodes = 1;
    lapse_config.recheck_interval = recheck;
    return std::make_unique<EtcdRendezvous>(lapse_config);
  };
  // A write finds the lease gone before the keepalive does (a keepalive every 30 s): a
  // late joiner waiting under round 0 loses its lease, then round 0's member leaves and
  // opens round 1, and the joiner's next write (its join or waiting key of round 1) gets
  // etcd's NOT_FOUND. It joins again: it forms round 1, or waits under it, as a new node.
  std::string old_lease;
  auto member = lapse("lapse", 45, 120s), slow = lapse("lapse", 47, 120s, 30s);
  CHECK(member->next_rendezvous().round == 0);
  auto fslow = std::async(std::launch::async, [&] { return slow->next_rendezvous(); });
  REQUIRE(eventually(
      [&] { return !(old_lease = only_leaf("/ddprun/rdzv/lapse/r0/waiting/")).empty(); }));
  raw.lease_revoke(std::stoll(old_lease, nullptr, 16));
  auto fmember = std::async(std::launch::async, [&] { return member->next_rendezvous(); });
  bool slow_formed = false;
  CHECK(eventually([&] {
    if (fslow.wait_for(0s) == std::future_status::ready) return slow_formed = true;
    const std::string now_waiting = only_leaf("/ddprun/rdzv/lapse/r1/waiting/");
    return !now_waiting.empty() && now_waiting != old_lease;
  }));
  if (slow_formed) {
    CHECK(fslow.get().round == 1);
    member->interrupt();
    CHECK_THROWS_AS(fmember.get(), RendezvousInterruptedError);
  } else {
    CHECK(fmember.get().round == 1);
    slow->interrupt();
    CHECK_THROWS_AS(fslow.get(), RendezvousInterruptedError);
  }
  // Waiting under a running round (nothing to write until it ends): the keepalive finds
  // the lease gone, and the next look, within recheck_interval, registers it again.
  auto p = lapse("lapse2", 41, 120s), q = lapse("lapse2", 43, 1s);
  CHECK(p->next_rendezvous().group_world_size == 1);
  auto fq = std::async(std::launch::async, [&] { return q->next_rendezvous(); });
  const std::string waiting = "/ddprun/rdzv/lapse2/r0/waiting/";
  REQUIRE(eventually([&] { return !(old_lease = only_leaf(waiting)).empty(); }));
  raw.lease_revoke(std::stoll(old_lease, nullptr, 16));
  CHECK(eventually([&] {
    const std::string now_waiting = only_leaf(waiting);
    return !now_waiting.empty() && now_waiting != old_lease;
  }));
  q->interrupt();
  CHECK_THROWS_AS(fq.get(), RendezvousInterruptedError);
}
