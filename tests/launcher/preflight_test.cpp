// The pre-flight check's pure parts (launcher/preflight/): the program's findings read
// and shared, the job-wide verdict (failed checks, slow devices and links against the
// median, who can be left out), its table, and the block-list file on a real file system.
#include <fcntl.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include "launcher/preflight/blocklist.h"
#include "launcher/preflight/preflight_script.h"
#include "launcher/preflight/preflight_verdict.h"
#include "tests/support/temp_dir.h"

using namespace ddprun::launcher::preflight;
using Action = Verdict::Action;

namespace {

// A node whose checks passed: import 1 s, its CPU check `cpu` s, links from its ring
// neighbours in a ring of `n` taking `link` s.
NodeResult good(int node, int n, double cpu = 0.3, double link = 0.02) {
  NodeResult r;
  r.node = node;
  r.host = "h" + std::to_string(node);
  r.key = r.host;
  r.python = "/usr/bin/python3";
  r.checks = {{"import torch", true, 1.0, "2.14.0"},
              {"cpu", true, cpu, "1 threads"},
              {"collective", true, 0.1, "gloo"}};
  r.links[(node + 1) % n] = link;
  r.links[(node + n - 1) % n] = link;
  return r;
}

std::vector<NodeResult> ring(int n) {
  std::vector<NodeResult> out;
  for (int i = 0; i < n; ++i) out.push_back(good(i, n));
  return out;
}

}  // namespace

TEST_CASE("preflight: findings as the program writes them, and as nodes share them",
          "[preflight]") {
  NodeResult r;
  REQUIRE(read_findings(R"({"python": "/p", "local_done": true, "links": {"2": 0.5},
      "checks": [{"name": "import torch", "ok": true, "seconds": 1.5, "detail": "2.14.0"},
                 {"name": "cuda:0", "ok": false, "seconds": 0.2, "error": "RuntimeError: x"}]})",
                        r));
  CHECK(r.python == "/p");
  REQUIRE(r.checks.size() == 2);
  CHECK(r.checks[0].text == "2.14.0");
  CHECK_FALSE(r.checks[1].ok);
  CHECK(r.checks[1].text == "RuntimeError: x");
  CHECK(r.links.at(2) == 0.5);
  r.node = 3;
  r.host = "gpu-07 (10.0.0.7)";
  r.hosts_store = true;
  const NodeResult back = from_json(3, to_json(r));
  CHECK(back.host == r.host);
  CHECK(back.hosts_store);
  CHECK(back.checks.size() == 2);
  CHECK(back.links == r.links);

  for (const char* bad : {"", "{", "[]", R"({"checks": 3})", R"({"checks": [{"ok": true}]})"}) {
    NodeResult x;
    CAPTURE(bad);
    CHECK_FALSE(read_findings(bad, x));
    CHECK(x.missing.find("unreadable findings") == 0);
    CHECK(from_json(1, bad).missing.find("unreadable findings") == 0);
  }
}

TEST_CASE("preflight: every node good, a job that runs", "[preflight]") {
  const Verdict v = judge(ring(4), {});
  CHECK(v.action == Action::kRun);
  CHECK(v.bad.empty());
  const std::string t = table(ring(4), v);
  CHECK(t.find("node  host") == 0);
  CHECK(std::count(t.begin(), t.end(), '\n') == 4);
  CHECK(table(ring(4), v, /*all_rows=*/false).find('\n') == std::string::npos);
}

TEST_CASE("preflight: a failed check or no findings makes a node bad", "[preflight]") {
  auto nodes = ring(4);
  nodes[1].checks = {{"import torch", false, 0.1, "ModuleNotFoundError: No module named 'torch'"}};
  nodes[1].links.clear();
  nodes[2].checks[1] = {"cpu", false, 0.1, "RuntimeError: matmul gave 1.0 instead of 96.0"};
  nodes[3].missing = "shared no findings within 130 s";
  const Verdict v = judge(nodes, {.slow_factor = 3, .min_nodes = 1, .waiting = 0});
  REQUIRE(v.bad.size() == 3);
  CHECK(v.bad[0].node == 1);
  CHECK(v.bad[0].why ==
        "import torch: ModuleNotFoundError: No module named 'torch' (/usr/bin/python3)");
  CHECK(v.bad[1].why == "cpu: RuntimeError: matmul gave 1.0 instead of 96.0");
  CHECK(v.bad[2].why == "shared no findings within 130 s");
  CHECK(v.action == Action::kExclude);  // one good node is enough for --nnodes 1:4
  CHECK(table(nodes, v).find("BAD: import torch: ModuleNotFoundError") != std::string::npos);
}

TEST_CASE("preflight: slow against the median, with a floor under short timings", "[preflight]") {
  auto nodes = ring(4);
  nodes[2].checks[1].seconds = 1.2;  // 4x the median of 0.3 s
  Verdict v = judge(nodes, {});
  REQUIRE(v.bad.size() == 1);
  CHECK(v.bad[0].node == 2);
  CHECK(v.bad[0].why ==
        "devices took 1.20 s against a median of 0.30 s (--preflight-slow-factor 3)");
  CHECK(judge(nodes, {.slow_factor = 5}).bad.empty());  // under the factor

  // 10x the median, but 0.045 s more: noise on any busy machine, not a bad node.
  auto quick = ring(3);
  for (auto& r : quick) r.checks[1].seconds = 0.005;
  quick[0].checks[1].seconds = 0.05;
  CHECK(judge(quick, {}).bad.empty());
}

TEST_CASE("preflight: a slow link is its host's, not its neighbours'", "[preflight]") {
  // Node 2's link is shaped: every transfer from or to it is slow.
  auto nodes = ring(4);
  for (auto& r : nodes) {
    for (auto& [from, s] : r.links) {
      if (from == 2 || r.node == 2) s = 3.0;
    }
  }
  const Verdict v = judge(nodes, {});
  REQUIRE(v.bad.size() == 1);
  CHECK(v.bad[0].node == 2);
  CHECK(v.bad[0].why.find("its links took 3.00 s against a median of 0.02 s") == 0);

  // Two nodes share their one link: neither end can be named.
  auto two = ring(2);
  two[0].links[1] = 3.0;
  CHECK(judge(two, {}).bad.empty());
}

TEST_CASE("preflight: who can be left out", "[preflight]") {
  auto nodes = ring(3);
  nodes[1].checks[0].ok = false;
  // --nnodes 2:3: two good nodes go on.
  CHECK(judge(nodes, {.slow_factor = 3, .min_nodes = 2, .waiting = 0}).action == Action::kExclude);
  // --nnodes 3: no room, unless a spare waits.
  Verdict v = judge(nodes, {.slow_factor = 3, .min_nodes = 3, .waiting = 0});
  CHECK(v.action == Action::kStop);
  CHECK(v.why == "2 good node(s) and the job needs 3 (--nnodes)");
  CHECK(judge(nodes, {.slow_factor = 3, .min_nodes = 3, .waiting = 1}).action == Action::kExclude);
  // The node hosting the rendezvous store cannot leave without ending the job.
  nodes[1].hosts_store = true;
  v = judge(nodes, {.slow_factor = 3, .min_nodes = 1, .waiting = 0});
  CHECK(v.action == Action::kStop);
  CHECK(v.why == "node 1 hosts the rendezvous store: it cannot be left out");
  // One node alone: nothing to go on with.
  auto one = ring(1);
  one[0].checks[0].ok = false;
  CHECK(judge(one, {}).action == Action::kStop);
}

TEST_CASE("preflight: the program is written whole", "[preflight]") {
  ddprun::test::TempDir dir;
  write_script(dir.str() + "/preflight.py");
  CHECK(ddprun::test::slurp(dir.path / "preflight.py") == script_text());
  CHECK_THROWS_WITH(write_script(dir.str() + "/no/such/dir/p.py"),
                    Catch::Contains("cannot write the pre-flight check to"));
}

TEST_CASE("blocklist: read, appended once per host, kept across writers", "[preflight]") {
  ddprun::test::TempDir dir;
  const std::string path = dir.str() + "/bad-hosts";
  CHECK(read_blocklist(path).empty());  // not there yet
  CHECK(add_to_blocklist(path, {{"10.0.0.7", "", "import torch: no torch"},
                                {"10.0.0.7", "", "twice"},
                                {"gpu-09", "2026-01-02T03:04:05Z", "cpu: slow"}}) == 2);
  CHECK(add_to_blocklist(path, {{"gpu-09", "", "again"}}) == 0);
  auto entries = read_blocklist(path);
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].host == "10.0.0.7");
  CHECK(entries[0].when.size() == 20);  // 2026-11-29T01:02:03Z
  CHECK(entries[0].why == "import torch: no torch");
  CHECK(entries[1].when == "2026-01-02T03:04:05Z");
  CHECK(find_host(entries, "gpu-09"));
  CHECK_FALSE(find_host(entries, "gpu-1"));

  // A user's own lines: comments, blanks, a host alone.
  const std::string own = dir.write("own", "# kept by hand\n\n  gpu-3\ngpu-4 x  why not\n");
  entries = read_blocklist(own);
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].host == "gpu-3");
  CHECK(entries[0].when.empty());
  CHECK(entries[1].why == "why not");
}

TEST_CASE("blocklist: what cannot be a block-list says so in one line", "[preflight]") {
  ddprun::test::TempDir dir;
  CHECK_THROWS_WITH(read_blocklist(dir.str()), Catch::Contains("not a regular file"));
  const std::string fifo = dir.str() + "/fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(read_blocklist(fifo), "--blocklist " + fifo + ": not a regular file");
  const std::string big = dir.write("big", std::string((1 << 20) + 1, 'x'));
  CHECK_THROWS_WITH(read_blocklist(big), Catch::Contains("larger than 1 MiB"));
  CHECK_THROWS_WITH(add_to_blocklist(dir.str() + "/no/such/dir/f", {{"h", "", ""}}),
                    Catch::Contains("No such file or directory"));
}
