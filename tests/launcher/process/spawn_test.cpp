// spawn_process with real /bin/sh children: exec failures, environment, fds, session,
// death signal and signal state as the child sees them.
#include "launcher/process/spawn.h"

#include <sys/stat.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <set>
#include <thread>

#include "tests/launcher/process/process_test_util.h"

using ddprun::UniqueFd;
using namespace ddprun::launcher;
using namespace ddprun::launcher::test;

namespace {

struct Result {
  pid_t pid = 0;
  int status = 0;
  std::string out;
};

// Spawns `argv` with `env` and stdout to a pipe; reads it to EOF and reaps the child.
Result run_child(std::vector<std::string> argv,
                 std::vector<std::string> env = {"PATH=/usr/bin:/bin"}, std::string cwd = {},
                 bool scan_proc_fds = false) {
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  SpawnOptions o;
  o.argv = std::move(argv);
  o.env = std::move(env);
  o.cwd = std::move(cwd);
  o.stdout_fd = write_end.get();
  o.scan_proc_fds = scan_proc_fds;
  Result r;
  r.pid = spawn_process(o);
  write_end.reset();
  char buf[4096];
  ssize_t n;
  while ((n = ::read(read_end.get(), buf, sizeof buf)) > 0) r.out.append(buf, n);
  REQUIRE(::waitpid(r.pid, &r.status, 0) == r.pid);
  return r;
}

std::string sh_field(const std::string& status_text, const std::string& key) {
  for (const auto& line : split_lines(status_text)) {
    if (line.rfind(key + ":", 0) == 0) {
      auto v = line.substr(key.size() + 1);
      return v.substr(v.find_first_not_of(" \t"));
    }
  }
  return {};
}

}  // namespace

TEST_CASE("spawn: a missing program is a SpawnError naming it", "[spawn]") {
  CHECK_THROWS_WITH(run_child({"ddprun-no-such-program", "x"}),
                    "cannot execute 'ddprun-no-such-program': No such file or directory");
  // With a slash there is no PATH lookup: the error comes back from execve in the child.
  CHECK_THROWS_WITH(run_child({"/nonexistent/dir/prog"}),
                    "cannot execute '/nonexistent/dir/prog': No such file or directory");
  // An empty PATH entry and no PATH at all follow execvp (default /bin:/usr/bin).
  CHECK(run_child({"true"}, {}).status == 0);
}

TEST_CASE("spawn: a non-executable file gives Permission denied", "[spawn]") {
  const TempDir tmp;
  const std::string dir = tmp.str();
  std::string file = dir + "/script";
  { std::ofstream(file) << "#!/bin/sh\necho hi\n"; }
  ::chmod(file.c_str(), 0644);
  CHECK_THROWS_WITH(run_child({"script"}, {"PATH=" + dir}),
                    "cannot execute 'script': Permission denied");
  CHECK_THROWS_WITH(run_child({file}), "cannot execute '" + file + "': Permission denied");
  ::chmod(file.c_str(), 0755);
  CHECK(run_child({"script"}, {"PATH=" + dir}).out == "hi\n");
  CHECK_THROWS_WITH(run_child({"/bin/true"}, {}, dir + "/missing"),
                    "cannot execute '/bin/true': cannot change directory to '" + dir +
                        "/missing': No such file or directory");
  CHECK(run_child({"/bin/pwd"}, {}, dir).out == dir + "\n");
}

TEST_CASE("spawn: the environment is passed exactly", "[spawn]") {
  Result r = run_child({"/usr/bin/env"}, {"A=1", "B=two words", "EMPTY=", "PATH=/nowhere"});
  CHECK(r.out == "A=1\nB=two words\nEMPTY=\nPATH=/nowhere\n");
  CHECK(run_child({"/usr/bin/env"}, {}).out.empty());
}

TEST_CASE("spawn: exit codes come through", "[spawn]") {
  for (int code : {0, 1, 77, 255}) {
    Result r = run_child({"/bin/sh", "-c", "exit " + std::to_string(code)});
    REQUIRE(WIFEXITED(r.status));
    CHECK(WEXITSTATUS(r.status) == code);
  }
}

TEST_CASE("spawn: no stray fds reach the child", "[spawn]") {
  // A leaked fd without FD_CLOEXEC in the parent must still not reach the child.
  int leaked = ::open("/dev/null", O_RDONLY);
  REQUIRE(leaked >= 0);
  // close_range, or the /proc/self/fd scan used on kernels older than 5.11.
  bool scan_proc = GENERATE(false, true);
  INFO("scan_proc_fds=" << scan_proc);
  Result r = run_child({"/bin/ls", "/proc/self/fd"}, {"PATH=/usr/bin:/bin"}, {}, scan_proc);
  ::close(leaked);
  // ls sees 0, 1, 2 and the directory it is reading.
  std::set<std::string> fds;
  for (const auto& l : split_lines(r.out)) fds.insert(l);
  CHECK(fds == std::set<std::string>{"0", "1", "2", "3"});
}

TEST_CASE("spawn: the child leads its own session and process group", "[spawn]") {
  Result r = run_child({"/bin/cat", "/proc/self/stat"});
  std::string stat = r.out;
  auto close = stat.rfind(')');
  REQUIRE(close != std::string::npos);
  std::istringstream rest(stat.substr(close + 2));
  char state;
  pid_t ppid, pgrp, session;
  rest >> state >> ppid >> pgrp >> session;
  CHECK(pgrp == r.pid);
  CHECK(session == r.pid);
  CHECK(ppid == ::getpid());
}

TEST_CASE("spawn: empty signal mask, default dispositions, stdin inherited", "[spawn]") {
  agent_signal_setup();  // the parent blocks signals and ignores SIGPIPE
  Result r = run_child({"/bin/cat", "/proc/self/status"});
  CHECK(sh_field(r.out, "SigBlk") == "0000000000000000");
  CHECK(sh_field(r.out, "SigIgn") == "0000000000000000");
  struct stat ours {
  }, theirs{};
  ::fstat(0, &ours);
  Result link = run_child({"/bin/sh", "-c", "stat -L -c '%d:%i' /proc/self/fd/0"});
  CHECK(link.out == std::to_string(ours.st_dev) + ":" + std::to_string(ours.st_ino) + "\n");
  (void)theirs;
}

TEST_CASE("spawn: the child dies when the forking thread exits (PDEATHSIG)", "[spawn]") {
  pid_t pid = 0;
  std::thread forker([&] {
    SpawnOptions o;
    o.argv = {"/bin/sleep", "30"};
    pid = spawn_process(o);
  });
  forker.join();
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
}

TEST_CASE("spawn: keep_fd alone reaches the child, at its number", "[spawn]") {
  bool scan_proc = GENERATE(false, true);
  INFO("scan_proc_fds=" << scan_proc);
  int kept_fds[2];
  REQUIRE(::pipe2(kept_fds, O_CLOEXEC) == 0);
  UniqueFd kept_read(kept_fds[0]), kept(kept_fds[1]);
  int out_fds[2];
  REQUIRE(::pipe2(out_fds, O_CLOEXEC) == 0);
  UniqueFd read_end(out_fds[0]), write_end(out_fds[1]);
  SpawnOptions o;
  const std::string fd = std::to_string(kept.get());
  o.argv = {"/bin/sh", "-c", "ls /proc/self/fd; echo through >&" + fd};
  o.env = {"PATH=/usr/bin:/bin"};
  o.stdout_fd = write_end.get();
  o.keep_fd = kept.get();
  o.scan_proc_fds = scan_proc;
  const pid_t pid = spawn_process(o);
  write_end.reset();
  kept.reset();
  std::string out, through;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(read_end.get(), buf, sizeof buf)) > 0) out.append(buf, n);
  while ((n = ::read(kept_read.get(), buf, sizeof buf)) > 0) through.append(buf, n);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  std::set<std::string> fds;
  for (const auto& l : split_lines(out)) fds.insert(l);
  // 0-2, the kept fd, and the one ls reads /proc/self/fd with (3, or the next free one).
  CHECK(fds.count(fd) == 1);
  CHECK(fds.size() == 5);
  CHECK(through == "through\n");
}
