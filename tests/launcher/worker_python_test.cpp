// The worker interpreter beside the launcher (worker_python.h), on real directory trees:
// a venv (pyvenv.cfg), a conda env (conda-meta/) and a system bin/ that does not count.
#include "launcher/worker_python.h"

#include <catch2/catch.hpp>
#include <filesystem>

#include "tests/support/temp_dir.h"

using namespace ddprun::launcher;
namespace fs = std::filesystem;

namespace {

// A temporary tree with executable (or plain) files.
struct Tree {
  ddprun::test::TempDir dir;
  const fs::path& root = dir.path;
  fs::path file(const std::string& rel, bool exec) {
    const fs::path p = dir.write(rel, "#!/bin/sh\n");
    fs::permissions(p, exec ? fs::perms::owner_all : fs::perms::owner_read);
    return p;
  }
};

}  // namespace

TEST_CASE("a venv's bin: its python3, unresolved", "[worker_python]") {
  Tree t;
  t.file("base/bin/python3.11", true);
  t.file("venv/pyvenv.cfg", false);
  fs::create_directories(t.root / "venv/bin");
  fs::create_symlink(t.root / "base/bin/python3.11", t.root / "venv/bin/python3");
  const fs::path ddprun = t.file("build/ddprun", true);
  fs::create_symlink(ddprun, t.root / "venv/bin/ddprun");
  const std::string want = (t.root / "venv/bin/python3").string();
  // Started by its path: the symlink's directory, not the binary's.
  CHECK(python_beside_launcher((t.root / "venv/bin/ddprun").string(), "/nonexistent",
                               ddprun.string()) == want);
  // Started by name: the PATH entry that held it.
  CHECK(python_beside_launcher("ddprun", "/nonexistent::" + (t.root / "venv/bin").string(),
                               ddprun.string()) == want);
  // A copy in the venv (argv[0] elsewhere, e.g. a wrapper's exec -a): /proc/self/exe.
  CHECK(python_beside_launcher("ddprun", "/nonexistent", (t.root / "venv/bin/ddprun").string()) ==
        want);
  // The binary outside any environment: nothing.
  CHECK(python_beside_launcher(ddprun.string(), "", ddprun.string()).empty());
}

TEST_CASE("a conda env's bin: python3, else python", "[worker_python]") {
  Tree t;
  fs::create_directories(t.root / "env/conda-meta");
  t.file("env/bin/python3", false);  // not executable: skipped
  t.file("env/bin/python", true);
  const fs::path ddprun = t.file("env/bin/ddprun", true);
  CHECK(python_beside_launcher(ddprun.string(), "", ddprun.string()) ==
        (t.root / "env/bin/python").string());
}

TEST_CASE("a bin/ that is no Python environment does not count", "[worker_python]") {
  Tree t;
  t.file("usr/bin/python3", true);
  const fs::path ddprun = t.file("usr/bin/ddprun", true);
  CHECK(python_beside_launcher(ddprun.string(), "", ddprun.string()).empty());
  // A venv without any python in bin/ does not count either.
  t.file("venv/pyvenv.cfg", false);
  const fs::path in_venv = t.file("venv/bin/ddprun", true);
  CHECK(python_beside_launcher(in_venv.string(), "", in_venv.string()).empty());
  CHECK(python_beside_launcher("", "", "").empty());
}

TEST_CASE("a venv whose python link is broken is still named, not PATH's python",
          "[worker_python]") {
  // Issue 31 item 20: its base interpreter removed or upgraded; the workers must fail on
  // it loudly, not silently run PATH's python without the venv's packages.
  Tree t;
  t.file("venv/pyvenv.cfg", false);
  fs::create_directories(t.root / "venv/bin");
  fs::create_symlink(t.root / "base/bin/python3.9", t.root / "venv/bin/python3");
  const fs::path ddprun = t.file("venv/bin/ddprun", true);
  const std::string want = (t.root / "venv/bin/python3").string();
  CHECK(python_beside_launcher(ddprun.string(), "/nonexistent", ddprun.string()) == want);
  CHECK(describe_worker_python(want, {}) ==
        want + " (the Python environment ddprun is installed in, a broken link to " +
            (t.root / "base/bin/python3.9").string() + ")");
}

TEST_CASE("the workers' interpreter as messages name it", "[worker_python]") {
  // Issue 31 item 7: the report names the interpreter and where it came from.
  Tree t;
  t.file("a/python3", false);  // not executable: skipped, as execvp would
  const fs::path py = t.file("b/python3", true);
  const std::string path = (t.root / "a").string() + ":" + (t.root / "b").string();
  CHECK(describe_worker_python("python3", {{"PATH", path}}) ==
        py.string() + " (python3 from PATH)");
  CHECK(describe_worker_python("/opt/py/bin/python3", {{"PYTHON_EXEC", "/opt/py/bin/python3"}}) ==
        "/opt/py/bin/python3 (PYTHON_EXEC)");
  CHECK(describe_worker_python("python3", {{"PATH", "/nonexistent"}}) ==
        "python3 (python3 from PATH)");
}
