// The worker environment and command line, table-tested against torchrun's (reference C).
#include "launcher/worker_env.h"

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <set>

#include "tests/support/temp_dir.h"

using namespace ddprun::launcher;

namespace {

LaunchConfig config(int nproc) {
  LaunchConfig c;
  c.nproc_per_node = nproc;
  c.max_restarts = 3;
  c.training_script = "train.py";
  c.script_args = {"--out=run${local_rank}", "x"};
  c.python_exec = "/usr/bin/python3";
  return c;
}

AttemptFacts attempt() {
  AttemptFacts a;
  a.info.group_rank = 1;
  a.info.group_world_size = 2;
  a.info.rank_base = 4;
  a.info.world_size = 8;
  a.info.master_addr = "127.0.0.1";
  a.info.master_port = 29511;
  a.info.use_agent_store = true;
  a.run_id = "job";
  a.restart_count = 2;
  return a;
}

}  // namespace

TEST_CASE("torchrun's worker variables", "[worker_env]") {
  const EnvMap base = {{"PATH", "/usr/bin"}, {"HOME", "/root"}};
  const EnvMap env = worker_env(config(4), attempt(), base, 3, "/logs/attempt_2/3/error.json");
  const EnvMap expected_subset = {
      {"PATH", "/usr/bin"},
      {"HOME", "/root"},
      {"LOCAL_RANK", "3"},
      {"RANK", "7"},
      {"GROUP_RANK", "1"},
      {"ROLE_RANK", "7"},
      {"ROLE_NAME", "default"},
      {"LOCAL_WORLD_SIZE", "4"},
      {"WORLD_SIZE", "8"},
      {"GROUP_WORLD_SIZE", "2"},
      {"ROLE_WORLD_SIZE", "8"},
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", "29511"},
      {"TORCHELASTIC_RESTART_COUNT", "2"},
      {"TORCHELASTIC_MAX_RESTARTS", "3"},
      {"TORCHELASTIC_RUN_ID", "job"},
      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
      {"TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT"},  // torchrun 2.9+
      {"TORCHELASTIC_ERROR_FILE", "/logs/attempt_2/3/error.json"},
      {"NCCL_ASYNC_ERROR_HANDLING", "1"},
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
      {"OMP_NUM_THREADS", "1"},
  };
  for (const auto& [k, v] : expected_subset) {
    CAPTURE(k);
    REQUIRE(env.count(k) == 1);
    CHECK(env.at(k) == v);
  }
  CHECK(env.size() == expected_subset.size());
  CHECK(env.count("CUDA_VISIBLE_DEVICES") == 0);
}

TEST_CASE("user values are kept - OMP only defaulted for several workers", "[worker_env]") {
  const EnvMap base = {
      {"NCCL_ASYNC_ERROR_HANDLING", "0"}, {"OMP_NUM_THREADS", "8"}, {"RANK", "99"}};
  const EnvMap env = worker_env(config(2), attempt(), base, 0, "e");
  CHECK(env.at("NCCL_ASYNC_ERROR_HANDLING") == "0");
  CHECK(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "1");
  CHECK(env.at("OMP_NUM_THREADS") == "8");
  CHECK(env.at("RANK") == "4");  // the launcher's values override inherited ones
  CHECK(defaults_omp_num_threads(config(2), {}));
  CHECK(!defaults_omp_num_threads(config(1), {}));
  CHECK(!defaults_omp_num_threads(config(2), base));
  CHECK(worker_env(config(1), attempt(), {}, 0, "e").count("OMP_NUM_THREADS") == 0);
  AttemptFacts c10d = attempt();
  c10d.info.use_agent_store = false;
  CHECK(worker_env(config(1), c10d, {}, 0, "e").at("TORCHELASTIC_USE_AGENT_STORE") == "False");
}

TEST_CASE("virtual local rank (--virtual-local-rank): LOCAL_RANK 0 and one device each",
          "[worker_env]") {
  LaunchConfig c = config(3);
  c.virtual_local_rank = true;
  const EnvMap with = {{"CUDA_VISIBLE_DEVICES", "5,6,7"}};
  CHECK(worker_env(c, attempt(), with, 1, "e").at("LOCAL_RANK") == "0");
  CHECK(worker_env(c, attempt(), with, 1, "e").at("CUDA_VISIBLE_DEVICES") == "6");
  CHECK(worker_env(c, attempt(), with, 1, "e").at("RANK") == "5");
  CHECK(worker_env(c, attempt(), {}, 2, "e").at("CUDA_VISIBLE_DEVICES") == "2");
  // torchrun strips each entry: 'CUDA_VISIBLE_DEVICES=0, 1' gives rank 1 "1", not " 1".
  CHECK(worker_env(c, attempt(), {{"CUDA_VISIBLE_DEVICES", "0, 1 ,2"}}, 1, "e")
            .at("CUDA_VISIBLE_DEVICES") == "1");
  c.virtual_local_rank = false;
  CHECK(worker_env(c, attempt(), with, 1, "e").at("CUDA_VISIBLE_DEVICES") == "5,6,7");
}

TEST_CASE("worker command lines", "[worker_env]") {
  LaunchConfig c = config(2);
  using V = std::vector<std::string>;
  CHECK(worker_argv(c, 1) == V{"/usr/bin/python3", "-u", "train.py", "--out=run1", "x"});
  c.entry = EntryKind::kPythonModule;
  CHECK(worker_argv(c, 0) == V{"/usr/bin/python3", "-u", "-m", "train.py", "--out=run0", "x"});
  c.entry = EntryKind::kExecutable;
  CHECK(worker_argv(c, 0) == V{"train.py", "--out=run0", "x"});
  c.entry = EntryKind::kPythonScript;
  c.legacy_launch = true;
  // torch.distributed.launch puts --local_rank right after the script.
  CHECK(worker_argv(c, 1) ==
        V{"/usr/bin/python3", "-u", "train.py", "--local_rank=1", "--out=run1", "x"});
  c.use_env = true;
  CHECK(worker_argv(c, 1) == V{"/usr/bin/python3", "-u", "train.py", "--out=run1", "x"});
  // --run-path: the script and its arguments follow a -c bootstrap (runpy.run_path).
  c.legacy_launch = false;
  c.run_path = true;
  const auto rp = worker_argv(c, 1);
  REQUIRE(rp.size() == 7);
  CHECK(V(rp.begin(), rp.begin() + 3) == V{"/usr/bin/python3", "-u", "-c"});
  CHECK(rp[3].find("runpy.run_path") != std::string::npos);
  CHECK(V(rp.begin() + 4, rp.end()) == V{"train.py", "--out=run1", "x"});
  c.entry = EntryKind::kPythonModule;  // -m: unchanged by --run-path
  CHECK(worker_argv(c, 0) == V{"/usr/bin/python3", "-u", "-m", "train.py", "--out=run0", "x"});
}

TEST_CASE("${local_rank} substitution follows torchrun's string.Template rules", "[worker_env]") {
  // Expected values printed by Python 3.11's Template(arg).safe_substitute(local_rank="7"),
  // which is what torchrun 1.13 and 2.6 apply to every script argument.
  const std::vector<std::pair<std::string, std::string>> table{
      {"${local_rank}", "7"},
      {"a${local_rank}b${local_rank}", "a7b7"},
      {"${local_rank", "${local_rank"},
      {"$local_rank", "7"},
      {"", ""},
      {"$$", "$"},
      {"$$local_rank", "$local_rank"},
      {"$local_rank_x", "$local_rank_x"},
      {"$local_rank-x", "7-x"},
      {"${other}", "${other}"},
      {"$other", "$other"},
      {"$LOCAL_RANK", "$LOCAL_RANK"},
      {"$1", "$1"},
      {"trailing$", "trailing$"},
      {"${", "${"},
      {"${}", "${}"},
      {"$${local_rank}", "${local_rank}"},
      {"$$$local_rank", "$7"},
      {"--out=run$local_rank.log", "--out=run7.log"},
      {"a$b$local_rank", "a$b7"},
      {"${local_rank}}", "7}"},
      {"\xc3\xa9$local_rank",
       "\xc3\xa9"
       "7"},
  };
  for (const auto& [arg, want] : table) {
    INFO("argument: " << arg);
    CHECK(substitute_local_rank(arg, 7) == want);
  }
  CHECK(substitute_local_rank("a${local_rank}b", 12) == "a12b");
  CHECK(to_env_strings({{"A", "1"}, {"B", "x=y"}}) == std::vector<std::string>{"A=1", "B=x=y"});
}

TEST_CASE("watchdogs: PYTHONFAULTHANDLER with --stall-timeout, the file timer's pipe",
          "[worker_env]") {
  LaunchConfig c = config(2);
  CHECK(worker_env(c, attempt(), {}, 0, "e").count("PYTHONFAULTHANDLER") == 0);
  CHECK(worker_env(c, attempt(), {}, 0, "e").count("TORCHELASTIC_TIMER_FILE") == 0);
  c.stall_timeout_s = 30;
  c.file_timer_path = "/tmp/watchdog_timer_x";
  const EnvMap env = worker_env(c, attempt(), {}, 1, "e");
  CHECK(env.at("PYTHONFAULTHANDLER") == "1");
  CHECK(env.at("TORCHELASTIC_TIMER_FILE") == "/tmp/watchdog_timer_x");
  // A user's value, even an empty one (faulthandler off), is kept.
  CHECK(worker_env(c, attempt(), {{"PYTHONFAULTHANDLER", ""}}, 0, "e")
            .at("PYTHONFAULTHANDLER")
            .empty());
}

TEST_CASE("GLOO_SOCKET_IFNAME: the rendezvous' choice, a user's value kept", "[worker_env]") {
  AttemptFacts spanning = attempt();
  spanning.info.gloo_socket_ifname = "eth1";  // the host name would make gloo bind loopback
  CHECK(worker_env(config(1), spanning, {}, 0, "e").at("GLOO_SOCKET_IFNAME") == "eth1");
  CHECK(worker_env(config(1), spanning, {{"GLOO_SOCKET_IFNAME", "ib0"}}, 0, "e")
            .at("GLOO_SOCKET_IFNAME") == "ib0");
  CHECK(worker_env(config(1), attempt(), {}, 0, "e").count("GLOO_SOCKET_IFNAME") == 0);
}

TEST_CASE("one attempt's worker specs: ranks, CPUs and stream routes", "[worker_env]") {
  ddprun::test::TempDir dir;
  const RunDirs dirs(dir.path.string(), "job/1", dir.path.string());
  CHECK(dirs.run_dir().rfind((dir.path / "job_1_").string(), 0) == 0);
  LaunchConfig c = config(3);
  c.tee.per_rank = {{0, StdStreams::kOut}};  // -t 0:1
  c.redirects.all = StdStreams::kErr;        // -r 2
  c.local_ranks_filter = std::set<int>{0, 1};
  RankPlacement p0;
  p0.cpus = {2, 3};
  const auto specs = make_worker_specs(c, attempt(), {{"PATH", "/bin"}}, dirs, {p0});
  REQUIRE(specs.size() == 3);
  CHECK(specs[1].global_rank == 5);
  CHECK(specs[0].cpus == std::vector<int>{2, 3});
  CHECK(specs[1].cpus.empty());
  CHECK(specs[0].out.mode == StreamMode::kTee);
  CHECK(specs[0].out.file == dirs.rank_dir(2, 0) + "/stdout.log");
  CHECK(specs[0].line_prefix == "[default0]:");
  CHECK(specs[1].out.mode == StreamMode::kConsole);
  CHECK(specs[1].line_prefix.empty());
  CHECK(specs[1].err.mode == StreamMode::kRedirect);
  CHECK(specs[1].err.file == dirs.rank_dir(2, 1) + "/stderr.log");
  // Filtered off the console, as torchrun (issue 31 item 11): the redirected stderr in
  // its file, the stdout nowhere; none shown.
  CHECK(specs[2].out.mode == StreamMode::kRedirect);
  CHECK(specs[2].out.file == "/dev/null");
  CHECK_FALSE(specs[2].out.show_on_console);
  CHECK(specs[2].err.file == dirs.rank_dir(2, 2) + "/stderr.log");
  CHECK_FALSE(specs[2].err.show_on_console);
  const auto error_file = "TORCHELASTIC_ERROR_FILE=" + dirs.error_file(2, 2);
  CHECK(std::find(specs[2].env.begin(), specs[2].env.end(), error_file) != specs[2].env.end());
}

TEST_CASE("option --stall-timeout: each rank's flight recorder dump file, named for the analyzer",
          "[worker_env]") {
  ddprun::test::TempDir dir;
  const RunDirs dirs(dir.path.string(), "job", dir.path.string());
  LaunchConfig c = config(2);
  CHECK(make_worker_specs(c, attempt(), {}, dirs, {})[0].flight_recorder_file.empty());
  c.stall_timeout_s = 30;
  auto specs = make_worker_specs(c, attempt(), {}, dirs, {});
  CHECK(specs[1].flight_recorder_file ==
        dirs.attempt_dir(2) + "/flight_recorder/nccl_trace_rank_5");
  // The user's TORCH_FR_DUMP_TEMP_FILE names the prefix, as PyTorch's own dumps.
  specs = make_worker_specs(c, attempt(), {{"TORCH_FR_DUMP_TEMP_FILE", "/x/fr_"}}, dirs, {});
  CHECK(specs[0].flight_recorder_file == dirs.flight_recorder_dir(2) + "/fr_4");
  // --log-dir /dev/null: no files, no dumps.
  const RunDirs none("/dev/null", "job", dir.path.string());
  CHECK(make_worker_specs(c, attempt(), {}, none, {})[0].flight_recorder_file.empty());
}

TEST_CASE("option --log-dir naming a file: one line naming the option", "[worker_env]") {
  ddprun::test::TempDir dir;
  const std::string file = (dir.path / "a_file").string();
  std::fclose(std::fopen(file.c_str(), "w"));
  CHECK_THROWS_WITH(RunDirs(file, "job", dir.path.string()),
                    "--log-dir " + file + ": is a file, not a directory");
  CHECK_THROWS_WITH(RunDirs(file + "/sub", "job", dir.path.string()),
                    Catch::Matchers::StartsWith("--log-dir " + file + "/sub: "));
}

TEST_CASE("option --log-dir /dev/null: no files, every rank's streams on the console",
          "[worker_env]") {
  // torchrun 2.14's DefaultLogsSpecs: with os.devnull every stream is the console's, and
  // -r/-t and --local-ranks-filter (which only act through files) change nothing.
  ddprun::test::TempDir dir;
  const RunDirs dirs("/dev/null", "job", dir.path.string());
  LaunchConfig c = config(2);
  c.redirects.all = StdStreams::kOut | StdStreams::kErr;
  c.tee.per_rank = {{1, StdStreams::kOut}};
  c.local_ranks_filter = std::set<int>{1};
  for (const auto& w : make_worker_specs(c, attempt(), {}, dirs, {})) {
    CAPTURE(w.local_rank);
    for (const auto& s : {w.out, w.err}) {
      CHECK(s.mode == StreamMode::kConsole);
      CHECK(s.show_on_console);
      CHECK(s.file.empty());
    }
    CHECK_FALSE(w.stdin_null);
  }
}

TEST_CASE("option --log-line-prefix-template: string.Template.safe_substitute of four names",
          "[worker_env]") {
  // Expected values printed by Python's Template(t).safe_substitute(role_name="trainer",
  // rank=5, local_rank=1, hostname=<short host name>), as torchrun 2.14's agent does.
  ddprun::test::TempDir dir;
  const RunDirs dirs(dir.path.string(), "job", dir.path.string());
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string h = host;
  const std::vector<std::pair<std::string, std::string>> table{
      {"${hostname}:${rank}: ", h + ":5: "},
      {"[$role_name$local_rank]", "[trainer1]"},
      {"$$${rank}", "$5"},
      {"${unknown}$rank", "${unknown}5"},
      {"${rank", "${rank"},
      {"$RANK", "$RANK"},
  };
  LaunchConfig c = config(2);
  c.role = "trainer";
  c.tee.all = StdStreams::kOut;
  for (const auto& [text, want] : table) {
    INFO("template: " << text);
    c.log_line_prefix_template = text;
    CHECK(make_worker_specs(c, attempt(), {}, dirs, {})[1].line_prefix == want);
  }
}

TEST_CASE("the NCCL async-error variable is the one the workers' torch reads", "[worker_env]") {
  LaunchConfig c = config(1);
  c.worker_torch_version = std::pair{2, 11};  // reads TORCH_*, warns about the old name
  EnvMap env = worker_env(c, attempt(), {}, 0, "e");
  CHECK(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "1");
  CHECK(env.count("NCCL_ASYNC_ERROR_HANDLING") == 0);
  c.worker_torch_version = std::pair{1, 13};  // reads only the old name
  env = worker_env(c, attempt(), {}, 0, "e");
  CHECK(env.at("NCCL_ASYNC_ERROR_HANDLING") == "1");
  CHECK(env.count("TORCH_NCCL_ASYNC_ERROR_HANDLING") == 0);
  // A user's old-name value reaches a 2.x worker unchanged (it is theirs to warn about).
  c.worker_torch_version = std::pair{2, 2};
  env = worker_env(c, attempt(), {{"NCCL_ASYNC_ERROR_HANDLING", "0"}}, 0, "e");
  CHECK(env.at("NCCL_ASYNC_ERROR_HANDLING") == "0");
  CHECK(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "1");
  // Unknown version: both names for python workers, torchrun 2.x's one for --no-python.
  c.worker_torch_version.reset();
  env = worker_env(c, attempt(), {}, 0, "e");
  CHECK(env.count("NCCL_ASYNC_ERROR_HANDLING") == 1);
  c.entry = EntryKind::kExecutable;
  env = worker_env(c, attempt(), {}, 0, "e");
  CHECK(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "1");
  CHECK(env.count("NCCL_ASYNC_ERROR_HANDLING") == 0);
}
