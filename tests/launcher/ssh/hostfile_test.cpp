// The host list of a multi-host launch: hostfile lines, --hosts, --include/--exclude, and
// one-line errors naming the file and line (or the flag).
#include "launcher/ssh/hostfile.h"

#include <catch2/catch.hpp>

#include "launcher/options/usage_error.h"
#include "tests/launcher/options/usage_error_text.h"

using namespace ddprun::launcher;
using ddprun::launcher::test::usage_error_text;

TEST_CASE("hostfile: DeepSpeed lines with comments and blank lines", "[hostfile]") {
  const auto hosts = parse_hostfile(
      "# the cluster\n"
      "node1 slots=4\n"
      "\n"
      "  node2   slots=2   # two GPUs\n"
      "user@node3\n"
      "10.0.0.4 slots=1\n",
      "hf");
  REQUIRE(hosts.size() == 4);
  CHECK(hosts[0].name == "node1");
  CHECK(hosts[0].slots == 4);
  CHECK(hosts[0].line == 2);
  CHECK(hosts[1].name == "node2");
  CHECK(hosts[1].slots == 2);
  CHECK(hosts[2].name == "user@node3");
  CHECK(!hosts[2].slots);
  CHECK(host_address(hosts[2].name) == "node3");
  CHECK(hosts[3].slots == 1);
  CHECK(host_nproc(hosts[0]) == 4);
  CHECK(!host_nproc(hosts[2]));
}

TEST_CASE("hostfile: each bad line is one error naming file:line", "[hostfile]") {
  struct Case {
    const char* text;
    const char* error;
  };
  const Case cases[] = {
      {"a\nb slots=0\n", "hf:2: 'slots=0': slots must be a positive integer"},
      {"a slots=x\n", "hf:1: 'slots=x': slots must be a positive integer"},
      {"a slots=-1\n", "hf:1: 'slots=-1': slots must be a positive integer"},
      {"a slots=2 slots=3\n", "hf:1: slots= given twice"},
      {"a gpus=2\n", "hf:1: unexpected 'gpus=2' (expected: host [slots=N])"},
      {"a\n\na\n", "hf:3: host 'a' is listed twice (first at line 1)"},
      {"-oProxyCommand=x\n", "hf:1: host name '-oProxyCommand=x' starts with '-'"},
      {"a;rm\n", "hf:1: host name 'a;rm' has the character ';'"},
      {"a$(x)\n", "hf:1: host name 'a$(x)' has the character '$'"},
      {"u@v@w\n", "hf:1: host name 'u@v@w' is not [user@]host"},
      {"# nothing\n\n", "hf: no host in the hostfile"},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    const std::string e = usage_error_text([&] { parse_hostfile(c.text, "hf"); });
    CHECK(e.rfind(c.error, 0) == 0);
    CHECK(e.find('\n') == std::string::npos);
  }
  CHECK(usage_error_text([] { read_hostfile("/nonexistent/hostfile"); }) ==
        "--hostfile /nonexistent/hostfile: cannot read the file");
}

TEST_CASE("hostfile: a byte-order mark is skipped, other invisible bytes are shown hex-escaped",
          "[hostfile]") {
  // Saved by an editor that writes UTF-8 with a BOM (Windows Notepad, some IDEs).
  const auto hosts = parse_hostfile("\xef\xbb\xbfnode1 slots=2\nnode2\n", "hf");
  REQUIRE(hosts.size() == 2);
  CHECK(hosts[0].name == "node1");
  CHECK(hosts[0].slots == 2);
  // Anywhere else the bytes are a fault, and the message shows them.
  CHECK(usage_error_text([] { parse_hostfile("node1\n\xef\xbb\xbfnode2\n", "hf"); }) ==
        "hf:2: host name '\\xef\\xbb\\xbfnode2' has the character '\\xef' (letters, digits, "
        "'.', '-', '_' and user@ only)");
  CHECK(usage_error_text([] {
          parse_hostfile(
              "node\xc2\xa0"
              "1\n",
              "hf");
        }) ==
        "hf:1: host name 'node\\xc2\\xa01' has the character '\\xc2' (letters, digits, '.', "
        "'-', '_' and user@ only)");
  CHECK(usage_error_text([] { parse_hostfile("node1 slots=\x1b[2\n", "hf"); }) ==
        "hf:1: 'slots=\\x1b[2': slots must be a positive integer");
  CHECK(usage_error_text([] { parse_hosts_list("a,b\x7f"); }) ==
        "--hosts 'a,b\\x7f': host name 'b\\x7f' has the character '\\x7f' (letters, digits, "
        "'.', '-', '_' and user@ only)");
}

TEST_CASE("hosts list with slot counts", "[hostfile]") {
  const auto hosts = parse_hosts_list("a, b:2 ,c");
  REQUIRE(hosts.size() == 3);
  CHECK(hosts[0].name == "a");
  CHECK(!hosts[0].slots);
  CHECK(hosts[1].name == "b");
  CHECK(hosts[1].slots == 2);
  CHECK(hosts[2].name == "c");
  CHECK(hosts[2].line == 0);
  CHECK(usage_error_text([] { parse_hosts_list("a,b:0"); }) ==
        "--hosts 'a,b:0': 'b:0': the count after ':' must be a positive integer");
  CHECK(usage_error_text([] { parse_hosts_list("a,,b"); }) == "--hosts 'a,,b': empty host name");
  CHECK(usage_error_text([] { parse_hosts_list("a,a:2"); }) ==
        "--hosts 'a,a:2': host 'a' is listed twice");
}

TEST_CASE("include and exclude filters become nproc and CUDA_VISIBLE_DEVICES", "[hostfile]") {
  const auto all = parse_hostfile("a slots=4\nb slots=2\nc\n", "hf");
  SECTION("include hosts and GPUs") {
    const auto h = filter_hosts(all, "a:0,2@c", "");
    REQUIRE(h.size() == 2);
    CHECK(h[0].name == "a");
    CHECK(h[0].gpus == std::vector<int>{0, 2});
    CHECK(host_nproc(h[0]) == 2);
    CHECK(h[1].name == "c");
    CHECK(!h[1].gpus);
  }
  SECTION("exclude a host, and GPUs of another") {
    const auto h = filter_hosts(all, "", "b@a:1");
    REQUIRE(h.size() == 2);
    CHECK(h[0].gpus == std::vector<int>{0, 2, 3});
    CHECK(host_nproc(h[0]) == 3);
    CHECK(h[1].name == "c");
  }
  SECTION("no filter") { CHECK(filter_hosts(all, "", "").size() == 3); }
  SECTION("errors name the flag") {
    CHECK(usage_error_text([&] { filter_hosts(all, "a", "b"); }) ==
          "--include and --exclude cannot be combined");
    CHECK(usage_error_text([&] { filter_hosts(all, "z", ""); }) ==
          "--include: host 'z' is not in the host list");
    CHECK(usage_error_text([&] { filter_hosts(all, "b:2", ""); }) ==
          "--include: host 'b' has 2 slots; GPU 2 is out of range");
    CHECK(usage_error_text([&] { filter_hosts(all, "", "c:0"); }) ==
          "--exclude: host 'c' has no slots count, so its other GPUs are unknown (give slots=N)");
    CHECK(usage_error_text([&] { filter_hosts(all, "a:x", ""); }) ==
          "--include 'a:x': 'x' is not a GPU index");
    CHECK(usage_error_text([&] { filter_hosts(all, "a:1,1", ""); }) ==
          "--include 'a:1,1': GPU 1 named twice");
    CHECK(usage_error_text([&] { filter_hosts(all, "", "a@b@c"); }) ==
          "--exclude: no host is left to run on");
  }
}
