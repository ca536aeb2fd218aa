// spawn.cpp: see spawn.h. Everything between fork() and execve() below is restricted to
// async-signal-safe system calls: the agent has other threads (store, main) that may hold
// malloc or stdio locks at the moment of fork, and those locks stay held in the child.
#include "launcher/process/spawn.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <memory>

#include "base/open_files.h"
#include "base/unique_fd.h"

namespace ddprun::launcher {
namespace {

enum class Step : int { kSetsid = 1, kPdeathsig, kDup, kChdir, kExec, kAffinity };

struct ChildError {
  int step;
  int err;
};

std::string env_value(const std::vector<std::string>& env, std::string_view name) {
  for (const std::string& kv : env) {
    if (kv.size() > name.size() && kv.compare(0, name.size(), name) == 0 &&
        kv[name.size()] == '=') {
      return kv.substr(name.size() + 1);
    }
  }
  return {};
}

[[noreturn]] void child_fail(int err_fd, Step step) {
  ChildError e{static_cast<int>(step), errno};
  // Nothing useful can be done if this write fails; the exit code still tells.
  [[maybe_unused]] ssize_t n = ::write(err_fd, &e, sizeof e);
  ::_exit(e.err == ENOENT ? 127 : 126);
}

// For kernels without CLOSE_RANGE_CLOEXEC (< 5.11, e.g. RHEL 8): marks every fd >= 3
// listed in /proc/self/fd close-on-exec, with raw getdents64 (opendir would malloc).
// Async-signal-safe. Returns false if /proc cannot be read.
bool cloexec_from_proc() {
  int dir = ::open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return false;
  alignas(8) char buf[4096];
  while (true) {
    long n = ::syscall(SYS_getdents64, dir, buf, sizeof buf);
    if (n < 0) {
      ::close(dir);
      return false;
    }
    if (n == 0) break;
    for (long off = 0; off < n;) {
      // struct linux_dirent64: u64 ino, s64 off, u16 reclen, u8 type, char name[].
      unsigned short reclen;
      std::memcpy(&reclen, buf + off + 16, sizeof reclen);
      const char* name = buf + off + 19;
      int fd = 0;
      bool numeric = *name != '\0';
      for (const char* c = name; *c != '\0'; ++c) {
        if (*c < '0' || *c > '9') numeric = false;
        fd = fd * 10 + (*c - '0');
      }
      if (numeric && fd >= 3 && fd != dir) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
      off += reclen;
    }
  }
  ::close(dir);
  return true;
}

// Moves `fd` to a number >= 3 (close-on-exec) so that dup2 onto 1 and 2 in the child can
// never clobber a pipe end that happens to be 0..2 (an agent started with stdout closed).
UniqueFd above_stdio(int fd) {
  UniqueFd moved(::fcntl(fd, F_DUPFD_CLOEXEC, 3));
  if (!moved) throw_errno("fcntl(F_DUPFD_CLOEXEC)");
  return moved;
}

// In the child: `from` onto `to`. dup2 leaves FD_CLOEXEC set when from == to, so clear it.
bool move_fd(int from, int to) {
  if (from < 0) return true;
  if (from == to) return ::fcntl(to, F_SETFD, 0) == 0;
  return ::dup2(from, to) == to;
}

std::string describe(const SpawnOptions& options, const ChildError& e) {
  const std::string& prog = options.argv[0];
  std::string reason = errno_text(e.err);
  switch (static_cast<Step>(e.step)) {
    case Step::kChdir:
      return "cannot execute '" + prog + "': cannot change directory to '" + options.cwd +
             "': " + reason;
    case Step::kExec:
      return "cannot execute '" + prog + "': " + reason;
    case Step::kSetsid:
      return "cannot execute '" + prog + "': setsid failed: " + reason;
    case Step::kPdeathsig:
      return "cannot execute '" + prog + "': prctl(PR_SET_PDEATHSIG) failed: " + reason;
    case Step::kDup:
      return "cannot execute '" + prog + "': dup2 failed: " + reason;
    case Step::kAffinity:
      return "cannot execute '" + prog + "': sched_setaffinity (--numa-binding) failed: " + reason;
  }
  return "cannot execute '" + prog + "': " + reason;
}

}  // namespace

std::string resolve_program(const std::string& name, const std::vector<std::string>& env) {
  if (name.empty()) throw SpawnError("cannot execute '': empty command");
  if (name.find('/') != std::string::npos) return name;
  std::string path = env_value(env, "PATH");
  bool has_path = false;
  for (const std::string& kv : env) has_path = has_path || kv.starts_with("PATH=");
  if (!has_path) path = "/bin:/usr/bin";
  bool denied = false;
  std::size_t pos = 0;
  while (pos <= path.size()) {
    std::size_t colon = std::min(path.find(':', pos), path.size());
    std::string dir = path.substr(pos, colon - pos);
    pos = colon + 1;
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    denied = true;
  }
  throw SpawnError("cannot execute '" + name +
                   "': " + (denied ? "Permission denied" : "No such file or directory"));
}

pid_t spawn_process(const SpawnOptions& options, const std::function<void(pid_t)>& on_forked) {
  if (options.argv.empty()) throw SpawnError("cannot execute '': empty command");
  // Everything the child needs is built here, before fork.
  const std::string program = resolve_program(options.argv[0], options.env);
  std::vector<char*> argv;
  for (const std::string& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& e : options.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const char* cwd = options.cwd.empty() ? nullptr : options.cwd.c_str();

  UniqueFd in_fd, out_fd, err_fd;
  if (options.stdin_fd >= 0) in_fd = above_stdio(options.stdin_fd);
  if (options.stdout_fd >= 0) out_fd = above_stdio(options.stdout_fd);
  if (options.stderr_fd >= 0) err_fd = above_stdio(options.stderr_fd);

  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw_errno("pipe2");
  UniqueFd report_read(pipe_fds[0]);
  UniqueFd report_write(pipe_fds[1]);

  // Fallback upper bound for the close() loop on kernels without close_range (< 5.11).
  rlimit nofile{};
  int max_fd = 1024;
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY) {
    max_fd = static_cast<int>(std::min<rlim_t>(nofile.rlim_cur, 1 << 20));
  }
  const int report_fd = report_write.get();
  const int child_in = in_fd.get();
  const int child_out = out_fd.get();
  const int child_err = err_fd.get();
  const pid_t parent = ::getpid();
  const bool scan_proc = options.scan_proc_fds;
  const int keep_fd = options.keep_fd > STDERR_FILENO ? options.keep_fd : -1;
  // The open-files limit ddprun was started with, for the child (main() raised ours).
  const bool restore_nofile = OpenFilesLimit::raised();
  const rlimit child_nofile = OpenFilesLimit::inherited();
  // The CPU set for sched_setaffinity, allocated here (malloc is not async-signal-safe).
  std::size_t cpu_set_size = 0;
  std::unique_ptr<cpu_set_t, void (*)(cpu_set_t*)> cpu_set(nullptr, [](cpu_set_t* s) {
    if (s) CPU_FREE(s);
  });
  if (!options.cpus.empty()) {
    const int count = *std::max_element(options.cpus.begin(), options.cpus.end()) + 1;
    cpu_set.reset(CPU_ALLOC(count));
    if (!cpu_set) throw_errno("CPU_ALLOC");
    cpu_set_size = CPU_ALLOC_SIZE(count);
    CPU_ZERO_S(cpu_set_size, cpu_set.get());
    for (int c : options.cpus) CPU_SET_S(c, cpu_set_size, cpu_set.get());
  }
  cpu_set_t* const affinity = cpu_set.get();

  pid_t pid = ::fork();
  if (pid < 0)
    throw SpawnError("cannot execute '" + options.argv[0] + "': fork failed: " + errno_text(errno));
  if (pid == 0) {
    // --- child: async-signal-safe calls only from here to execve ---
    if (::setsid() < 0) child_fail(report_fd, Step::kSetsid);
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) child_fail(report_fd, Step::kPdeathsig);
    // The parent may have died between fork and prctl; then no death signal will come.
    if (::getppid() != parent) ::_exit(128 + SIGKILL);  // as if the death signal came
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; ++s) {
      if (s != SIGKILL && s != SIGSTOP) ::sigaction(s, &dfl, nullptr);  // EINVAL for 32/33
    }
    sigset_t empty;
    sigemptyset(&empty);
    ::sigprocmask(SIG_SETMASK, &empty, nullptr);
    if (!move_fd(child_in, STDIN_FILENO) || !move_fd(child_out, STDOUT_FILENO) ||
        !move_fd(child_err, STDERR_FILENO)) {
      child_fail(report_fd, Step::kDup);
    }
    // Every other fd becomes close-on-exec: the report pipe must stay open until execve.
    if ((scan_proc || ::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0) &&
        !cloexec_from_proc()) {
      for (int fd = 3; fd < max_fd; ++fd) {
        if (fd != report_fd && fd != keep_fd) ::close(fd);
      }
    }
    if (keep_fd >= 0 && ::fcntl(keep_fd, F_SETFD, 0) != 0) child_fail(report_fd, Step::kDup);
    if (cwd != nullptr && ::chdir(cwd) != 0) child_fail(report_fd, Step::kChdir);
    if (affinity != nullptr && ::sched_setaffinity(0, cpu_set_size, affinity) != 0) {
      child_fail(report_fd, Step::kAffinity);
    }
    if (restore_nofile) ::setrlimit(RLIMIT_NOFILE, &child_nofile);  // lowers: cannot fail
    ::execve(program.c_str(), argv.data(), envp.data());
    child_fail(report_fd, Step::kExec);
  }

  // --- parent ---
  if (on_forked) on_forked(pid);
  report_write.reset();
  ChildError error{};
  ssize_t got;
  do {
    got = ::read(report_read.get(), &error, sizeof error);
  } while (got < 0 && errno == EINTR);
  if (got == 0) return pid;  // the pipe closed on a successful execve
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (got != static_cast<ssize_t>(sizeof error)) {
    throw SpawnError("cannot execute '" + options.argv[0] + "': the child exited before exec");
  }
  throw SpawnError(describe(options, error));
}

}  // namespace ddprun::launcher
