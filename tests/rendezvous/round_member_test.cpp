// Table tests of round_member.h: the member-side steps StoreRendezvous (c10d, static) and
// EtcdRendezvous (etcd-v3) share: descriptor, job checks and their one message, the
// workers' store port choice (on a real loopback WorkersStore) and the progress input.
#include "rendezvous/round_member.h"

#include <catch2/catch.hpp>

#include "rendezvous/rendezvous.h"
#include "rendezvous/workers_store.h"

using namespace ddprun::rdzv;
using namespace std::chrono_literals;

namespace {

RoundConfig config() {
  RoundConfig c;
  c.run_id = "job1";
  c.min_nodes = 2;
  c.max_nodes = 4;
  c.node_rank = 3;
  c.local_world_size = 8;
  c.job_command = {"train.py", "--lr", "0.1"};
  c.advertise_addr = "10.0.0.2";
  c.bind_addr = "127.0.0.1";
  c.hostname = "n2";
  return c;
}

}  // namespace

TEST_CASE("round_member: this node's descriptor", "[round_member]") {
  struct Row {
    bool job_check, rdzv_host, defaulted;
  };
  for (const Row row : {Row{true, false, false}, Row{false, true, false}, Row{true, true, true}}) {
    RoundConfig c = config();
    c.job_check = row.job_check;
    const NodeDesc d = this_node_desc(c, row.rdzv_host, row.defaulted);
    CHECK(d.addr == "10.0.0.2");
    CHECK(d.host == "n2");
    CHECK(d.node_rank == 3);
    CHECK(d.nproc == 8);
    CHECK(d.pid > 0);
    CHECK(d.rdzv_host == row.rdzv_host);
    CHECK(d.node_rank_defaulted == row.defaulted);
    CHECK(d.job.has_value() == row.job_check);
    if (d.job) CHECK(*d.job == job_fingerprint(c.job_command));
    // What is published decodes to the same descriptor.
    auto back = decode_node_desc(encode_node_desc(d), 0);
    REQUIRE(back);
    CHECK(back->job == d.job);
    CHECK(back->rdzv_host == d.rdzv_host);
  }
}

TEST_CASE("round_member: one message for a run id of another job", "[round_member]") {
  const RoundConfig c = config();
  struct Row {
    std::string published;
    std::vector<std::string> want;
  };
  for (const Row& row : std::vector<Row>{
           {job_fingerprint({"eval.py", "--ckpt", "last"}),
            {"rendezvous 'job1' (c10d at h:1) belongs to another job: its nodes run `eval.py "
             "--ckpt last`, this node would run `train.py --lr 0.1`; give each job its own "
             "--rdzv-id"}},
           {"not json", {"corrupt job fingerprint 'not json'", "non-ddprun agent"}},
       }) {
    const std::string what =
        another_job_error(rendezvous_where("job1", "c10d at h:1"), c, row.published);
    for (const auto& w : row.want) CHECK_THAT(what, Catch::Contains(w));
    CHECK(what.find('\n') == std::string::npos);
  }
}

TEST_CASE("round_member: the descriptors' job check", "[round_member]") {
  RoundConfig c = config();
  NodeDesc same = this_node_desc(c, false);
  NodeDesc other = same;
  other.addr = "10.0.0.9";
  other.job = job_fingerprint({"other.py"});
  NodeDesc unchecked = same;  // job_check=0 on that node: no fingerprint
  unchecked.job.reset();
  struct Row {
    bool job_check;
    std::vector<NodeDesc> descs;
    bool throws;
  };
  for (const Row& row : std::vector<Row>{{true, {same, unchecked}, false},
                                         {true, {same, other}, true},
                                         {false, {same, other}, false}}) {
    c.job_check = row.job_check;
    if (row.throws) {
      CHECK(member_jobs_error(row.descs, 5, c) ==
            "node 10.0.0.9 (n2) pid " + std::to_string(same.pid) +
                " of round 5 runs another job ([\"other.py\"]), this node `train.py --lr 0.1`");
    } else {
      CHECK(member_jobs_error(row.descs, 5, c).empty());
    }
  }
}

TEST_CASE("round_member: the workers' store port", "[round_member]") {
  RoundConfig c = config();
  WorkersStore ws;
  int cleared = 0;
  const auto clear = [&] { ++cleared; };

  SECTION("no agent store: a port for worker rank 0, nothing hosted") {
    c.agent_store = false;
    c.workers_port = 4321;
    CHECK(workers_store_port(c, ws, 29500, clear, "w") == 4321);
    c.workers_port = 0;
    CHECK(workers_store_port(c, ws, 0, clear, "w") > 0);
    CHECK_FALSE(ws.running());
    CHECK(cleared == 0);
  }
  SECTION("shared rendezvous store: its port, earlier workers' keys erased") {
    CHECK(workers_store_port(c, ws, 29500, clear, "w") == 29500);
    CHECK_FALSE(ws.running());
    CHECK(cleared == 1);
  }
  SECTION("an agent store of its own: opened, the same port the next attempt") {
    const std::uint16_t port = workers_store_port(c, ws, 0, clear, "w");
    CHECK(ws.running());
    CHECK(port == ws.port());
    CHECK(workers_store_port(c, ws, 0, {}, "w") == port);
    CHECK(cleared == 0);
  }
  SECTION("a bind failure names the rendezvous") {
    WorkersStore holder;
    const std::uint16_t taken = holder.open_attempt("127.0.0.1", 0);
    c.workers_port = taken;
    CHECK_THROWS_MATCHES(workers_store_port(c, ws, 0, clear, "rendezvous 'job1' (x)"),
                         RendezvousError,
                         Catch::Matchers::Predicate<RendezvousError>([](const auto& e) {
                           return std::string(e.what()).rfind("rendezvous 'job1' (x): ", 0) == 0;
                         }));
  }
}

TEST_CASE("round_member: the progress input", "[round_member]") {
  RoundConfig c = config();
  const auto t0 = RoundConfig::Clock::now();
  c.now = [t0] { return t0; };
  struct Row {
    RoundConfig::Clock::time_point deadline;
    long long secs_left;
  };
  for (const Row& row : {Row{t0 + 90500ms, 90}, Row{t0 - 5s, 0}}) {
    const ProgressInput in = progress_input(c, 7, 3, 2, {this_node_desc(c, false)},
                                            /*retired=*/false, /*static_ranks=*/true, row.deadline);
    CHECK(in.round == 7);
    CHECK(in.joined == 3);
    CHECK(in.described == 2);
    CHECK(in.descs.size() == 1);
    CHECK_FALSE(in.retired);
    CHECK(in.min_nodes == 2);
    CHECK(in.max_nodes == 4);
    CHECK(in.static_ranks);
    CHECK(in.secs_left == row.secs_left);
  }
}
