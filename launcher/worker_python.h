// worker_python.h: which Python interpreter runs the workers, as torchrun's
// PYTHON_EXEC-else-sys.executable: PYTHON_EXEC, else the python of the Python environment
// (venv, virtualenv, uv, conda) whose bin/ ddprun was installed into, else python3 from
// PATH. Used by main.cpp (fills HostFacts::launcher_python; names the interpreter when
// its torch version is unknown), config.cpp and the Agent (the failure report's hint).
// Thread-safety: pure functions over the file system.
#pragma once

#include <map>
#include <string>

namespace ddprun::launcher {

// The interpreter beside the launcher: for each candidate directory, in order
//   1. the directory of `argv0` as the user started it: its dirname when it holds a '/'
//      (made absolute against the working directory), else the first PATH entry holding
//      an executable of that name; never resolved through symlinks, so a venv's
//      bin/ddprun symlink or copy names the venv;
//   2. the directory of `self_exe` (the resolved /proc/self/exe);
// the directory counts only when it is the bin/ of a Python environment (its parent
// holds pyvenv.cfg or conda-meta/), and the answer is its python3, else its python
// (the first executable), unresolved: a venv's bin/python3 is a symlink to the base
// interpreter, and only through the link does Python find the venv's site-packages.
// An environment's python that is a broken link is still the answer (the workers then
// fail naming it, rather than silently run PATH's python without its packages).
// "" when no candidate qualifies (then workers use python3 from PATH). A system bin/
// such as /usr/bin does not count: an activated venv's python3 on PATH must win there.
std::string python_beside_launcher(const std::string& argv0, const std::string& path_env,
                                   const std::string& self_exe);

// The workers' interpreter for messages: its path (PATH resolved) and where it came
// from, e.g. "/usr/bin/python3 (python3 from PATH)", "/v/bin/python3 (PYTHON_EXEC)", with
// ", a broken link to X" when it is one. `env`: ddprun's (PYTHON_EXEC, PATH).
std::string describe_worker_python(const std::string& python,
                                   const std::map<std::string, std::string>& env);

// The same for this process: argv[0], $PATH and /proc/self/exe.
std::string python_beside_this_launcher(const char* argv0);

}  // namespace ddprun::launcher
