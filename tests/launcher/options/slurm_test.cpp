// Slurm: the compressed host list parser, and what an srun step's SLURM_* environment
// sets (under what the command line and PET_* give), through parse_command_line.
#include <catch2/catch.hpp>

#include "launcher/options/cli.h"
#include "launcher/options/slurm_env.h"
#include "launcher/options/slurm_hostlist.h"

using namespace ddprun::launcher;
using ddprun::rdzv::Backend;
using Env = std::map<std::string, std::string>;
using Hosts = std::vector<std::string>;

TEST_CASE("Slurm host lists expand as Slurm writes them", "[slurm]") {
  struct Row {
    const char* list;
    Hosts hosts;
  };
  const std::vector<Row> rows = {
      {"n1", {"n1"}},
      {"node-01.cluster", {"node-01.cluster"}},
      {"a1,b2", {"a1", "b2"}},
      {"n[01-04,07]", {"n01", "n02", "n03", "n04", "n07"}},
      {"a1,b[2-3]", {"a1", "b2", "b3"}},
      {"n[8-11]", {"n8", "n9", "n10", "n11"}},           // no padding: widths grow
      {"n[098-101]", {"n098", "n099", "n100", "n101"}},  // padded to the lower bound
      {"n[0-2]", {"n0", "n1", "n2"}},                    // a lone 0 is not padding
      {"n[5]", {"n5"}},
      {"gpu[1-2]-ib", {"gpu1-ib", "gpu2-ib"}},             // text after the bracket
      {"r[1-2]n[1-2]", {"r1n1", "r1n2", "r2n1", "r2n2"}},  // product, first slowest
      {"x[3,1],y[2-3],z", {"x3", "x1", "y2", "y3", "z"}},  // Slurm's order kept
      {"10.0.0.[1-2]", {"10.0.0.1", "10.0.0.2"}},
  };
  for (const auto& row : rows) {
    INFO(row.list);
    CHECK(expand_hostlist(row.list) == row.hosts);
  }
}

TEST_CASE("bad host lists get one line naming the fault", "[slurm]") {
  struct Row {
    const char* list;
    const char* fault;
  };
  const std::vector<Row> rows = {
      {"", "empty"},
      {"n[1-2", "'[' without ']'"},
      {"n1-2]", "']' without '['"},
      {"n[[1]]", "nested"},
      {"n[]", "empty '[]'"},
      {"n[a-b]", "'a-b' is not a number"},
      {"n[1-]", "'1-' is not a number"},
      {"n[3-1]", "descending"},
      {"a,,b", "empty host name"},
      {"a,", "empty host name"},
      {"a b", "white space"},
      {"n[1-99999999999]", "more than"},
      {"r[1-2000]n[1-2000]", "more than"},
  };
  for (const auto& row : rows) {
    INFO(row.list);
    try {
      expand_hostlist(row.list);
      FAIL("accepted");
    } catch (const HostlistError& e) {
      const std::string what = e.what();
      CHECK(what.find(row.fault) != std::string::npos);
      CHECK(what.find('\n') == std::string::npos);
    }
  }
  CHECK(expand_hostlist("n[1-4]", 4).size() == 4);
  CHECK_THROWS_AS(expand_hostlist("n[1-5]", 4), HostlistError);
  CHECK_THROWS_AS(expand_hostlist("a[1-3],b[1-2]", 4), HostlistError);
}

TEST_CASE("the Slurm port stays in its documented range and separates steps", "[slurm]") {
  CHECK(slurm_port(0, 0) == kSlurmPortBase);
  CHECK(slurm_port(1, 0) == kSlurmPortBase + 8);
  CHECK(slurm_port(1, 1) == kSlurmPortBase + 9);
  CHECK(slurm_port(250, 0) == kSlurmPortBase);  // 8 * 250 wraps the span
  for (const unsigned long long job : {0ULL, 7ULL, 123456ULL, 4294967295ULL, ~0ULL}) {
    for (const unsigned long long step : {0ULL, 1ULL, 7ULL, 4294967200ULL}) {
      const int p = slurm_port(job, step);
      CHECK(p >= kSlurmPortBase);
      CHECK(p < kSlurmPortBase + kSlurmPortSpan);
    }
  }
  CHECK(kSlurmPortBase + kSlurmPortSpan <= 32768);  // below Linux's ephemeral ports
}

namespace {

// The environment srun gives task `node_id` of `srun -N4 --ntasks-per-node=1` in job 4242.
Env srun_env(int node_id = 2) {
  return {{"SLURM_JOB_ID", "4242"},
          {"SLURM_JOBID", "4242"},
          {"SLURM_STEP_ID", "3"},
          {"SLURM_STEPID", "3"},
          {"SLURM_NNODES", "4"},
          {"SLURM_STEP_NUM_NODES", "4"},
          {"SLURM_NODEID", std::to_string(node_id)},
          {"SLURM_JOB_NODELIST", "n[01-04,07]"},
          {"SLURM_STEP_NODELIST", "n[02-04,07]"},
          {"SLURM_NODELIST", "n[02-04,07]"},
          {"SLURM_NTASKS", "4"},
          {"SLURM_STEP_NUM_TASKS", "4"},
          {"SLURM_STEP_TASKS_PER_NODE", "1(x4)"},
          {"SLURM_PROCID", std::to_string(node_id)},
          {"SLURM_LOCALID", "0"}};
}

HostFacts facts(Env env) {
  HostFacts h;
  h.env = std::move(env);
  h.cpu_count = 2;
  h.file_exists = [](const std::string& p) { return p == "train.py"; };
  return h;
}

CliOutcome parse(std::vector<std::string> args, Env env) {
  return parse_command_line(args, facts(std::move(env)));
}

LaunchConfig ok(std::vector<std::string> args, Env env, std::string* notice = nullptr) {
  const CliOutcome out = parse(std::move(args), std::move(env));
  INFO(out.text);
  REQUIRE(out.kind == CliOutcome::Kind::kRun);
  if (notice) *notice = out.slurm.text;
  return out.config;
}

std::string error(std::vector<std::string> args, Env env) {
  const CliOutcome out = parse(std::move(args), std::move(env));
  REQUIRE(out.kind == CliOutcome::Kind::kError);
  CHECK(out.text.find('\n') == std::string::npos);
  return out.text;
}

}  // namespace

TEST_CASE("a plain srun step needs no flag", "[slurm]") {
  std::string notice;
  const LaunchConfig c = ok({"train.py"}, srun_env(2), &notice);
  CHECK(c.min_nodes == 4);
  CHECK(c.max_nodes == 4);
  CHECK(c.node_rank == 2);
  CHECK(c.rdzv_backend == Backend::kC10d);
  CHECK(c.rdzv_endpoint == "n02:" + std::to_string(slurm_port(4242, 3)));
  CHECK(c.rdzv_id == "slurm-4242.3");
  CHECK(c.nproc_per_node == 1);
  CHECK(notice ==
        "Slurm job step 4242.3: from SLURM_*: --nnodes=4 --node-rank=2 --rdzv-backend=c10d "
        "--rdzv-endpoint=n02:" +
            std::to_string(slurm_port(4242, 3)) +
            " --rdzv-id=slurm-4242.3 --nproc-per-node=1 (no GPUs from Slurm) (--no-slurm "
            "turns this off; docs/slurm.md)");
  // Every node of the step agrees on everything but its node rank.
  for (int n = 0; n < 4; ++n) {
    const LaunchConfig other = ok({"train.py"}, srun_env(n));
    CHECK(other.node_rank == n);
    CHECK(other.rdzv_endpoint == c.rdzv_endpoint);
    CHECK(other.rdzv_id == c.rdzv_id);
  }
}

TEST_CASE("nproc comes from the GPUs Slurm gave the step", "[slurm]") {
  struct Row {
    Env extra;
    int nproc;
  };
  const std::vector<Row> rows = {
      {{{"SLURM_GPUS_ON_NODE", "4"}, {"SLURM_JOB_GPUS", "0,1"}}, 4},
      {{{"SLURM_STEP_GPUS", "2,3"}, {"SLURM_JOB_GPUS", "0,1,2,3"}}, 2},
      {{{"SLURM_JOB_GPUS", "0,1,2"}}, 3},
      {{}, 1},
  };
  for (const auto& row : rows) {
    Env env = srun_env();
    env.insert(row.extra.begin(), row.extra.end());
    CHECK(ok({"train.py"}, env).nproc_per_node == row.nproc);
  }
  Env env = srun_env();
  env["SLURM_GPUS_ON_NODE"] = "two";
  CHECK(error({"train.py"}, env).find("SLURM_GPUS_ON_NODE='two' is not a number") == 0);
}

TEST_CASE("flags and PET_* override Slurm, and the notice says what was kept", "[slurm]") {
  std::string notice;
  const LaunchConfig c = ok({"--nnodes=2:4", "--nproc-per-node=3", "--rdzv-id=mine", "train.py"},
                            srun_env(1), &notice);
  CHECK(c.min_nodes == 2);
  CHECK(c.max_nodes == 4);
  CHECK(c.nproc_per_node == 3);
  CHECK(c.rdzv_id == "mine");
  CHECK(c.node_rank == 1);
  CHECK(notice.find("--nnodes=") == std::string::npos);
  CHECK(notice.find("; given, kept: --nnodes --rdzv-id --nproc-per-node") != std::string::npos);

  Env env = srun_env(1);
  env["PET_RDZV_ENDPOINT"] = "head:1234";
  env["PET_NODE_RANK"] = "3";
  const LaunchConfig p = ok({"train.py"}, env);
  CHECK(p.rdzv_endpoint == "head:1234");
  CHECK(p.node_rank == 3);
  CHECK(p.rdzv_backend == Backend::kC10d);

  env = srun_env(1);
  env["DDPRUN_SLURM_PORT"] = "31000";
  CHECK(ok({"train.py"}, env).rdzv_endpoint == "n02:31000");
  env["DDPRUN_SLURM_PORT"] = "70000";
  CHECK(error({"train.py"}, env).find("DDPRUN_SLURM_PORT='70000'") == 0);

  // The static backend asked for: Slurm gives the master address and port instead.
  const LaunchConfig s = ok({"--rdzv-backend=static", "train.py"}, srun_env(1));
  CHECK(s.rdzv_backend == Backend::kStatic);
  CHECK(s.master_addr == "n02");
  CHECK(s.master_port == slurm_port(4242, 3));
  CHECK(s.rdzv_endpoint.empty());
  const LaunchConfig m = ok({"--master-port=29511", "train.py"}, srun_env(0));
  CHECK(m.rdzv_backend == Backend::kStatic);
  CHECK(m.master_addr == "n02");
  CHECK(m.master_port == 29511);
}

TEST_CASE("Slurm is left out by --no-slurm, --standalone and shells outside srun", "[slurm]") {
  std::string notice;
  for (const auto& args : {std::vector<std::string>{"--no-slurm", "train.py"},
                           std::vector<std::string>{"--no_slurm", "train.py"}}) {
    const LaunchConfig c = ok(args, srun_env(), &notice);
    CHECK(c.max_nodes == 1);
    CHECK(!c.node_rank);
    CHECK(c.rdzv_endpoint == "localhost:0");
    CHECK(notice.empty());
  }
  Env env = srun_env();
  env["PET_NO_SLURM"] = "1";
  CHECK(ok({"train.py"}, env).max_nodes == 1);
  // --no-slurm also hides malformed SLURM_* values.
  env = srun_env();
  env["SLURM_STEP_NODELIST"] = "n[1-";
  CHECK(ok({"--no-slurm", "train.py"}, env).max_nodes == 1);

  const LaunchConfig st = ok({"--standalone", "train.py"}, srun_env(), &notice);
  CHECK(st.max_nodes == 1);
  CHECK(notice.find("--standalone: Slurm's settings are not used") == 0);

  // An salloc shell or a batch script: the job's variables, no step. Nothing is taken
  // (SLURM_NODEID there is not a step's node rank), and the note says how to use srun.
  Env shell = {{"SLURM_JOB_ID", "77"},
               {"SLURM_NNODES", "4"},
               {"SLURM_NODEID", "0"},
               {"SLURM_JOB_NODELIST", "n[1-4]"},
               {"SLURM_NODELIST", "n[1-4]"}};
  const LaunchConfig a = ok({"train.py"}, shell, &notice);
  CHECK(a.max_nodes == 1);
  CHECK(a.rdzv_endpoint == "localhost:0");
  CHECK(notice.find("SLURM_JOB_ID=77 is set but this is not an srun job step") == 0);
  for (const char* special : {"4294967294", "4294967295", "4294967291"}) {  // Slurm-internal
    shell["SLURM_STEP_ID"] = special;
    CHECK(ok({"train.py"}, shell, &notice).max_nodes == 1);
    CHECK(notice.find("is not an srun job step") != std::string::npos);
  }
  CHECK(ok({"train.py"}, Env{}, &notice).max_nodes == 1);
  CHECK(notice.empty());
}

TEST_CASE("srun with several tasks per node is refused with the fix", "[slurm]") {
  Env env = srun_env();
  env["SLURM_NTASKS"] = "8";
  env["SLURM_STEP_NUM_TASKS"] = "8";
  env["SLURM_STEP_TASKS_PER_NODE"] = "2(x4)";
  CHECK(error({"train.py"}, env) ==
        "srun started 8 tasks on 4 nodes (SLURM_STEP_NUM_TASKS=8, "
        "SLURM_STEP_TASKS_PER_NODE=2(x4)): ddprun starts a node's workers itself and must run "
        "once per node: `srun --ntasks-per-node=1 ddprun ...` (or --no-slurm; for one ddprun "
        "per task, also give --nnodes --node-rank --rdzv-backend --rdzv-endpoint --rdzv-id "
        "--nproc-per-node)");
  CHECK(ok({"--no-slurm", "train.py"}, env).max_nodes == 1);
}

TEST_CASE("every option Slurm would fill given: Slurm stands aside, whatever the tasks",
          "[slurm]") {
  Env env = srun_env();
  env["SLURM_NTASKS"] = "8";
  env["SLURM_STEP_NUM_TASKS"] = "8";
  env["SLURM_STEP_TASKS_PER_NODE"] = "2(x4)";
  const std::vector<std::string> c10d = {"--nnodes=2",          "--node-rank=1",
                                         "--rdzv-backend=c10d", "--rdzv-endpoint=head:29400",
                                         "--rdzv-id=mine",      "--nproc-per-node=2"};
  const auto with = [](std::vector<std::string> args) {
    args.emplace_back("train.py");
    return args;
  };
  std::string notice;
  const LaunchConfig c = ok(with(c10d), env, &notice);
  CHECK(c.max_nodes == 2);
  CHECK(c.node_rank == 1);
  CHECK(c.rdzv_endpoint == "head:29400");
  CHECK(notice.find("nothing taken from SLURM_*") != std::string::npos);
  // Static: the master address and port instead of the endpoint; etcd: no endpoint filled.
  CHECK(ok({"--nnodes=2", "--node-rank=0", "--master-addr=head", "--master-port=29511",
            "--rdzv-id=mine", "--nproc-per-node=1", "train.py"},
           env)
            .master_addr == "head");
  // One option left to Slurm (each in turn): the step is refused as before.
  for (std::size_t i = 0; i < c10d.size(); ++i) {
    std::vector<std::string> args = c10d;
    args.erase(args.begin() + static_cast<std::ptrdiff_t>(i));
    CAPTURE(c10d[i]);
    CHECK(error(with(args), env).find("srun started 8 tasks on 4 nodes") == 0);
  }
}

TEST_CASE("one launcher per GPU with the static backend: Slurm stands aside, no --rdzv-id",
          "[slurm]") {
  // Task 3 of `srun -N2 --ntasks-per-node=2 --gpus-per-node=2 ddprun --nproc-per-node 1
  // --nnodes 4 --node-rank $SLURM_PROCID --master-addr n02 --master-port 29511 train.py`:
  // torchrun's static launch, which gives no --rdzv-id (issue 31 item 3).
  Env env = srun_env(1);
  env["SLURM_NNODES"] = env["SLURM_STEP_NUM_NODES"] = "2";
  env["SLURM_STEP_NODELIST"] = env["SLURM_NODELIST"] = "n[02-03]";
  env["SLURM_NTASKS"] = env["SLURM_STEP_NUM_TASKS"] = "4";
  env["SLURM_STEP_TASKS_PER_NODE"] = "2(x2)";
  env["SLURM_PROCID"] = "3";
  env["SLURM_LOCALID"] = "1";
  env["SLURM_GPUS_ON_NODE"] = "2";
  const std::vector<std::string> per_gpu = {"--nproc-per-node", "1",    "--nnodes",      "4",
                                            "--node-rank",      "3",    "--master-addr", "n02",
                                            "--master-port",    "29511"};
  const auto with = [](std::vector<std::string> args) {
    args.emplace_back("train.py");
    return args;
  };
  const CliOutcome out = parse(with(per_gpu), env);
  INFO(out.text);
  REQUIRE(out.kind == CliOutcome::Kind::kRun);
  CHECK(out.config.rdzv_backend == Backend::kStatic);
  CHECK(out.config.max_nodes == 4);
  CHECK(out.config.node_rank == 3);
  CHECK(out.config.nproc_per_node == 1);
  CHECK(out.config.master_addr == "n02");
  CHECK(out.config.master_port == 29511);
  CHECK(out.config.rdzv_id == "none");  // as torchrun: nothing taken from Slurm
  CHECK(!out.slurm.taken);              // an informational line, not a warning per task
  CHECK_THAT(out.slurm.text, Catch::Contains("nothing taken from SLURM_*"));
  CHECK(out.slurm.warnings.empty());
  // The PET_* forms count as given too.
  Env pet = env;
  pet["PET_NNODES"] = "4";
  pet["PET_NODE_RANK"] = "3";
  pet["PET_MASTER_ADDR"] = "n02";
  pet["PET_MASTER_PORT"] = "29511";
  pet["PET_NPROC_PER_NODE"] = "1";
  CHECK(ok({"train.py"}, pet).node_rank == 3);
  // One of them left to Slurm (each in turn): refused, naming what is missing.
  for (std::size_t i = 0; i < per_gpu.size(); i += 2) {
    std::vector<std::string> args = per_gpu;
    args.erase(args.begin() + static_cast<std::ptrdiff_t>(i),
               args.begin() + static_cast<std::ptrdiff_t>(i) + 2);
    CAPTURE(per_gpu[i]);
    const std::string e = error(with(args), env);
    CHECK(e.find("srun started 4 tasks on 2 nodes") == 0);
    CHECK_THAT(e, Catch::EndsWith("for one ddprun per task, also give " + per_gpu[i] + ")"));
  }
}

TEST_CASE("malformed SLURM_* values get one line naming the variable", "[slurm]") {
  struct Row {
    const char* var;
    const char* value;
    const char* says;
  };
  const std::vector<Row> rows = {
      {"SLURM_STEP_NODELIST", "n[1-", "SLURM_STEP_NODELIST: host list 'n[1-': '[' without ']'"},
      {"SLURM_STEP_NODELIST", "n[1-3]",
       "SLURM_STEP_NODELIST=n[1-3] names 3 hosts but "
       "SLURM_STEP_NUM_NODES=4"},
      {"SLURM_NODEID", "4", "SLURM_NODEID='4' is not a node of the step's 4"},
      {"SLURM_NODEID", "x", "SLURM_NODEID='x' is not a node of the step's 4: give --node-rank"},
      {"SLURM_STEP_NUM_NODES", "four", "SLURM_STEP_NUM_NODES='four' is not a number"},
      {"SLURM_JOB_ID", "12a", "SLURM_JOB_ID='12a' is not a number"},
  };
  for (const auto& row : rows) {
    Env env = srun_env();
    env[row.var] = row.value;
    INFO(row.var << "=" << row.value);
    CHECK_THAT(error({"train.py"}, env), Catch::Contains(row.says));
  }
  Env env = srun_env();
  env.erase("SLURM_STEP_NODELIST");
  env.erase("SLURM_NODELIST");  // the job's list may hold hosts outside the step: not used
  CHECK_THAT(error({"train.py"}, env), Catch::Contains("SLURM_STEP_NODELIST: host list is empty"));
}

TEST_CASE("explicit flags get past malformed SLURM_* values, with one warning each", "[slurm]") {
  const std::vector<std::string> all = {"--nnodes=4",
                                        "--node-rank=1",
                                        "--rdzv-backend=c10d",
                                        "--rdzv-endpoint=head:29400",
                                        "--rdzv-id=job",
                                        "--nproc-per-node=2",
                                        "train.py"};
  struct Row {
    const char* var;
    const char* value;
    const char* warning;
  };
  const std::vector<Row> rows = {
      {"SLURM_STEP_NODELIST", "n[1-",
       "SLURM_STEP_NODELIST: host list 'n[1-': '[' without ']' (not used: --rdzv-endpoint is "
       "given)"},
      {"SLURM_STEP_NODELIST", "n[1-3]",
       "SLURM_STEP_NODELIST=n[1-3] names 3 hosts but SLURM_STEP_NUM_NODES=4 (not used: "
       "--rdzv-endpoint is given)"},
      {"SLURM_NODEID", "9",
       "SLURM_NODEID='9' is not a node of the step's 4 (not used: "
       "--node-rank is given)"},
      {"SLURM_NODEID", "x",
       "SLURM_NODEID='x' is not a node of the step's 4 (not used: "
       "--node-rank is given)"},
      {"SLURM_STEP_NUM_NODES", "four",
       "SLURM_STEP_NUM_NODES='four' is not a number (not used: --nnodes is given)"},
  };
  for (const auto& row : rows) {
    Env env = srun_env(1);
    env[row.var] = row.value;
    INFO(row.var << "=" << row.value);
    const CliOutcome out = parse(all, env);
    INFO(out.text);
    REQUIRE(out.kind == CliOutcome::Kind::kRun);
    CHECK(out.config.node_rank == 1);
    CHECK(out.config.rdzv_endpoint == "head:29400");
    CHECK(out.config.nproc_per_node == 2);
    CHECK(out.slurm.warnings == std::vector<std::string>{row.warning});
  }
  // A malformed GPU count does not matter once --nproc-per-node is given.
  Env gpus = srun_env(1);
  gpus["SLURM_GPUS_ON_NODE"] = "two";
  CHECK(ok({"--nproc-per-node=2", "train.py"}, gpus).nproc_per_node == 2);
  // The static form: --master-addr takes the node list's place.
  Env env = srun_env(1);
  env["SLURM_STEP_NODELIST"] = "n[1-";
  CHECK(ok({"--rdzv-backend=static", "--master-addr=h", "train.py"}, env).master_addr == "h");

  // Another backend never uses the node list.
  env = srun_env(1);
  env["SLURM_STEP_NODELIST"] = "n[1-";
  const CliOutcome etcd =
      parse({"--rdzv-backend=etcd-v3", "--rdzv-endpoint=e:2379", "train.py"}, env);
  REQUIRE(etcd.kind == CliOutcome::Kind::kRun);
  CHECK(etcd.slurm.warnings.size() == 1);
  // Only the flags that are missing are asked for: with --node-rank and --nnodes given, a
  // bad node list asks for --rdzv-endpoint alone; with the endpoint given, a bad node id
  // asks for --node-rank alone.
  std::string e = error({"--nnodes=4", "--node-rank=1", "train.py"}, env);
  CHECK(e ==
        "SLURM_STEP_NODELIST: host list 'n[1-': '[' without ']' (give --rdzv-endpoint, or "
        "--no-slurm)");
  env = srun_env(1);
  env["SLURM_NODEID"] = "9";
  e = error({"--rdzv-endpoint=head:29400", "train.py"}, env);
  CHECK(e ==
        "Slurm job step 4242.3: SLURM_NODEID='9' is not a node of the step's 4: give "
        "--node-rank, or --no-slurm");
  // And a good environment gives no warning.
  CHECK(parse(all, srun_env(1)).slurm.warnings.empty());
}

TEST_CASE("a GPU count beyond ddprun's limit names Slurm and the limit", "[slurm]") {
  Env env = srun_env();
  env["SLURM_GPUS_ON_NODE"] = "100000";
  CHECK(error({"train.py"}, env) ==
        "Slurm job step 4242.3: SLURM_GPUS_ON_NODE=100000 gives 100000 GPUs on this node, more "
        "than ddprun's limit of 65536 workers per node: give --nproc-per-node, or --no-slurm");
  env["SLURM_GPUS_ON_NODE"] = "65536";
  CHECK(ok({"train.py"}, env).nproc_per_node == 65536);
}

// One table test per rule step of slurm_env.h (docs/slurm.md), called directly.
namespace {

using namespace ddprun::launcher::slurm;
using Values = std::map<std::string, std::string>;

RawOptions given(Values values, std::set<std::string> flags = {}) {
  RawOptions raw;
  raw.values = std::move(values);
  raw.flags = std::move(flags);
  return raw;
}

const StepIds kIds{4242, 3};

// Every option Slurm would fill, given (c10d).
const Values kAllC10d = {{"nnodes", "2"},          {"node_rank", "0"}, {"rdzv_backend", "c10d"},
                         {"rdzv_endpoint", "h:1"}, {"rdzv_id", "x"},   {"nproc_per_node", "1"}};

// The text of the UsageError `f` throws, or "" when it returns.
template <typename F>
std::string usage_error(F f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

// Runs a rule step `f(warnings)` for a table row: it throws UsageError `error`, or (with
// `error` empty) returns with the one warning `warning` (none when empty). Its result, if any.
template <typename F>
auto step_result(F f, const char* error, const char* warning)
    -> std::optional<decltype(f(std::declval<std::vector<std::string>&>()))> {
  std::vector<std::string> warnings;
  try {
    auto out = f(warnings);
    CHECK(std::string() == error);
    CHECK(warnings == (*warning ? std::vector<std::string>{warning} : std::vector<std::string>{}));
    return out;
  } catch (const UsageError& e) {
    CHECK(e.what() == std::string(error));
    return std::nullopt;
  }
}

}  // namespace

TEST_CASE("slurm_step_or_notice: srun steps only, not --no-slurm, --standalone, shells",
          "[slurm]") {
  struct Row {
    Env env;
    std::set<std::string> flags;
    std::optional<unsigned long long> step;  // the step's id, else a notice
    const char* notice;                      // its start ("" : empty notice)
  };
  const Env step = {{"SLURM_JOB_ID", "4242"}, {"SLURM_STEP_ID", "3"}};
  const std::vector<Row> rows = {
      {step, {}, 3, ""},
      {{{"SLURM_JOBID", "4242"}, {"SLURM_STEPID", "7"}}, {}, 7, ""},  // the old names
      {{}, {}, std::nullopt, ""},
      {step, {"no_slurm"}, std::nullopt, ""},
      {step, {"standalone"}, std::nullopt, "--standalone: Slurm's settings are not used"},
      {{{"SLURM_JOB_ID", "77"}}, {}, std::nullopt, "SLURM_JOB_ID=77 is set but this is not an"},
      {{{"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "4294967294"}},
       {},
       std::nullopt,
       "SLURM_JOB_ID=77 is set but this is not an srun job step"},
      {{{"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "4294967279"}}, {}, 4294967279ULL, ""},
  };
  for (const auto& row : rows) {
    const auto out = slurm_step_or_notice(given({}, row.flags), row.env);
    if (row.step) {
      REQUIRE(std::holds_alternative<StepIds>(out));
      CHECK(std::get<StepIds>(out).step == *row.step);
    } else {
      REQUIRE(std::holds_alternative<SlurmNotice>(out));
      CHECK(std::get<SlurmNotice>(out).text.rfind(row.notice, 0) == 0);
      CHECK(!std::get<SlurmNotice>(out).taken);
    }
  }
  CHECK(usage_error([] {
          slurm_step_or_notice(given({}), {{"SLURM_JOB_ID", "x"}, {"SLURM_STEP_ID", "0"}});
        }).rfind("SLURM_JOB_ID='x' is not a number", 0) == 0);
  CHECK(usage_error([] {
          slurm_step_or_notice(given({}), {{"SLURM_JOB_ID", "1"}, {"SLURM_STEP_ID", "y"}});
        }).rfind("SLURM_STEP_ID='y' is not a number", 0) == 0);
}

TEST_CASE("read_nnodes: the step's node count, needed only without --nnodes", "[slurm]") {
  struct Row {
    Env env;
    bool nnodes_given;
    std::optional<unsigned long long> n;
    const char* var;
    const char* warning;  // "" : none
    const char* error;    // "" : none
  };
  const std::vector<Row> rows = {
      {{{"SLURM_STEP_NUM_NODES", "4"}, {"SLURM_NNODES", "8"}},
       false,
       4,
       "SLURM_STEP_NUM_NODES",
       "",
       ""},
      {{{"SLURM_NNODES", "8"}}, false, 8, "SLURM_NNODES", "", ""},
      {{{"SLURM_NNODES", "8"}}, true, 8, "SLURM_NNODES", "", ""},
      {{}, true, std::nullopt, "", "", ""},
      {{{"SLURM_NNODES", "four"}},
       true,
       std::nullopt,
       "SLURM_NNODES",
       "SLURM_NNODES='four' is not a number (not used: --nnodes is given)",
       ""},
      {{},
       false,
       std::nullopt,
       "",
       "",
       "Slurm job step 4242.3 without SLURM_STEP_NUM_NODES or SLURM_NNODES: give --nnodes, or "
       "--no-slurm"},
      {{{"SLURM_NNODES", "four"}},
       false,
       std::nullopt,
       "",
       "",
       "SLURM_NNODES='four' is not a number (is this a Slurm job step? --no-slurm ignores the "
       "SLURM_* environment)"},
  };
  for (const auto& row : rows) {
    const RawOptions raw = given(row.nnodes_given ? Values{{"nnodes", "2"}} : Values{});
    const auto got = step_result(
        [&](auto& warnings) { return read_nnodes(Asked(raw), row.env, kIds, warnings); }, row.error,
        row.warning);
    if (!got) continue;
    CHECK(got->n == row.n);
    CHECK(got->var == row.var);
  }
}

TEST_CASE("options_left_to_slurm: what Slurm would fill, per rendezvous style", "[slurm]") {
  struct Row {
    Values values;
    const char* left;
  };
  const std::vector<Row> rows = {
      {{}, "--nnodes --node-rank --rdzv-backend --rdzv-endpoint --rdzv-id --nproc-per-node"},
      {{{"rdzv_backend", "c10d"}, {"rdzv_endpoint", "h:1"}, {"nnodes", "2"}},
       "--node-rank --rdzv-id --nproc-per-node"},
      {{{"rdzv_backend", "static"}},
       "--nnodes --node-rank --master-addr --master-port --nproc-per-node"},
      {{{"master_addr", "h"}}, "--nnodes --node-rank --master-port --nproc-per-node"},
      {{{"rdzv_backend", "static"}, {"rdzv_endpoint", "h:1"}},
       "--nnodes --node-rank --nproc-per-node"},
      {{{"nnodes", "4"},
        {"node_rank", "3"},
        {"master_addr", "h"},
        {"master_port", "1"},
        {"nproc_per_node", "1"}},
       ""},  // static: no run id needed
      {{{"rdzv_backend", "etcd-v3"}}, "--nnodes --node-rank --rdzv-id --nproc-per-node"},
      {kAllC10d, ""},
  };
  for (const auto& row : rows) {
    const RawOptions raw = given(row.values);
    CHECK(options_left_to_slurm(Asked(raw)) == row.left);
  }
}

TEST_CASE("check_one_task_per_node: more tasks than nodes refused while Slurm fills options",
          "[slurm]") {
  struct Row {
    Env env;
    std::optional<unsigned long long> nnodes;
    bool all_given;
    bool refused;
  };
  const Env eight = {{"SLURM_STEP_NUM_TASKS", "8"}, {"SLURM_STEP_TASKS_PER_NODE", "2(x4)"}};
  const std::vector<Row> rows = {
      {eight, 4, false, true},
      {{{"SLURM_NTASKS", "8"}}, 4, false, true},
      {eight, 8, false, false},
      {eight, 4, true, false},  // Slurm stands aside
      {eight, std::nullopt, false, false},
      {eight, 0, false, false},
      {{}, 4, false, false},
      {{{"SLURM_STEP_NUM_TASKS", "x"}}, 4, true, false},  // not read when standing aside
  };
  const RawOptions all = given(kAllC10d);
  for (const auto& row : rows) {
    const RawOptions raw = row.all_given ? all : given({});
    const std::string error = usage_error([&] {
      check_one_task_per_node(Asked(raw), row.env, {"SLURM_NNODES", row.nnodes});
    });
    CHECK(!error.empty() == row.refused);
  }
  CHECK(usage_error([&] {
          check_one_task_per_node(Asked(given({})), eight, {"SLURM_NNODES", 4});
        }) ==
        "srun started 8 tasks on 4 nodes (SLURM_STEP_NUM_TASKS=8, "
        "SLURM_STEP_TASKS_PER_NODE=2(x4)): ddprun starts a node's workers itself and "
        "must run once per node: `srun --ntasks-per-node=1 ddprun ...` (or --no-slurm; for "
        "one ddprun per task, also give --nnodes --node-rank --rdzv-backend --rdzv-endpoint "
        "--rdzv-id --nproc-per-node)");
}

TEST_CASE("read_node_id: SLURM_NODEID within the step, needed only without --node-rank",
          "[slurm]") {
  struct Row {
    const char* node_id;  // nullptr: not set
    std::optional<unsigned long long> nnodes;
    bool rank_given;
    std::optional<unsigned long long> id;
    const char* warning;
    const char* error;
  };
  const std::vector<Row> rows = {
      {"2", 4, false, 2, "", ""},
      {"2", std::nullopt, false, 2, "", ""},
      {"4", 4, true, 4,
       "SLURM_NODEID='4' is not a node of the step's 4 (not used: --node-rank "
       "is given)",
       ""},
      {"x", std::nullopt, true, std::nullopt,
       "SLURM_NODEID='x' is not a node of the step's nodes (not used: --node-rank is given)", ""},
      {nullptr, 4, true, std::nullopt, "", ""},
      {"4", 4, false, std::nullopt, "",
       "Slurm job step 4242.3: SLURM_NODEID='4' is not a node of the step's 4: give "
       "--node-rank, or --no-slurm"},
      {nullptr, 4, false, std::nullopt, "",
       "Slurm job step 4242.3: SLURM_NODEID is not set: give --node-rank, or --no-slurm"},
  };
  for (const auto& row : rows) {
    Env env;
    if (row.node_id) env["SLURM_NODEID"] = row.node_id;
    const RawOptions raw = given(row.rank_given ? Values{{"node_rank", "1"}} : Values{});
    const NodeCount nnodes{"SLURM_NNODES", row.nnodes};
    const auto id = step_result(
        [&](auto& warnings) { return read_node_id(Asked(raw), env, kIds, nnodes, warnings); },
        row.error, row.warning);
    if (id) CHECK(*id == row.id);
  }
}

TEST_CASE("read_hostlist: the step's hosts, fatal only where the first host fills an option",
          "[slurm]") {
  struct Row {
    Env env;
    Values values;
    Hosts hosts;
    const char* warning;
    const char* error;
  };
  const Env bad = {{"SLURM_STEP_NODELIST", "n[1-"}};
  const Env three = {{"SLURM_STEP_NODELIST", "n[1-3]"}};
  const std::vector<Row> rows = {
      {{{"SLURM_STEP_NODELIST", "n[1-4]"}, {"SLURM_NODELIST", "x[1-4]"}},
       {},
       {"n1", "n2", "n3", "n4"},
       "",
       ""},
      {{{"SLURM_NODELIST", "x[1-4]"}}, {}, {"x1", "x2", "x3", "x4"}, "", ""},
      {bad,
       {},
       {},
       "",
       "SLURM_STEP_NODELIST: host list 'n[1-': '[' without ']' (give "
       "--rdzv-endpoint, or --no-slurm)"},
      {three,
       {},
       {},
       "",
       "SLURM_STEP_NODELIST=n[1-3] names 3 hosts but SLURM_NNODES=4 (give --rdzv-endpoint, or "
       "--no-slurm)"},
      {bad,
       {{"rdzv_backend", "static"}},
       {},
       "",
       "SLURM_STEP_NODELIST: host list 'n[1-': '[' without ']' (give --master-addr, or "
       "--no-slurm)"},
      {{},
       {},
       {},
       "",
       "SLURM_STEP_NODELIST: host list is empty (give --rdzv-endpoint, or "
       "--no-slurm)"},
      {bad,
       {{"rdzv_endpoint", "h:1"}},
       {},
       "SLURM_STEP_NODELIST: host list 'n[1-': '[' without ']' (not used: --rdzv-endpoint is "
       "given)",
       ""},
      {three,
       {{"master_addr", "h"}},
       {},
       "SLURM_STEP_NODELIST=n[1-3] names 3 hosts but SLURM_NNODES=4 (not used: --master-addr "
       "is given)",
       ""},
      {bad,
       {{"rdzv_backend", "etcd-v3"}},
       {},
       "SLURM_STEP_NODELIST: host list 'n[1-': '[' without ']' (not used: --rdzv-backend "
       "etcd-v3 is given)",
       ""},
      {{}, {{"rdzv_endpoint", "h:1"}}, {}, "", ""},  // no list, none needed: no word
  };
  for (const auto& row : rows) {
    const RawOptions raw = given(row.values);
    const NodeCount nnodes{"SLURM_NNODES", 4};
    const auto hosts = step_result(
        [&](auto& warnings) { return read_hostlist(Asked(raw), row.env, nnodes, warnings); },
        row.error, row.warning);
    if (hosts) CHECK(*hosts == row.hosts);
  }
}

TEST_CASE("slurm_port_from_env: DDPRUN_SLURM_PORT, else the step's port", "[slurm]") {
  struct Row {
    const char* fixed;  // nullptr: not set
    int port;           // 0: refused
  };
  const std::vector<Row> rows = {
      {nullptr, slurm_port(4242, 3)},
      {"31000", 31000},
      {"1", 1},
      {"65535", 65535},
      {"0", 0},
      {"65536", 0},
      {"x", 0},
      {"-1", 0},
  };
  for (const auto& row : rows) {
    Env env;
    if (row.fixed) env["DDPRUN_SLURM_PORT"] = row.fixed;
    if (row.port == 0) {
      CHECK(usage_error([&] { slurm_port_from_env(env, kIds); }) ==
            std::string("DDPRUN_SLURM_PORT='") + row.fixed + "': expected a port in [1, 65535]");
    } else {
      CHECK(slurm_port_from_env(env, kIds) == row.port);
    }
  }
}

TEST_CASE("read_gpus: the step's GPUs on this node, within ddprun's limit", "[slurm]") {
  struct Row {
    Env env;
    bool nproc_given;
    unsigned long long gpus;
    const char* error;
  };
  const std::vector<Row> rows = {
      {{{"SLURM_GPUS_ON_NODE", "4"}, {"SLURM_STEP_GPUS", "0,1"}}, false, 4, ""},
      {{{"SLURM_STEP_GPUS", "2,3"}, {"SLURM_JOB_GPUS", "0,1,2,3"}}, false, 2, ""},
      {{{"SLURM_JOB_GPUS", "0,,1"}}, false, 2, ""},
      {{}, false, 0, ""},
      {{{"SLURM_GPUS_ON_NODE", "two"}}, true, 0, ""},  // not read with --nproc-per-node
      {{{"SLURM_GPUS_ON_NODE", "65536"}}, false, 65536, ""},
      {{{"SLURM_GPUS_ON_NODE", "two"}}, false, 0, "SLURM_GPUS_ON_NODE='two' is not a number"},
      {{{"SLURM_GPUS_ON_NODE", "65537"}},
       false,
       0,
       "Slurm job step 4242.3: SLURM_GPUS_ON_NODE=65537 gives 65537 GPUs on this node, more "
       "than ddprun's limit of 65536 workers per node: give --nproc-per-node, or --no-slurm"},
  };
  for (const auto& row : rows) {
    const RawOptions raw = given(row.nproc_given ? Values{{"nproc_per_node", "2"}} : Values{});
    const std::string error = usage_error([&] { read_gpus(Asked(raw), row.env, kIds); });
    CHECK(error.rfind(row.error, 0) == 0);
    CHECK(error.empty() == !*row.error);
    if (error.empty()) CHECK(read_gpus(Asked(raw), row.env, kIds) == row.gpus);
  }
}

TEST_CASE("fill_from_slurm: the open options filled, the notice says taken and kept", "[slurm]") {
  StepValues v;
  v.ids = kIds;
  v.nnodes = 4;
  v.node_id = 2;
  v.hosts = {"n1", "n2", "n3", "n4"};
  v.port = 29500;
  v.gpus = 8;
  struct Row {
    Values values;
    Values filled;  // the options after filling, those the row looks at
    const char* notice;
  };
  const std::vector<Row> rows = {
      {{},
       {{"rdzv_endpoint", "n1:29500"}, {"nproc_per_node", "8"}},
       "Slurm job step 4242.3: from SLURM_*: --nnodes=4 --node-rank=2 --rdzv-backend=c10d "
       "--rdzv-endpoint=n1:29500 --rdzv-id=slurm-4242.3 --nproc-per-node=8 (--no-slurm turns "
       "this off; docs/slurm.md)"},
      {{{"rdzv_backend", "static"}, {"nnodes", "2"}},
       {{"master_addr", "n1"}, {"master_port", "29500"}, {"nnodes", "2"}},
       "Slurm job step 4242.3: from SLURM_*: --node-rank=2 --master-addr=n1 --master-port=29500 "
       "--rdzv-id=slurm-4242.3 --nproc-per-node=8; given, kept: --nnodes (--no-slurm turns "
       "this off; docs/slurm.md)"},
      {{{"rdzv_backend", "etcd-v3"}, {"rdzv_endpoint", "e:2379"}, {"node_rank", "1"}},
       {{"rdzv_endpoint", "e:2379"}, {"node_rank", "1"}},
       "Slurm job step 4242.3: from SLURM_*: --nnodes=4 --rdzv-id=slurm-4242.3 "
       "--nproc-per-node=8; given, kept: --node-rank (--no-slurm turns this off; "
       "docs/slurm.md)"},
      {kAllC10d,
       {{"rdzv_id", "x"}},
       "Slurm job step 4242.3: nothing taken from SLURM_*; given, kept: --nnodes --node-rank "
       "--rdzv-backend --rdzv-endpoint --rdzv-id --nproc-per-node (--no-slurm turns this off; "
       "docs/slurm.md)"},
      // Static, every option given: Slurm stands aside, no run id taken (issue 31).
      {{{"nnodes", "4"},
        {"node_rank", "3"},
        {"master_addr", "h"},
        {"master_port", "1"},
        {"nproc_per_node", "1"}},
       {{"master_addr", "h"}, {"node_rank", "3"}},
       "Slurm job step 4242.3: nothing taken from SLURM_*; given, kept: --nnodes --node-rank "
       "--master-addr --master-port --nproc-per-node (--no-slurm turns this off; "
       "docs/slurm.md)"},
  };
  for (const auto& row : rows) {
    RawOptions raw = given(row.values);
    const Asked asked(raw);
    const SlurmNotice notice = fill_from_slurm(raw, asked, v);
    CHECK(notice.text == row.notice);
    CHECK(notice.taken == (notice.text.find("nothing taken") == std::string::npos));
    for (const auto& [dest, value] : row.filled) CHECK(raw.values[dest] == value);
    if (notice.text.find("rdzv-id") == std::string::npos) CHECK(raw.values.count("rdzv_id") == 0);
  }
  // No GPUs from Slurm: one worker, and the notice says why.
  v.gpus = 0;
  RawOptions raw = given({});
  CHECK_THAT(fill_from_slurm(raw, Asked(raw), v).text,
             Catch::Contains("--nproc-per-node=1 (no GPUs from Slurm)"));
  CHECK(raw.values["nproc_per_node"] == "1");
}
