// descendants.cpp: the child subreaper, the agent's children and the job-token scan (see
// descendants.h). Used by WorkerGroup, ProcessSupervisor and the orphan guard.
#include "launcher/process/descendants.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "base/unique_fd.h"

namespace ddprun::launcher {
std::string read_proc_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  std::string text;
  if (!fd) return text;
  char buf[4096];
  while (true) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  return text;
}

namespace {

// State and parent pid from /proc/<pid>/stat; false if gone.
bool stat_of(pid_t pid, char* state, pid_t* ppid) {
  const std::string stat = read_proc_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  if (close == std::string::npos || close + 4 > stat.size()) return false;
  *state = stat[close + 2];
  *ppid = static_cast<pid_t>(std::strtol(stat.c_str() + close + 4, nullptr, 10));
  return true;
}

// Numeric entries of `dir`.
std::vector<pid_t> numeric_entries(const char* dir) {
  std::vector<pid_t> ids;
  DIR* d = ::opendir(dir);
  if (d == nullptr) return ids;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long id = std::strtol(e->d_name, &end, 10);
    if (*end == '\0' && id > 0) ids.push_back(static_cast<pid_t>(id));
  }
  ::closedir(d);
  return ids;
}

}  // namespace

bool become_child_subreaper() { return ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0; }

std::vector<pid_t> child_pids(pid_t parent) {
  std::vector<pid_t> kids;
  bool listed = false;
  const std::string proc = parent == 0 ? "/proc/self" : "/proc/" + std::to_string(parent);
  for (pid_t tid : numeric_entries((proc + "/task").c_str())) {
    const std::string path = proc + "/task/" + std::to_string(tid) + "/children";
    if (::access(path.c_str(), R_OK) != 0) continue;
    listed = true;
    const std::string text = read_proc_file(path);
    const char* p = text.c_str();
    char* end = nullptr;
    for (long pid = std::strtol(p, &end, 10); end != p; pid = std::strtol(p, &end, 10)) {
      kids.push_back(static_cast<pid_t>(pid));
      p = end;
    }
  }
  if (listed) return kids;
  const pid_t self = parent == 0 ? ::getpid() : parent;
  for (pid_t pid : numeric_entries("/proc")) {
    char state = 0;
    pid_t ppid = 0;
    if (stat_of(pid, &state, &ppid) && ppid == self) kids.push_back(pid);
  }
  return kids;
}

std::string make_job_token() {
  unsigned char raw[16];
  std::size_t have = 0;
  while (have < sizeof raw) {
    ssize_t n = ::getrandom(raw + have, sizeof raw - have, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_errno("getrandom");
    have += static_cast<std::size_t>(n);
  }
  std::string token;
  for (unsigned char c : raw) {
    char hex[3];
    std::snprintf(hex, sizeof hex, "%02x", c);
    token += hex;
  }
  return token;
}

void set_env_entry(std::vector<std::string>& env, std::string_view name, std::string_view value) {
  std::string entry = std::string(name) + "=" + std::string(value);
  for (std::string& kv : env) {
    if (kv.size() > name.size() && kv.compare(0, name.size(), name) == 0 &&
        kv[name.size()] == '=') {
      kv = std::move(entry);
      return;
    }
  }
  env.push_back(std::move(entry));
}

std::optional<std::string_view> find_env_entry(const std::vector<std::string>& env,
                                               std::string_view name) {
  for (const std::string& kv : env) {
    if (kv.size() > name.size() && kv.compare(0, name.size(), name) == 0 &&
        kv[name.size()] == '=') {
      return std::string_view(kv).substr(name.size() + 1);
    }
  }
  return std::nullopt;
}

std::vector<pid_t> processes_with_token(const std::string& token) {
  // The entry as it appears between the NULs of /proc/<pid>/environ.
  std::string entry = std::string(kJobTokenVar) + "=" + token;
  entry.push_back('\0');
  const std::string inner = std::string(1, '\0') + entry;
  const pid_t self = ::getpid();
  std::vector<pid_t> found;
  for (pid_t pid : numeric_entries("/proc")) {
    if (pid == self) continue;
    const std::string env = read_proc_file("/proc/" + std::to_string(pid) + "/environ");
    if (env.compare(0, entry.size(), entry) != 0 && env.find(inner) == std::string::npos) {
      continue;
    }
    char state = 0;
    pid_t ppid = 0;
    if (stat_of(pid, &state, &ppid) && state != 'Z' && state != 'X') found.push_back(pid);
  }
  return found;
}

}  // namespace ddprun::launcher
