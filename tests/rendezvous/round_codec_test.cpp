// Table tests of the rendezvous' pure parts that read and write the store's values: the
// key layout (c10d/keys.h) and the JSON codecs (round_codec.h).
#include "rendezvous/round_codec.h"

#include <catch2/catch.hpp>

#include "rendezvous/c10d/keys.h"
#include "rendezvous/rendezvous.h"

using namespace ddprun::rdzv;

TEST_CASE("rdzv keys: the layout of docs/multinode.md", "[keys]") {
  struct Row {
    std::string got, want;
  };
  const std::vector<Row> rows{
      {keys::joined(0), "r0/joined"},         {keys::node(3, 12), "r3/node/12"},
      {keys::heartbeat(7, 0), "r7/hb/0"},     {keys::final_size(41), "r41/final"},
      {keys::master(2), "r2/master"},         {keys::exit_seen(5), "r5/exit_seen"},
      {std::string(keys::kClosed), "closed"}, {std::string(keys::kJob), "job"},
      {std::string(keys::kRound), "round"},
  };
  for (const auto& row : rows) CHECK(row.got == row.want);
  CHECK(keys::heartbeats(1, 3) == std::vector<std::string>{"r1/hb/0", "r1/hb/1", "r1/hb/2"});
  CHECK(keys::nodes(9, 2) == std::vector<std::string>{"r9/node/0", "r9/node/1"});
  CHECK(keys::nodes(0, 0).empty());
}

TEST_CASE("rdzv keys: counts read back are decimal and >= 0, else a clear error", "[keys]") {
  CHECK(keys::parse_count("0", "r1/final") == 0);
  CHECK(keys::parse_count("17", "round") == 17);
  for (const std::string bad : {"", "-1", "1x", "x", "99999999999", "2.5"}) {
    INFO("value '" << bad << "'");
    CHECK_THROWS_WITH(keys::parse_count(bad, "r1/final"),
                      "corrupt rendezvous key r1/final = '" + bad + "'");
  }
}

TEST_CASE("node descriptor: what is encoded decodes the same", "[codec]") {
  // Initialised, not assigned field by field: GCC 12 at -O3 warns (falsely) that a
  // short string assigned to a fresh member "may be used uninitialized".
  NodeDesc d{.slot = 0,
             .addr = "10.0.0.2",
             .host = "n2",
             .pid = 4242,
             .node_rank = 1,
             .node_rank_defaulted = true,
             .nproc = 8,
             .restarts = 2,
             .job = job_fingerprint({"train.py", "--lr", "0.1"}),
             .rdzv_host = true};
  auto back = decode_node_desc(encode_node_desc(d), 5);
  REQUIRE(back);
  CHECK(back->slot == 5);
  CHECK(back->addr == d.addr);
  CHECK(back->host == d.host);
  CHECK(back->pid == d.pid);
  CHECK(back->node_rank == d.node_rank);
  CHECK(back->node_rank_defaulted);
  CHECK(back->nproc == 8);
  CHECK(back->restarts == 2);
  CHECK(back->job == d.job);
  CHECK(back->rdzv_host);
  d.job.reset();  // job_check=0: no "job" field at all
  CHECK(encode_node_desc(d).find("job") == std::string::npos);
  CHECK_FALSE(decode_node_desc(encode_node_desc(d), 0)->job);
}

TEST_CASE("node descriptor: decoding what another writer may have left", "[codec]") {
  struct Row {
    std::string json;
    bool ok;
    std::string label;  // when ok
    int node_rank;
    int nproc;
  };
  const std::vector<Row> rows{
      // A hand-made ghost (the heartbeat test writes one): missing fields get defaults.
      {R"({"addr":"127.0.0.9","host":"ghost","pid":1})", true, "127.0.0.9 (ghost) pid 1", -1, 1},
      {R"({"addr":"a","host":"a","pid":7,"node_rank":2,"nproc":4})", true, "a pid 7", 2, 4},
      {R"({})", true, " pid 0", -1, 1},
      {R"({"addr":"a","unknown":[1,2]})", true, "a pid 0", -1, 1},
      {"not json", false, "", 0, 0},
      {"[1, 2]", false, "", 0, 0},
      {"\"a string\"", false, "", 0, 0},
      {"", false, "", 0, 0},
      {R"({"addr":"a","pid":"seven"})", false, "", 0, 0},  // wrong type: corrupt too
      {R"({"addr":"a","nproc":null})", false, "", 0, 0},
  };
  for (const auto& row : rows) {
    INFO(row.json);
    auto d = decode_node_desc(row.json, 0);
    REQUIRE(d.has_value() == row.ok);
    if (!row.ok) continue;
    CHECK(d->label() == row.label);
    CHECK(d->node_rank == row.node_rank);
    CHECK(d->nproc == row.nproc);
    // Written before the field existed (or by a node that does not host): not the host.
    CHECK_FALSE(d->rdzv_host);
  }
  CHECK(decode_node_desc(R"({"addr":"a","rdzv_host":true})", 0)->rdzv_host);
  CHECK_FALSE(decode_node_desc(R"({"addr":"a","rdzv_host":"yes"})", 0));
}

TEST_CASE("node descriptor: label", "[codec]") {
  struct Row {
    std::string addr, host;
    long pid;
    std::string label;
  };
  const std::vector<Row> rows{
      {"10.0.0.1", "n1", 5, "10.0.0.1 (n1) pid 5"},
      {"10.0.0.1", "10.0.0.1", 5, "10.0.0.1 pid 5"},
      {"10.0.0.1", "", 5, "10.0.0.1 pid 5"},
      {"::1", "h", 0, "::1 (h) pid 0"},
  };
  for (const auto& row : rows) {
    NodeDesc d;
    d.addr = row.addr;
    d.host = row.host;
    d.pid = row.pid;
    CHECK(d.label() == row.label);
  }
}

TEST_CASE("job fingerprint: a JSON array of strings, nothing else", "[codec]") {
  CHECK(job_fingerprint({"-m", "pkg.mod", "it's"}) == R"(["-m","pkg.mod","it's"])");
  CHECK(job_fingerprint({}) == "[]");
  struct Row {
    std::string json;
    std::optional<std::vector<std::string>> want;
  };
  const std::vector<Row> rows{
      {R"(["a","b c"])", std::vector<std::string>{"a", "b c"}},
      {"[]", std::vector<std::string>{}},
      {R"(["a",1])", std::nullopt},
      {R"({"a":"b"})", std::nullopt},
      {"\"train.py\"", std::nullopt},
      {"garbage", std::nullopt},
  };
  for (const auto& row : rows) {
    INFO(row.json);
    CHECK(decode_job_fingerprint(row.json) == row.want);
  }
}

TEST_CASE("workers' store address: {addr, port}", "[codec]") {
  auto ep = decode_workers_store(encode_workers_store("10.0.0.1", 29500));
  REQUIRE(ep);
  CHECK(ep->host == "10.0.0.1");
  CHECK(ep->port == 29500);
  struct Row {
    std::string json;
    bool ok;
  };
  const std::vector<Row> rows{
      {R"({"addr":"::1","port":0})", true},
      {R"({"addr":"h","port":65535})", true},
      {R"({"addr":"h","port":65536})", false},
      {R"({"addr":"h","port":-1})", false},
      {R"({"addr":"h","port":"29500"})", false},
      {R"({"addr":1,"port":1})", false},
      {R"({"addr":"h"})", false},
      {R"({"port":1})", false},
      {"[]", false},
      {"", false},
  };
  for (const auto& row : rows) {
    INFO(row.json);
    CHECK(decode_workers_store(row.json).has_value() == row.ok);
  }
}

TEST_CASE("command_line: one line, quoted as a shell needs it", "[codec]") {
  struct Row {
    std::vector<std::string> words;
    std::string want;
  };
  const std::vector<Row> rows{
      {{"train.py", "--lr", "0.1"}, "train.py --lr 0.1"},
      {{"-m", "other.mod", "--name", "it's mine"}, "-m other.mod --name 'it'\\''s mine'"},
      {{"a b", ""}, "'a b' ''"},
      {{"line1\nline2"}, "'line1\\nline2'"},
      {{"$HOME", "x;y", "*"}, "'$HOME' 'x;y' '*'"},
      {{}, "(no command)"},
  };
  for (const auto& row : rows) CHECK(command_line(row.words) == row.want);
  const std::string cut = command_line({std::string(500, 'x')});
  CHECK(cut.size() == 403);
  CHECK(cut.substr(400) == "...");
}
