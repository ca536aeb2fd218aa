// Command-line parsing: both spellings, PET_* fallbacks, defaults, and every bad input
// giving one line that names the flag or file.
#include "launcher/options/cli.h"

#include <catch2/catch.hpp>
#include <csignal>

#include "tests/support/temp_dir.h"

using namespace ddprun::launcher;
using ddprun::rdzv::Backend;

namespace {

HostFacts facts(std::map<std::string, std::string> env = {}) {
  HostFacts h;
  h.env = std::move(env);
  h.cpu_count = 2;
  h.gpu_count = 0;
  h.file_exists = [](const std::string& p) { return p == "train.py" || p == "/bin/true"; };
  return h;
}

CliOutcome parse(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  return parse_command_line(args, facts(std::move(env)));
}

LaunchConfig ok(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  const CliOutcome out = parse(std::move(args), std::move(env));
  INFO(out.text);
  REQUIRE(out.kind == CliOutcome::Kind::kRun);
  return out.config;
}

}  // namespace

TEST_CASE("defaults match torchrun's", "[cli]") {
  const LaunchConfig c = ok({"train.py"});
  CHECK(c.min_nodes == 1);
  CHECK(c.max_nodes == 1);
  CHECK(c.nproc_per_node == 1);
  CHECK(c.max_restarts == 0);
  CHECK(c.role == "default");
  CHECK(c.start_method == "spawn");
  CHECK(c.entry == EntryKind::kPythonScript);
  CHECK(c.python_exec == "python3");
  CHECK(c.redirects.for_rank(0) == 0);
  CHECK(c.tee.for_rank(0) == 0);
  CHECK(!c.local_ranks_filter);
  CHECK(!c.node_rank);
  CHECK(!c.master_port);
  CHECK(c.shutdown_timeout_s == 30);
  CHECK(c.signals_to_handle == std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT});
  CHECK(c.signals_to_handle_text == "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  CHECK(c.training_script == "train.py");
  CHECK(c.script_args.empty());
  // Single node, static defaults: the newest torchrun's switch to a free local port.
  CHECK(c.rdzv_backend == Backend::kC10d);
  CHECK(c.rdzv_endpoint == "localhost:0");
  CHECK(c.rdzv_id.size() == 36);
}

TEST_CASE("every option in both spellings", "[cli]") {
  struct Row {
    std::string dash, underscore, value;
  };
  const std::vector<Row> rows = {
      {"--nproc-per-node", "--nproc_per_node", "3"},
      {"--rdzv-backend", "--rdzv_backend", "c10d"},
      {"--rdzv-endpoint", "--rdzv_endpoint", "127.0.0.1:29400"},
      {"--rdzv-id", "--rdzv_id", "job7"},
      {"--rdzv-conf", "--rdzv_conf", "join_timeout=5"},
      {"--max-restarts", "--max_restarts", "4"},
      {"--monitor-interval", "--monitor_interval", "0.5"},
      {"--start-method", "--start_method", "fork"},
      {"--log-dir", "--log_dir", "/tmp/x"},
      {"--local-ranks-filter", "--local_ranks_filter", "0,1"},
      {"--node-rank", "--node_rank", "0"},
      {"--master-addr", "--master_addr", "127.0.0.2"},
      {"--master-port", "--master_port", "29555"},
      {"--local-addr", "--local_addr", "127.0.0.3"},
      {"--signals-to-handle", "--signals_to_handle", "SIGUSR1"},
      {"--shutdown-timeout", "--shutdown_timeout", "7"},
      {"--numa-binding", "--numa_binding", "node"},
      {"--log-line-prefix-template", "--log_line_prefix_template", "${hostname}:${rank}: "},
  };
  for (const auto& row : rows) {
    for (const auto& style : {0, 1}) {
      for (const auto& name : {row.dash, row.underscore}) {
        std::vector<std::string> args =
            style == 0 ? std::vector<std::string>{name + "=" + row.value, "train.py"}
                       : std::vector<std::string>{name, row.value, "train.py"};
        const LaunchConfig c = ok(args);
        CAPTURE(name, style);
        if (row.dash == "--nproc-per-node") CHECK(c.nproc_per_node == 3);
        if (row.dash == "--rdzv-id") CHECK(c.rdzv_id == "job7");
        if (row.dash == "--rdzv-conf") CHECK(c.rdzv_conf.join_timeout == std::chrono::seconds(5));
        if (row.dash == "--max-restarts") CHECK(c.max_restarts == 4);
        if (row.dash == "--monitor-interval") CHECK(c.monitor_interval_s == 0.5);
        if (row.dash == "--start-method") CHECK(c.start_method == "fork");
        if (row.dash == "--log-dir") CHECK(c.log_dir == "/tmp/x");
        if (row.dash == "--local-ranks-filter") CHECK(*c.local_ranks_filter == std::set<int>{0, 1});
        if (row.dash == "--node-rank") CHECK(*c.node_rank == 0);
        if (row.dash == "--master-addr") CHECK(*c.master_addr == "127.0.0.2");
        if (row.dash == "--master-port") {
          CHECK(*c.master_port == 29555);
          CHECK(c.rdzv_backend == Backend::kStatic);  // an explicit port keeps static
        }
        if (row.dash == "--local-addr") CHECK(*c.local_addr == "127.0.0.3");
        if (row.dash == "--signals-to-handle")
          CHECK(c.signals_to_handle == std::vector<int>{SIGUSR1});
        if (row.dash == "--shutdown-timeout") CHECK(c.shutdown_timeout_s == 7);
        if (row.dash == "--numa-binding") CHECK(c.numa_binding == "node");
        if (row.dash == "--log-line-prefix-template") {
          CHECK(c.log_line_prefix_template == "${hostname}:${rank}: ");
        }
      }
    }
  }
}

TEST_CASE("torchrun options ddprun does not implement: no-op values pass, others refused",
          "[cli]") {
  ok({"--event-log-handler=null", "--logs-specs=", "train.py"});
  // torchrun's registered event handlers: console prints, null (the default) and
  // dynamic_rendezvous do not; only plugin names are refused.
  CHECK(ok({"--event-log-handler=console", "train.py"}).event_log_handler == "console");
  CHECK(ok({"train.py"}, {{"PET_EVENT_LOG_HANDLER", "console"}}).event_log_handler == "console");
  CHECK(ok({"--event_log_handler", "null", "train.py"}).event_log_handler == "null");
  CHECK(ok({"--event-log-handler=dynamic_rendezvous", "train.py"}).event_log_handler == "null");
  CHECK(ok({"train.py"}).event_log_handler == "null");
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"--event-log-handler=scuba", "console, null"},
      {"--event_log_handler=scuba", "console, null"},
      {"--logs-specs=x", "--log-dir"},
      {"--logs_specs=x", "--log-dir"}};
  for (const auto& [arg, instead] : refused) {
    const CliOutcome out = parse({arg, "train.py"});
    CAPTURE(arg);
    CHECK(out.kind == CliOutcome::Kind::kError);
    CHECK(out.text.find("not supported by ddprun") != std::string::npos);
    CHECK(out.text.find(instead) != std::string::npos);
    CHECK(out.text.find('\n') == std::string::npos);
  }
  // torchrun has no PET_ form of these two: a stray variable is not read.
  CHECK(ok({"train.py"}, {{"PET_LOGS_SPECS", "x"}, {"PET_NUMA_BINDING", "bogus"}})
            .numa_binding.empty());
}

TEST_CASE("duplicate filters: torchrun's comma list, ',,' a comma inside a filter", "[cli]") {
  const LaunchConfig c = ok({"--duplicate-stdout-filters=apple,orange,,pie,,",
                             "--duplicate_stderr_filters", "err", "train.py"});
  CHECK(c.duplicate_stdout_filters == std::vector<std::string>{"apple", "orange,pie,"});
  CHECK(c.duplicate_stderr_filters == std::vector<std::string>{"err"});
  CHECK(ok({"--duplicate-stdout-filters=", "train.py"}).duplicate_stdout_filters.empty());
  CHECK(ok({"--duplicate-stdout-filters=a,,,b", "train.py"}).duplicate_stdout_filters ==
        std::vector<std::string>{"a,", "b"});
}

TEST_CASE("flags in both spellings", "[cli]") {
  CHECK(ok({"--no-python", "/bin/true"}).entry == EntryKind::kExecutable);
  CHECK(ok({"--no_python", "/bin/true"}).entry == EntryKind::kExecutable);
  CHECK(ok({"-m", "pkg.mod"}).entry == EntryKind::kPythonModule);
  CHECK(ok({"--module", "pkg.mod"}).entry == EntryKind::kPythonModule);
  CHECK(ok({"--run-path", "train.py"}).run_path);
  CHECK(ok({"--run_path", "train.py"}).run_path);
  CHECK(ok({"--virtual-local-rank", "train.py"}).virtual_local_rank);
  CHECK(ok({"--virtual_local_rank", "train.py"}).virtual_local_rank);
  CHECK(ok({"--legacy-launch", "train.py"}).passes_local_rank_arg());
  CHECK(!ok({"--legacy_launch", "--use_env", "train.py"}).passes_local_rank_arg());
  CHECK(!ok({"--legacy-launch", "--use-env", "train.py"}).passes_local_rank_arg());
  const LaunchConfig s = ok({"--standalone", "--rdzv-backend=static", "train.py"});
  CHECK(s.rdzv_backend == Backend::kC10d);
  CHECK(s.rdzv_endpoint == "localhost:0");
}

TEST_CASE("everything after the script belongs to the script", "[cli]") {
  const LaunchConfig c = ok({"--nproc-per-node=2", "train.py", "--nproc-per-node", "5", "--help",
                             "-m", "--lr=0.1", "${local_rank}", "--", "x"});
  CHECK(c.nproc_per_node == 2);
  CHECK(c.training_script == "train.py");
  CHECK(c.script_args == std::vector<std::string>{"--nproc-per-node", "5", "--help", "-m",
                                                  "--lr=0.1", "${local_rank}", "--", "x"});
  CHECK(ok({"--", "train.py", "a"}).script_args == std::vector<std::string>{"a"});
  // As argparse in torchrun 2.14 (Python 3.14): one "--" is dropped, before the script or
  // right after it.
  CHECK(ok({"train.py", "--", "--lr", "0.1"}).script_args ==
        std::vector<std::string>{"--lr", "0.1"});
  CHECK(ok({"--", "train.py", "--", "--lr"}).script_args == std::vector<std::string>{"--", "--lr"});
  CHECK(ok({"train.py", "a", "--", "x"}).script_args == std::vector<std::string>{"a", "--", "x"});
}

TEST_CASE("PET_ environment fallbacks - the command line wins", "[cli]") {
  const std::map<std::string, std::string> env = {
      {"PET_NPROC_PER_NODE", "3"},     {"PET_MAX_RESTARTS", "2"}, {"PET_NNODES", "1:1"},
      {"PET_RDZV_ID", "fromenv"},      {"PET_STANDALONE", "0"},   {"PET_NO_PYTHON", "0"},
      {"PET_VIRTUAL_LOCAL_RANK", "1"}, {"PET_TEE", "3"}};
  const LaunchConfig c = ok({"train.py"}, env);
  CHECK(c.nproc_per_node == 3);
  CHECK(c.max_restarts == 2);
  CHECK(c.rdzv_id == "fromenv");
  CHECK(c.virtual_local_rank);
  CHECK(c.tee.for_rank(1) == 3);
  CHECK(c.entry == EntryKind::kPythonScript);
  const LaunchConfig d = ok({"--nproc_per_node=4", "--max-restarts", "0", "train.py"}, env);
  CHECK(d.nproc_per_node == 4);
  CHECK(d.max_restarts == 0);
  CHECK(ok({"train.py"}, {{"PET_STANDALONE", "7"}, {"PET_RDZV_ID", "x"}}).rdzv_id != "x");
  // A PET_ flag is read as Python's int() reads it: blanks around, a leading '+'.
  CHECK(ok({"train.py"}, {{"PET_VIRTUAL_LOCAL_RANK", " +1 "}}).virtual_local_rank);
  CHECK_FALSE(ok({"train.py"}, {{"PET_VIRTUAL_LOCAL_RANK", "0"}}).virtual_local_rank);
  for (const char* bad : {"yes", "1x", "", "+", "0x1"}) {
    const CliOutcome out = parse({"train.py"}, {{"PET_VIRTUAL_LOCAL_RANK", bad}});
    CAPTURE(bad, out.text);
    CHECK(out.kind == CliOutcome::Kind::kError);
    CHECK(out.text.find("PET_VIRTUAL_LOCAL_RANK=" + std::string(bad) +
                        ": expected an integer (0 or 1)") != std::string::npos);
  }
}

TEST_CASE("torchrun's own environment knobs", "[cli]") {
  const LaunchConfig c = ok({"train.py"}, {{"PYTHON_EXEC", "/usr/bin/python3"},
                                           {"TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGUSR2,SIGTERM"},
                                           {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "3"}});
  CHECK(c.python_exec == "/usr/bin/python3");
  // PYTHON_EXEC wins over the python of the environment ddprun is installed in.
  HostFacts venv = facts({{"PYTHON_EXEC", "/usr/bin/python3"}});
  venv.launcher_python = "/opt/venv/bin/python3";
  CHECK(parse_command_line({"train.py"}, venv).config.python_exec == "/usr/bin/python3");
  venv.env.clear();
  CHECK(parse_command_line({"train.py"}, venv).config.python_exec == "/opt/venv/bin/python3");
  CHECK(c.signals_to_handle == std::vector<int>{SIGUSR2, SIGTERM});
  CHECK(c.signals_to_handle_text == "SIGUSR2,SIGTERM");  // the workers' copy, as given
  CHECK(c.shutdown_timeout_s == 3);
  const LaunchConfig d =
      ok({"--shutdown-timeout=9", "--signals-to-handle=SIGINT", "train.py"},
         {{"TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGUSR2"}, {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "3"}});
  CHECK(d.shutdown_timeout_s == 9);
  CHECK(d.signals_to_handle == std::vector<int>{SIGINT});
  CHECK(d.signals_to_handle_text == "SIGINT");
}

TEST_CASE("log line prefix: the option or PET_ form wins over torchrun's variable", "[cli]") {
  const std::map<std::string, std::string> env = {
      {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "env:$rank"}};
  CHECK(ok({"train.py"}, env).log_line_prefix_template == "env:$rank");
  CHECK(ok({"--log-line-prefix-template=cli:$rank", "train.py"}, env).log_line_prefix_template ==
        "cli:$rank");
  auto pet = env;
  pet["PET_LOG_LINE_PREFIX_TEMPLATE"] = "pet:$rank";
  CHECK(ok({"train.py"}, pet).log_line_prefix_template == "pet:$rank");
  // As torchrun's `args.log_line_prefix_template or os.getenv(...)`: empty is not given.
  CHECK(ok({"--log-line-prefix-template=", "train.py"}, env).log_line_prefix_template ==
        "env:$rank");
  CHECK(ok({"train.py"}).log_line_prefix_template.empty());
}

TEST_CASE("a bracketed IPv6 --master-addr is the address without brackets", "[cli]") {
  CHECK(*ok({"--master-addr", "[::1]", "--master-port=29555", "train.py"}).master_addr == "::1");
  CHECK(*ok({"--master_addr=[0:0:0:0:0:0:0:1]", "train.py"}).master_addr == "0:0:0:0:0:0:0:1");
  CHECK(*ok({"--master-addr=::1", "train.py"}).master_addr == "::1");
}

TEST_CASE("a typo in --signals-to-handle warns and the other signals are handled", "[cli]") {
  // torchrun logs "Failed to register signal handler for SIGTEMR" and goes on.
  const LaunchConfig c = ok({"--signals-to-handle=SIGTEMR,SIGUSR1,,SIGINT", "train.py"});
  CHECK(c.signals_to_handle == std::vector<int>{SIGUSR1, SIGINT});
  CHECK(c.signals_to_handle_text == "SIGTEMR,SIGUSR1,,SIGINT");  // the workers' copy
  REQUIRE(c.warnings.size() == 2);
  CHECK(c.warnings[0].find("--signals-to-handle: unknown signal 'SIGTEMR'") == 0);
  const LaunchConfig e = ok({"train.py"}, {{"TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGBOGUS"}});
  CHECK(e.signals_to_handle.empty());
  CHECK(e.warnings.size() == 1);
  CHECK(ok({"train.py"}).warnings.empty());
}

TEST_CASE("value forms: nnodes, nproc, redirects, tee, rdzv-conf", "[cli]") {
  CHECK(ok({"--nnodes=2:4", "--rdzv-backend=c10d", "train.py"}).max_nodes == 4);
  CHECK(ok({"--nnodes=3", "train.py"}).min_nodes == 3);
  CHECK(ok({"--nproc-per-node=cpu", "train.py"}).nproc_per_node == 2);
  CHECK(ok({"--nproc-per-node=auto", "train.py"}).nproc_per_node == 2);
  const LaunchConfig t = ok({"-t", "0:1,1:3", "-r", "2", "train.py"});
  CHECK(t.tee.for_rank(0) == 1);
  CHECK(t.tee.for_rank(1) == 3);
  CHECK(t.tee.for_rank(2) == 0);
  CHECK(t.redirects.for_rank(5) == 2);
  // Parsed once, here, into typed values (rendezvous/rdzv_conf.h has the value tests).
  const LaunchConfig r = ok({"--rdzv-conf", "a=1, join_timeout = 2.5 ,c=", "train.py"});
  CHECK(r.rdzv_conf.join_timeout == std::chrono::milliseconds(2500));
  CHECK(r.rdzv_conf.keys == std::vector<std::string>{"a", "join_timeout", "c"});
  CHECK(ok({"--nnodes=2", "--nnodes=1", "train.py"}).max_nodes == 1);  // last one wins
}

TEST_CASE("bad input: one line naming the flag or file", "[cli]") {
  struct Row {
    std::vector<std::string> args;
    std::string needle;
    std::map<std::string, std::string> env = {};
  };
  const std::vector<Row> rows = {
      {{"--bogus", "train.py"}, "--bogus"},
      {{"--bogus=3", "train.py"}, "--bogus"},
      {{"--nnodes=0", "train.py"}, "--nnodes"},
      {{"--nnodes=3:2", "train.py"}, "--nnodes"},
      {{"--nnodes=a", "train.py"}, "--nnodes"},
      {{"--nnodes=1:2:3", "train.py"}, "--nnodes"},
      {{"--nproc-per-node=x", "train.py"}, "--nproc-per-node"},
      {{"--nproc-per-node=0", "train.py"}, "--nproc-per-node"},
      {{"--nproc-per-node=-2", "train.py"}, "--nproc-per-node"},
      {{"--nproc-per-node=gpu", "train.py"}, "--nproc-per-node=gpu"},
      {{"--max-restarts=-1", "train.py"}, "--max-restarts"},
      {{"--max-restarts=two", "train.py"}, "--max-restarts"},
      {{"--rdzv-conf=a=1,oops", "train.py"}, "'oops'"},
      {{"--rdzv-conf==1", "train.py"}, "--rdzv-conf"},
      {{"--rdzv-backend=zk", "train.py"}, "--rdzv-backend"},
      {{"--rdzv-backend=etcd3", "train.py"}, "supported: static, c10d, etcd-v3"},
      {{"--rdzv-conf=join_timeout=soon", "train.py"}, "join_timeout='soon'"},
      {{"--master-port=70000", "train.py"}, "--master-port"},
      {{"--redirects=4", "train.py"}, "--redirects"},
      {{"--tee=0:x", "train.py"}, "--tee"},
      {{"--signals-to-handle=SIGTERM,SIGKILL", "train.py"}, "--signals-to-handle: SIGKILL"},
      {{"--shutdown-timeout=-3", "train.py"}, "--shutdown-timeout"},
      {{"--stall-timeout=soon", "train.py"}, "--stall-timeout: expected a non-negative number"},
      {{"--straggler-threshold=-1", "train.py"}, "--straggler-threshold: expected a non-negative"},
      {{"--straggler-window=0.5", "train.py"}, "--straggler-window: at least 1 second"},
      {{"--straggler-window=often", "train.py"}, "--straggler-window: expected a non-negative"},
      {{"--start-method=thread", "train.py"}, "--start-method"},
      {{"--preflight-slow-factor=0", "train.py"}, "--preflight-slow-factor: '0' is not"},
      {{"--preflight-slow-factor=-2", "train.py"}, "--preflight-slow-factor: '-2' is not"},
      {{"--preflight-slow-factor=1", "train.py"}, "a number above 1"},
      {{"--preflight-slow-factor=fast", "train.py"}, "--preflight-slow-factor: 'fast'"},
      {{"--preflight-slow-factor=nan", "train.py"}, "--preflight-slow-factor: 'nan'"},
      {{"--preflight-timeout=0", "train.py"}, "--preflight-timeout: at least 1 second"},
      {{"--preflight-timeout=-1", "train.py"}, "--preflight-timeout"},
      {{"--preflight-timeout=soon", "train.py"}, "--preflight-timeout"},
      {{"--blocklist=", "train.py"}, "--blocklist: an empty path"},
      {{"--blocklist=/", "train.py"}, "--blocklist /: not a regular file"},
      {{"--blocklist=/etc/passwd/x", "train.py"}, "--blocklist /etc/passwd/x: Not a directory"},
      {{"train.py"},
       "PET_PREFLIGHT_SLOW_FACTOR (--preflight-slow-factor)",
       {{"PET_PREFLIGHT_SLOW_FACTOR", "0.5"}}},
      {{"--numa-binding=", "train.py"}, "--numa-binding: invalid choice ''"},
      {{"--numa_binding=", "train.py"}, "--numa-binding: invalid choice ''"},
      {{"--numa=", "train.py"}, "--numa-binding: invalid choice ''"},
      {{"--numa-binding", "", "train.py"}, "--numa-binding: invalid choice ''"},
      {{"--numa-binding=cores", "train.py"}, "--numa-binding: invalid choice 'cores'"},
      {{"--local-ranks-filter=a", "train.py"}, "--local-ranks-filter"},
      {{}, "training_script"},
      {{"--nproc-per-node=2"}, "training_script"},
      {{"missing.py"}, "missing.py"},
      {{"--no-python", "-m", "train.py"}, "--no-python"},
      {{"--legacy-launch", "--no-python", "/bin/true"}, "--use-env"},
      {{"--nnodes"}, "--nnodes"},
      {{"--standalone", "--nnodes=2", "train.py"}, "--standalone is a single-node job"},
      {{"train.py"}, "PET_STANDALONE", {{"PET_STANDALONE", "yes"}}},
      {{"train.py"}, "PET_NNODES (--nnodes): invalid value '0'", {{"PET_NNODES", "0"}}},
      {{"train.py"}, "PET_MAX_RESTARTS (--max-restarts): ", {{"PET_MAX_RESTARTS", "x"}}},
      {{"train.py"}, "PET_NPROC_PER_NODE (--nproc-per-node): ", {{"PET_NPROC_PER_NODE", "0"}}},
      {{"--nnodes=0", "train.py"}, "--nnodes: invalid", {{"PET_MAX_RESTARTS", "1"}}},
      {{"--virtual-local-rank", "--nproc-per-node=3", "train.py"},
       "--virtual-local-rank: 3 workers per node but CUDA_VISIBLE_DEVICES='5,7' lists 2",
       {{"CUDA_VISIBLE_DEVICES", "5,7"}}},
      {{"--virtual-local-rank", "--nproc-per-node=1", "train.py"},
       "--virtual-local-rank",
       {{"CUDA_VISIBLE_DEVICES", ""}}},
  };
  for (const auto& row : rows) {
    const CliOutcome out = parse(row.args, row.env);
    CAPTURE(row.args, out.text);
    CHECK(out.kind == CliOutcome::Kind::kError);
    CHECK(out.text.find(row.needle) != std::string::npos);
    CHECK(out.text.find('\n') == std::string::npos);
    CHECK(!out.text.empty());
  }
}

TEST_CASE("preflight options: --preflight and its settings, PET_ forms, --blocklist read at start",
          "[cli]") {
  const LaunchConfig off = ok({"train.py"});
  CHECK_FALSE(off.preflight);
  CHECK(off.preflight_slow_factor == 3);
  CHECK(off.preflight_timeout_s == 120);
  CHECK(off.blocklist_file.empty());
  const LaunchConfig on =
      ok({"--preflight", "--preflight-slow-factor=1.5", "--preflight_timeout=30", "train.py"});
  CHECK(on.preflight);
  CHECK(on.preflight_slow_factor == 1.5);
  CHECK(on.preflight_timeout_s == 30);
  CHECK(ok({"train.py"}, {{"PET_PREFLIGHT", "1"}, {"PET_PREFLIGHT_SLOW_FACTOR", " 4 "}})
            .preflight_slow_factor == 4);
  ddprun::test::TempDir dir;
  // A file that does not exist yet is an empty block-list (the check writes it).
  CHECK(ok({"--blocklist", dir.str() + "/new", "train.py"}).blocklist_file == dir.str() + "/new");
  const std::string listed = dir.write("bad-hosts", "# hosts\ngpu-07 2026-11-29T01:00:00Z slow\n");
  CHECK(ok({"--blocklist", listed, "train.py"}).blocklist_file == listed);
}

TEST_CASE("straggler options: --exclude-stragglers needs the ranking on", "[cli]") {
  CHECK_FALSE(ok({"--stall-timeout=60", "train.py"}).exclude_stragglers);
  CHECK(ok({"--stall-timeout=60", "--exclude-stragglers", "train.py"}).exclude_stragglers);
  CHECK(
      ok({"--stall_timeout=60", "train.py"}, {{"PET_EXCLUDE_STRAGGLERS", "1"}}).exclude_stragglers);
  const CliOutcome off = parse({"--exclude-stragglers", "train.py"});
  CHECK(off.kind == CliOutcome::Kind::kError);
  CHECK_THAT(off.text, Catch::Contains("--exclude-stragglers: needs the straggler ranking"));
  const CliOutcome zero =
      parse({"--stall-timeout=60", "--straggler-threshold=0", "--exclude-stragglers", "train.py"});
  CHECK(zero.kind == CliOutcome::Kind::kError);
  CHECK_THAT(zero.text, Catch::Contains("--straggler-threshold above 0"));
}

TEST_CASE("an empty value after '=' is the value, never the next argument", "[cli]") {
  // CLI11 alone would take "train.py" as the value of "--rdzv-id=".
  const LaunchConfig c = ok({"--rdzv-id=", "--local-addr=", "--role=x", "train.py", "a"});
  CHECK(c.training_script == "train.py");
  CHECK(c.script_args == std::vector<std::string>{"a"});
  CHECK(c.local_addr == std::optional<std::string>(""));
  CHECK(ok({"--rdzv_i=", "train.py"}).training_script == "train.py");
  for (const char* value : {"node", "socket", "exclusive", "core-complex"}) {
    CHECK(ok({std::string("--numa-binding=") + value, "train.py"}).numa_binding == value);
  }
}

TEST_CASE("virtual local rank: as many workers as visible devices is fine", "[cli]") {
  CHECK(ok({"--virtual-local-rank", "--nproc-per-node=2", "train.py"},
           {{"CUDA_VISIBLE_DEVICES", "5,7"}})
            .virtual_local_rank);
  CHECK(ok({"--virtual-local-rank", "--nproc-per-node=3", "train.py"}).nproc_per_node == 3);
}

TEST_CASE("modules and --no-python programs need not be files here", "[cli]") {
  CHECK(ok({"-m", "not.a.file"}).training_script == "not.a.file");
  CHECK(ok({"--no-python", "echo", "hi"}).script_args == std::vector<std::string>{"hi"});
}

TEST_CASE("help and version print and exit 0", "[cli]") {
  const CliOutcome help = parse({"--help"});
  REQUIRE(help.kind == CliOutcome::Kind::kPrint);
  for (const char* needle :
       {"--nproc-per-node", "--nproc_per_node", "--rdzv-endpoint", "--max-restarts", "--standalone",
        "-t", "--tee", "training_script", "Rendezvous related arguments", "PET_"}) {
    CAPTURE(needle);
    CHECK(help.text.find(needle) != std::string::npos);
  }
  const CliOutcome version = parse({"--version"});
  REQUIRE(version.kind == CliOutcome::Kind::kPrint);
  CHECK(version.text.rfind("ddprun ", 0) == 0);
  // torchrun 2.14's --print-completion: bash and zsh (the installed scripts; the
  // integration test prints them), tcsh and others refused in one line.
  const CliOutcome tcsh = parse({"--print-completion", "tcsh"});
  CHECK(tcsh.kind == CliOutcome::Kind::kError);
  CHECK(tcsh.text == "--print-completion tcsh: ddprun has bash and zsh completion only");
  const CliOutcome fish = parse({"--print_completion=fish"});
  CHECK(fish.kind == CliOutcome::Kind::kError);
  CHECK(fish.text.find("--print-completion") != std::string::npos);
}

TEST_CASE("unambiguous prefixes of long options, as argparse allows", "[cli]") {
  CHECK(ok({"--nproc", "2", "train.py"}).nproc_per_node == 2);
  CHECK(ok({"--nproc_per=3", "train.py"}).nproc_per_node == 3);
  CHECK(ok({"--max-rest=2", "train.py"}).max_restarts == 2);
  CHECK(ok({"--standal", "train.py"}).standalone);
  CHECK(ok({"--nnodes", "1", "--nproc", "2", "train.py", "--nproc", "9"}).script_args ==
        std::vector<std::string>{"--nproc", "9"});
  CHECK(ok({"-t", "3", "--nproc", "2", "train.py"}).nproc_per_node == 2);
  // An option's value is never taken for an option name.
  CHECK(ok({"--role", "--nproc", "train.py"}).role == "--nproc");
  const CliOutcome amb = parse({"--rdzv", "x", "train.py"});
  CHECK(amb.kind == CliOutcome::Kind::kError);
  CHECK(amb.text.find("ambiguous option: --rdzv") != std::string::npos);
  CHECK(parse({"--m", "train.py"}).kind == CliOutcome::Kind::kError);  // --master-*, --max-*...
}

TEST_CASE("watchdogs: --stall-timeout, PET_STALL_TIMEOUT and the file timer's variables", "[cli]") {
  CHECK(ok({"train.py"}).stall_timeout_s == 0);
  CHECK(ok({"--stall-timeout=30", "train.py"}).stall_timeout_s == 30);
  CHECK(ok({"--stall_timeout", "2.5", "train.py"}).stall_timeout_s == 2.5);
  CHECK(ok({"train.py"}, {{"PET_STALL_TIMEOUT", "7"}}).stall_timeout_s == 7);
  CHECK(ok({"--stall-timeout=1", "train.py"}, {{"PET_STALL_TIMEOUT", "7"}}).stall_timeout_s == 1);
  // The straggler ranking's threshold and window.
  CHECK(ok({"train.py"}).straggler_threshold_s == 0.05);
  CHECK(ok({"train.py"}).straggler_window_s == 10);
  CHECK(ok({"--straggler-threshold=0", "train.py"}).straggler_threshold_s == 0);
  CHECK(ok({"train.py"}, {{"PET_STRAGGLER_WINDOW", "30"}}).straggler_window_s == 30);
  // torchrun's file timer: on only with the value "1"; its own path, else /tmp/watchdog_timer_*.
  CHECK(ok({"train.py"}).file_timer_path.empty());
  CHECK(ok({"train.py"}, {{"TORCHELASTIC_ENABLE_FILE_TIMER", "0"}}).file_timer_path.empty());
  CHECK(ok({"train.py"},
           {{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}, {"TORCHELASTIC_TIMER_FILE", "/run/x.fifo"}})
            .file_timer_path == "/run/x.fifo");
  const std::string path =
      ok({"train.py"}, {{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}}).file_timer_path;
  CHECK(path.rfind("/tmp/watchdog_timer_", 0) == 0);
  CHECK(path.size() == std::string("/tmp/watchdog_timer_").size() + 36);
  // In TMPDIR (Python's tempfile.gettempdir()), unless it is gone: then /tmp.
  ddprun::test::TempDir tmp;
  const std::string in_tmpdir =
      ok({"train.py"}, {{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}, {"TMPDIR", tmp.path.string()}})
          .file_timer_path;
  CHECK(in_tmpdir.rfind(tmp.path.string() + "/watchdog_timer_", 0) == 0);
  CHECK(ok({"train.py"}, {{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}, {"TMPDIR", "/nonexistent"}})
            .file_timer_path.rfind("/tmp/watchdog_timer_", 0) == 0);
  const CliOutcome empty = parse(
      {"train.py"}, {{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}, {"TORCHELASTIC_TIMER_FILE", ""}});
  CHECK(empty.kind == CliOutcome::Kind::kError);
  CHECK(empty.text.find("TORCHELASTIC_TIMER_FILE is empty") != std::string::npos);
}
