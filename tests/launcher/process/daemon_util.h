// daemon_util.h: daemons for the process-layer tests: a shell command that starts one
// (fork, setsid() or setpgid(0, 0), fork again) and waiting for its pid file.
// Used by descendants_test.cpp and orphan_guard_test.cpp. Thread-safety: none needed.
#pragma once

#include <sys/types.h>

#include <cstdlib>
#include <string>

#include "tests/launcher/process/process_test_util.h"

namespace ddprun::launcher::test {

using namespace std::chrono_literals;

// A shell command that starts a daemon: fork, setsid() or setpgid(0, 0), fork again, the
// grandchild writes its pid to `pidfile` and sleeps `seconds`; the intermediate exits.
inline std::string daemon_command(const std::string& how, const std::string& pidfile, int seconds) {
  return "/usr/bin/python3 -c 'import os, sys, time\n"
         "if os.fork(): os.wait(); sys.exit(0)\n"
         "os." +
         std::string(how == "setsid" ? "setsid()" : "setpgid(0, 0)") +
         "\n"
         "if os.fork(): os._exit(0)\n"
         "open(\"" +
         pidfile + ".tmp\", \"w\").write(str(os.getpid()))\n" + "os.rename(\"" + pidfile +
         ".tmp\", \"" + pidfile + "\")\n" + "time.sleep(" + std::to_string(seconds) + ")'";
}

inline pid_t wait_for_pidfile(const std::string& path) {
  pid_t pid = 0;
  eventually(
      [&] {
        pid = static_cast<pid_t>(std::atoi(slurp(path).c_str()));
        return pid > 0;
      },
      30s);
  return pid;
}

inline bool gone(pid_t pid) {  // not even a zombie: reaped
  ProcInfo info;
  return !proc_info(pid, &info);
}

}  // namespace ddprun::launcher::test
