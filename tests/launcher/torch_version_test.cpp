// The workers' torch version found on disk (torch_version.h): Debian's, pip's in a venv,
// a venv over the system's, PYTHONPATH, and none; on directory trees laid out as those
// installers lay them out, plus this machine's own interpreter when it has torch.
#include "launcher/torch_version.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "tests/support/temp_dir.h"

using namespace ddprun::launcher;
namespace fs = std::filesystem;

namespace {

// A temporary tree with directories and executable files.
struct Tree {
  ddprun::test::TempDir d;
  const fs::path& root = d.path;
  void dir(const std::string& rel) { fs::create_directories(root / rel); }
  std::string exe(const std::string& rel) {
    const std::string p = d.write(rel, "");
    fs::permissions(p, fs::perms::owner_all);
    return p;
  }
};

}  // namespace

TEST_CASE("torch version strings", "[torch_version]") {
  CHECK(parse_torch_version("1.13.0a0+gitunknown") == TorchVersion{1, 13});
  CHECK(parse_torch_version("2.6.0+debian") == TorchVersion{2, 6});
  CHECK(parse_torch_version("2.11.0+cu130") == TorchVersion{2, 11});
  CHECK(!parse_torch_version("x.1"));
  CHECK(!parse_torch_version("2"));
  CHECK(nccl_async_error_handling_names(TorchVersion{2, 1}) ==
        std::vector<std::string>{"NCCL_ASYNC_ERROR_HANDLING"});
  CHECK(nccl_async_error_handling_names(TorchVersion{2, 2}) ==
        std::vector<std::string>{"TORCH_NCCL_ASYNC_ERROR_HANDLING"});
  CHECK(nccl_async_error_handling_names(std::nullopt).size() == 2);
}

TEST_CASE("torch found where installers put it", "[torch_version]") {
  Tree t;
  // Debian: /usr/bin/python3, /usr/lib/python3/dist-packages/torch-*.egg-info.
  const std::string debian = t.exe("usr/bin/python3");
  t.dir("usr/lib/python3/dist-packages/torch-1.13.0a0+gitunknown.egg-info");
  t.dir("usr/lib/python3/dist-packages/torchvision-0.14.1.egg-info");
  CHECK(find_torch_version(debian, {}) == TorchVersion{1, 13});
  // By name through PATH.
  CHECK(
      find_torch_version("python3", {{"PATH", "/nonexistent:" + (t.root / "usr/bin").string()}}) ==
      TorchVersion{1, 13});
  // pip in a venv: <venv>/lib/python3.12/site-packages/torch-2.11.0.dist-info, and the
  // venv's python3 a symlink to the system one: the venv's own torch wins.
  t.dir("venv/lib/python3.12/site-packages/torch-2.11.0+cu130.dist-info");
  t.dir("venv/bin");
  fs::create_symlink(debian, t.root / "venv/bin/python3");
  CHECK(find_torch_version((t.root / "venv/bin/python3").string(), {}) == TorchVersion{2, 11});
  // A --system-site-packages venv without torch of its own: the base's.
  fs::create_directories(t.root / "bare/bin");
  fs::create_symlink(debian, t.root / "bare/bin/python3");
  CHECK(find_torch_version((t.root / "bare/bin/python3").string(), {}) == TorchVersion{1, 13});
  // A venv made without --system-site-packages (pyvenv.cfg) sees no base torch: unknown,
  // as its workers would find (issue 31 item 7); with it, the base's.
  fs::create_directories(t.root / "iso/bin");
  fs::create_symlink(debian, t.root / "iso/bin/python3");
  t.d.write("iso/pyvenv.cfg", "home = /usr/bin\ninclude-system-site-packages = false\n");
  CHECK(!find_torch_version((t.root / "iso/bin/python3").string(), {}));
  t.d.write("iso/pyvenv.cfg", "home = /usr/bin\ninclude-system-site-packages = True\n");
  CHECK(find_torch_version((t.root / "iso/bin/python3").string(), {}) == TorchVersion{1, 13});
  // PYTHONPATH comes first.
  t.dir("pp/torch-2.6.0+debian.egg-info");
  CHECK(find_torch_version(debian, {{"PYTHONPATH", (t.root / "pp").string()}}) ==
        TorchVersion{2, 6});
  // Nothing: a wrapper script elsewhere, or no interpreter at all.
  CHECK(!find_torch_version(t.exe("wrap/python-torch26"), {}));
  CHECK(!find_torch_version("no-such-python", {{"PATH", t.root.string()}}));
}

TEST_CASE("this machine's python3 with torch", "[torch_version]") {
  std::error_code ec;
  bool debian_torch = false;
  for (fs::directory_iterator it("/usr/lib/python3/dist-packages", ec), end; !ec && it != end;
       it.increment(ec)) {
    debian_torch = debian_torch || it->path().filename().string().rfind("torch-1.13", 0) == 0;
  }
  if (!debian_torch) {
    WARN("no Debian python3-torch 1.13 here: not checked");
    return;
  }
  CHECK(find_torch_version("/usr/bin/python3", {}) == TorchVersion{1, 13});
}

TEST_CASE("the PyTorch 2.x chroots' python3, when built here", "[torch_version]") {
  // scripts/torch-chroot's trees (Debian 13: 2.6; Debian sid: 2.14), read from outside.
  int seen = 0;
  for (const char* root :
       {"/var/cache/ddprun/trixie-torch26", "/var/cache/ddprun/trixie", "/var/cache/ddprun/sid"}) {
    const std::string python = std::string(root) + "/usr/bin/python3";
    std::error_code ec;
    bool has_torch = false;
    for (fs::directory_iterator it(std::string(root) + "/usr/lib/python3/dist-packages", ec), end;
         !ec && it != end; it.increment(ec)) {
      has_torch = has_torch || it->path().filename().string().rfind("torch-2.", 0) == 0;
    }
    if (!has_torch || !fs::exists(python, ec)) continue;
    ++seen;
    CAPTURE(root);
    const auto v = find_torch_version(python, {});
    REQUIRE(v);
    CHECK(v->first == 2);
    CHECK(nccl_async_error_handling_names(v) ==
          std::vector<std::string>{"TORCH_NCCL_ASYNC_ERROR_HANDLING"});
  }
  if (seen == 0) WARN("no PyTorch 2.x chroot here: not checked");
}

TEST_CASE("an interpreter the disk look cannot see through is asked", "[torch_version]") {
  Tree t;
  // A wrapper script outside any Python environment, as a pyenv shim or
  // scripts/python-torch26: nothing on disk next to it.
  const std::string wrapper = t.exe("shims/python3");
  {
    std::ofstream f(wrapper);
    f << "#!/bin/sh\nexec /usr/bin/python3 \"$@\"\n";
  }
  CHECK(!find_torch_version(wrapper, {}));
  const std::map<std::string, std::string> env = {{"PATH", "/usr/bin:/bin"}};
  std::error_code ec;
  bool debian_torch = false;
  for (fs::directory_iterator it("/usr/lib/python3/dist-packages", ec), end; !ec && it != end;
       it.increment(ec)) {
    debian_torch = debian_torch || it->path().filename().string().rfind("torch-1.13", 0) == 0;
  }
  if (debian_torch) {
    CHECK(ask_torch_version(wrapper, env, std::chrono::seconds(20)) == TorchVersion{1, 13});
  } else {
    WARN("no Debian python3-torch 1.13 here: the answer is not checked");
  }
  // No torch, a failing interpreter, one that hangs: nothing, within the timeout.
  const std::string none = t.exe("none/python3");
  {
    std::ofstream f(none);
    f << "#!/bin/sh\nexec /usr/bin/python3 -S -I \"$@\"\n";  // no site-packages
  }
  CHECK(!ask_torch_version(none, env, std::chrono::seconds(20)));
  CHECK(!ask_torch_version("/nonexistent/python3", env, std::chrono::seconds(5)));
  const std::string hang = t.exe("hang/python3");
  {
    std::ofstream f(hang);
    f << "#!/bin/sh\nexec sleep 30\n";
  }
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(!ask_torch_version(hang, env, std::chrono::milliseconds(300)));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
}
