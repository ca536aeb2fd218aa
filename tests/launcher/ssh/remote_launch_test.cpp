// The commands of a multi-host launch: shell quoting checked against a real /bin/sh with
// hostile strings, --ssh-command splitting, the environment allow-list, each host's ssh
// argv, and the plan from a parsed command line (options passed through, job options
// appended).
#include "launcher/ssh/remote_launch.h"

#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "launcher/options/cli.h"
#include "launcher/ssh/ssh_config.h"
#include "launcher/ssh/ssh_launch.h"
#include "tests/launcher/options/usage_error_text.h"

using namespace ddprun::launcher;
using ddprun::shell_quote;
using ddprun::launcher::test::usage_error_text;

namespace {

// What /bin/sh makes of `command`: each word it passes to printf, NUL-terminated.
std::vector<std::string> sh_words(const std::string& words) {
  const std::string cmd = "printf '%s\\0' " + words;
  std::vector<std::string> argv = {"/bin/sh", "-c", cmd};
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    out.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::vector<std::string> result;
  for (std::size_t start = 0; start < out.size();) {
    const auto end = out.find('\0', start);
    result.push_back(out.substr(start, end - start));
    start = end + 1;
  }
  return result;
}

}  // namespace

TEST_CASE("shell_quote: a real /bin/sh reads every hostile string back unchanged",
          "[remote_launch]") {
  const std::vector<std::string> hostile = {"plain",     "",
                                            "two words", "it's",
                                            "'",         "''",
                                            "\"",        "$HOME",
                                            "${x:-y}",   "`id`",
                                            "$(id)",     "a;b",
                                            "a&&b",      "a|b",
                                            "a>b",       "<",
                                            "*",         "?",
                                            "[a]",       "~",
                                            "#c",        "\\",
                                            "\\'",       "tab\there",
                                            "new\nline", "--opt=va lue",
                                            "-",         "!",
                                            "%",         "{a,b}",
                                            "ünïcødé",   "=",
                                            "a=b c"};
  std::string line;
  for (const auto& s : hostile) line += shell_quote(s) + " ";
  CHECK(sh_words(line) == hostile);
  CHECK(shell_quote("abc-_./:=,@%+9") == "abc-_./:=,@%+9");
  CHECK(shell_quote("it's") == "'it'\\''s'");
}

TEST_CASE("the ssh command is split like a shell without expansions", "[remote_launch]") {
  CHECK(split_command_words("ssh") == std::vector<std::string>{"ssh"});
  CHECK(split_command_words("  ssh -i '/k ey' -o \"A=b c\" -J x\\ y  ") ==
        std::vector<std::string>{"ssh", "-i", "/k ey", "-o", "A=b c", "-J", "x y"});
  CHECK(split_command_words("ssh \"a\\\"b\\\\c\" $HOME") ==
        std::vector<std::string>{"ssh", "a\"b\\c", "$HOME"});
  CHECK(split_command_words("ssh a''b") == std::vector<std::string>{"ssh", "ab"});
  CHECK(usage_error_text([] { split_command_words("ssh 'x"); }) ==
        "--ssh-command 'ssh 'x': unterminated single quote");
  CHECK(usage_error_text([] { split_command_words("ssh \"x"); }) ==
        "--ssh-command 'ssh \"x': unterminated double quote");
  CHECK(usage_error_text([] { split_command_words("ssh x\\"); }) ==
        "--ssh-command 'ssh x\\': ends with a backslash");
  CHECK(usage_error_text([] { split_command_words("  "); }) == "--ssh-command: empty command");
}

TEST_CASE("the environment allow-list and --env", "[remote_launch]") {
  const std::map<std::string, std::string> env = {{"PATH", "/bin"},
                                                  {"HOME", "/root"},
                                                  {"PYTHONPATH", "/p"},
                                                  {"NCCL_DEBUG", "INFO"},
                                                  {"GLOO_SOCKET_IFNAME", "mn0"},
                                                  {"PET_MAX_RESTARTS", "2"},
                                                  {"MY_VAR", "x y"},
                                                  {"SSH_AUTH_SOCK", "/s"},
                                                  {"TORCHELASTIC_X", "1"}};
  using Env = std::vector<std::pair<std::string, std::string>>;
  CHECK(forwarded_env(env, {}) == Env{{"GLOO_SOCKET_IFNAME", "mn0"},
                                      {"NCCL_DEBUG", "INFO"},
                                      {"PET_MAX_RESTARTS", "2"},
                                      {"PYTHONPATH", "/p"},
                                      {"TORCHELASTIC_X", "1"}});
  const Env with = forwarded_env(env, {"MY_VAR", "NEW=v=w", "PYTHONPATH=/q"});
  CHECK(std::find(with.begin(), with.end(), std::pair<std::string, std::string>("MY_VAR", "x y")) !=
        with.end());
  CHECK(std::find(with.begin(), with.end(), std::pair<std::string, std::string>("NEW", "v=w")) !=
        with.end());
  CHECK(std::find(with.begin(), with.end(),
                  std::pair<std::string, std::string>("PYTHONPATH", "/q")) != with.end());
  CHECK(usage_error_text([&] { forwarded_env(env, {"UNSET_VAR"}); }) ==
        "--env UNSET_VAR: not set in this environment (or give NAME=VALUE)");
  CHECK(usage_error_text([&] { forwarded_env(env, {"A B"}); }) ==
        "--env 'A B': expected NAME or NAME=VALUE");
}

TEST_CASE("each host's ssh argv and remote command", "[remote_launch]") {
  RemoteJob job;
  job.ssh_command = {"ssh", "-i", "/k"};
  job.ssh_port = 2222;
  job.remote_ddprun = "/opt/dd prun/ddprun";
  job.cwd = "/home/u/it's here";
  job.env = {{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}, {"PYTHONPATH", "/p q"}};
  job.options = {"--max-restarts", "1", "--nnodes=2"};
  job.program = {"train.py", "--lr", "$x; rm -rf /"};
  RemoteHost host{"user@b", 1, 2, "1,3", false};
  const auto argv = ssh_argv(job, host);
  REQUIRE(argv.size() == 14);
  CHECK(std::vector<std::string>(argv.begin(), argv.begin() + 6) ==
        std::vector<std::string>{"ssh", "-i", "/k", "-p", "2222", "-T"});
  CHECK(argv[6] == "-o");
  CHECK(argv[7] == "BatchMode=yes");
  CHECK(argv[9] == "ServerAliveInterval=5");
  CHECK(argv[11] == "ServerAliveCountMax=2");
  CHECK(argv[12] == "user@b");
  // The remote shell splits the command back into exactly these words.
  const std::string& cmd = argv[13];
  REQUIRE(cmd.size() > 9);
  CHECK(cmd.substr(cmd.size() - 9) == "; exit $?");
  const auto words =
      sh_words(cmd.substr(cmd.find("&& env ") + 3, cmd.size() - 9 - cmd.find("&& env ") - 3));
  CHECK(words == std::vector<std::string>{
                     "env", "--", "PYTHONPATH=/p q", "CUDA_VISIBLE_DEVICES=1,3",
                     "/opt/dd prun/ddprun", "--max-restarts", "1", "--nnodes=2", "--node-rank=1",
                     "--nproc-per-node=2", kExitOnStdinEof, "train.py", "--lr", "$x; rm -rf /"});
  CHECK(argv[13].rfind("cd -- '/home/u/it'\\''s here' && env -- ", 0) == 0);
  RemoteHost plain{"a", 0, std::nullopt, std::nullopt, false};
  const auto plain_words = remote_agent_argv(job, plain);
  CHECK(std::find(plain_words.begin(), plain_words.end(), "--nproc-per-node=2") ==
        plain_words.end());
}

TEST_CASE("the plan: the user's options pass through and the job's are appended",
          "[remote_launch]") {
  HostFacts facts;
  facts.env = {{"PATH", "/bin"}, {"PET_NPROC_PER_NODE", "2"}};
  facts.file_exists = [](const std::string&) { return true; };
  const auto parse = [&](std::vector<std::string> args) {
    CliOutcome out = parse_command_line(args, facts);
    INFO(out.text);
    REQUIRE(out.kind == CliOutcome::Kind::kRun);
    return out.config;
  };
  const auto hosts = parse_hosts_list("a,b:3,c");
  SECTION("defaults") {
    const LaunchConfig c =
        parse({"--hosts", "a,b:3,c", "--max_rest", "2", "--log-dir=/l", "--ssh-command", "ssh -i k",
               "--env=X=1", "-m", "pkg.train", "--epochs", "3"});
    CHECK(c.ssh.agent_options == std::vector<std::string>{"--max_restarts", "2", "-m"});
    const SshPlan p = make_ssh_plan(c, facts.env, hosts, "/usr/bin/ddprun", "/w", "rid");
    CHECK(p.job.options == std::vector<std::string>{"--max_restarts", "2", "-m", "--nnodes=3",
                                                    "--rdzv-backend=c10d",
                                                    "--rdzv-endpoint=a:29400", "--rdzv-id=rid"});
    CHECK(p.job.program == std::vector<std::string>{"pkg.train", "--epochs", "3"});
    CHECK(p.job.ssh_command == std::vector<std::string>{"ssh", "-i", "k"});
    CHECK(p.job.remote_ddprun == "/usr/bin/ddprun");
    CHECK(p.min_nodes == 3);
    REQUIRE(p.hosts.size() == 3);
    CHECK(p.hosts[1].node_rank == 1);
    CHECK(p.hosts[1].nproc == 3);
    CHECK(!p.hosts[0].nproc);
    CHECK(p.job.env == std::vector<std::pair<std::string, std::string>>{{"PET_NPROC_PER_NODE", "2"},
                                                                        {"X", "1"}});
    // Only the first host is told it hosts the rendezvous.
    CHECK(p.hosts[0].hosts_rendezvous);
    CHECK(!p.hosts[1].hosts_rendezvous);
    CHECK(!p.hosts[2].hosts_rendezvous);
    const auto first = remote_agent_argv(p.job, p.hosts[0]);
    const auto second = remote_agent_argv(p.job, p.hosts[1]);
    CHECK(std::count(first.begin(), first.end(), std::string(kRdzvIsHost)) == 1);
    CHECK(std::count(second.begin(), second.end(), std::string(kRdzvIsHost)) == 0);
    // The agent reads it as is_host=1; the user's own is_host wins.
    CHECK(
        parse({kRdzvIsHost, "--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=a:1", "train.py"})
            .rdzv_conf.is_host == true);
    CHECK(parse({kRdzvIsHost, "--rdzv-conf=is_host=0", "train.py"}).rdzv_conf.is_host == false);
    CHECK(!parse({"train.py"}).rdzv_conf.is_host);
    // An ssh alias: the endpoint is the address ssh connects to.
    const SshPlan alias = make_ssh_plan(c, facts.env, hosts, "/d", "/w", "rid", "10.0.0.7");
    CHECK(alias.endpoint == "10.0.0.7:29400");
    CHECK(alias.hosts[0].name == "a");
  }
  SECTION("the user's rendezvous values win") {
    const LaunchConfig c =
        parse({"--hosts=a,b:3,c", "--nnodes", "2:4", "--rdzv-id", "job7", "--rdzv-endpoint",
               "b:1234", "--remote-ddprun", "/x/ddprun", "train.py"});
    const SshPlan p = make_ssh_plan(c, facts.env, hosts, "/usr/bin/ddprun", "/w", "rid");
    CHECK(p.job.options == std::vector<std::string>{"--nnodes", "2:4", "--rdzv-id", "job7",
                                                    "--rdzv-endpoint", "b:1234",
                                                    "--rdzv-backend=c10d"});
    CHECK(p.min_nodes == 2);
    CHECK(p.job.remote_ddprun == "/x/ddprun");
    CHECK(p.endpoint.empty());
    CHECK(!p.hosts[0].hosts_rendezvous);  // the user's endpoint: nobody is told
  }
  SECTION("ssh's keep-alives end a silent host's session after the heartbeat budget") {
    const SshPlan d =
        make_ssh_plan(parse({"--hosts", "a,b", "train.py"}), facts.env, hosts, "/d", "/w", "r");
    CHECK(d.job.alive_interval_s == 5);
    CHECK(d.job.alive_count_max == 2);
    CHECK(d.job.silent_after_s() == 15);
    const SshPlan f =
        make_ssh_plan(parse({"--hosts", "a,b", "--rdzv-conf",
                             "keep_alive_interval=0.5,keep_alive_max_attempt=5", "train.py"}),
                      facts.env, hosts, "/d", "/w", "r");
    CHECK(f.job.alive_interval_s == 1);  // whole seconds, rounded up
    CHECK(f.job.alive_count_max == 4);
    CHECK(f.job.silent_after_s() == 5);
  }
  SECTION("an IPv6 first host keeps its brackets in the rendezvous endpoint") {
    // The hostfile refuses ':' in names, but the plan formats through store/host_port.h
    // so that a v6 literal reaching it would still give a usable endpoint.
    HostEntry v6;
    v6.name = "me@fd00::2";
    const LaunchConfig c = parse({"--hosts", "a,b:3,c", "train.py"});
    const SshPlan p = make_ssh_plan(c, facts.env, {v6}, "/d", "/w", "r");
    CHECK(p.endpoint == "[fd00::2]:29400");
  }
  SECTION("--nnodes against the host count") {
    const LaunchConfig c = parse({"--hosts", "a,b:3,c", "--nnodes", "4", "train.py"});
    CHECK(usage_error_text([&] { make_ssh_plan(c, facts.env, hosts, "/d", "/w", "r"); }) ==
          "--nnodes needs at least 4 nodes but the host list has 3");
    const LaunchConfig d = parse({"--hosts", "a,b:3,c", "--nnodes", "1:2", "train.py"});
    CHECK(usage_error_text([&] { make_ssh_plan(d, facts.env, hosts, "/d", "/w", "r"); }) ==
          "--nnodes 1:2: the host list has 3 hosts");
  }
  SECTION("usage errors") {
    const auto err = [&](std::vector<std::string> args) {
      const CliOutcome out = parse_command_line(args, facts);
      CHECK(out.kind == CliOutcome::Kind::kError);
      return out.text;
    };
    CHECK(err({"--hosts", "a", "--hostfile", "f", "t.py"}) ==
          "--hostfile and --hosts cannot be used together");
    CHECK(err({"--hosts", "a", "--standalone", "t.py"}) ==
          "--standalone cannot be used with --hostfile/--hosts (one node vs many)");
    CHECK(err({"--hosts", "a", "--node-rank", "1", "t.py"})
              .rfind("--node-rank cannot be used with --hostfile/--hosts", 0) == 0);
    CHECK(err({"--hosts", "a", "--rdzv-backend", "static", "t.py"}) ==
          "--rdzv-backend static: --hostfile/--hosts launch with the c10d backend only");
    CHECK(err({"--ssh-port", "22", "t.py"}) == "--ssh-port needs --hostfile or --hosts");
    // An empty list (an unset $HOSTFILE) is not a local job.
    CHECK(err({"--hosts", "", "t.py"}) == "--hosts: empty host list (expected host[:N],...)");
    CHECK(err({"--hosts=", "t.py"}) == "--hosts: empty host list (expected host[:N],...)");
    CHECK(err({"--hosts", " ", "t.py"}) == "--hosts: empty host list (expected host[:N],...)");
    CHECK(err({"--hostfile", "", "t.py"}) == "--hostfile: empty file name (no hosts to run on)");
    CHECK(err({"--hostfile=", "t.py"}) == "--hostfile: empty file name (no hosts to run on)");
    CHECK(err({"--hosts", "a", "--ssh-port", "0", "t.py"}).rfind("--ssh-port", 0) == 0);
  }
  SECTION("--nproc-per-node gpu is resolved on the hosts, not on a launcher without GPUs") {
    const LaunchConfig c = parse({"--hosts", "a", "--nproc-per-node", "gpu", "train.py"});
    CHECK(c.ssh.agent_options == std::vector<std::string>{"--nproc-per-node", "gpu"});
  }
  SECTION("no PET_ fallback for the ssh options") {
    facts.env["PET_HOSTS"] = "a,b";
    CHECK(!parse({"train.py"}).ssh.active());
  }
}

TEST_CASE("ssh -G: the host name an ssh-config alias stands for", "[remote_launch]") {
  CHECK(parse_ssh_g_hostname("user root\nhostname 10.1.2.3\nport 22\n") == "10.1.2.3");
  CHECK(!parse_ssh_g_hostname("user root\nport 22\n"));
  CHECK(!parse_ssh_g_hostname(""));
  // The real client with a config of its own (OpenSSH; skipped where there is none).
  if (std::system("command -v ssh >/dev/null 2>&1") != 0) return;
  char dir[] = "/tmp/ddprun_sshcfg_XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string config = std::string(dir) + "/config";
  std::ofstream(config) << "Host gpu0\n  HostName 10.9.8.7\nHost *.short\n  HostName %h.example\n";
  const std::vector<std::string> ssh = {"ssh", "-F", config};
  CHECK(ssh_config_hostname(ssh, "gpu0") == "10.9.8.7");
  CHECK(ssh_config_hostname(ssh, "user@gpu0") == "10.9.8.7");
  CHECK(ssh_config_hostname(ssh, "n1.short") == "n1.short.example");
  CHECK(ssh_config_hostname(ssh, "plainhost") == "plainhost");
  // No ssh, or one that fails: nothing (the caller keeps the name).
  CHECK(!ssh_config_hostname({"/nonexistent/ssh"}, "gpu0"));
  CHECK(!ssh_config_hostname({"false"}, "gpu0"));
  std::remove(config.c_str());
  ::rmdir(dir);
}
