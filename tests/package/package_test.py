#!/usr/bin/env python3
"""package_test.py: tests of what scripts/package writes into dist/ (ctest label package)
and of the man pages and completion generated at build time.

    package_test.py docs BUILD_DIR                 man pages and bash/zsh completion
    package_test.py binaries DIST VERSION          .deb and wheel contents, NEEDED, glibc
    package_test.py deb DIST VERSION               apt install/purge in the sid chroot
    package_test.py wheel DIST VERSION             pip install/uninstall in a venv, sid chroot

deb and wheel run themselves again inside the Debian sid chroot (scripts/in-chroot sid,
built by scripts/torch-chroot sid) with the mode inside-deb / inside-wheel, and there run a
2-worker DDP job with sid's PyTorch. Exit 77 (skipped) when dist/ has no artifacts of
VERSION or there is no sid chroot, unless DDPRUN_REQUIRE_PACKAGE=1 (scripts/test sets it).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
TAG = "py3-none-manylinux_2_34_x86_64"
WORKER = os.path.join(HERE, "ddp_worker.py")


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def skip(msg):
    if os.environ.get("DDPRUN_REQUIRE_PACKAGE") == "1":
        fail(msg + " (DDPRUN_REQUIRE_PACKAGE=1)")
    print("SKIP: " + msg, flush=True)
    sys.exit(77)


def run(cmd, **kw):
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, **kw)


def out(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, **kw).stdout


def artifacts(dist, version):
    deb = os.path.join(dist, "ddprun_%s_amd64.deb" % version)
    whl = os.path.join(dist, "ddprun-%s-%s.whl" % (version, TAG))
    for p in (deb, whl):
        if not os.path.exists(p):
            skip("%s missing: run scripts/package first" % p)
    return deb, whl


# ---- docs: generated from the programs' own options ------------------------------------


def long_options(help_text):
    """The long option names --help lists (first word of each option line)."""
    names = set()
    for line in help_text.split("\n"):
        m = re.match(r"^\s+(-[^\s]+)", line)
        if m:
            names |= {n for n in m.group(1).split(",") if n.startswith("--")}
    return names


def test_docs(build):
    build = os.path.abspath(build)
    pkg = os.path.join(build, "packaging")
    progs = {"ddprun": os.path.join(build, "launcher", "ddprun"),
             "ddprun-store": os.path.join(build, "store", "ddprun-store")}
    for name, exe in progs.items():
        man = os.path.join(pkg, "man", name + ".1")
        page = out(["man", "-l", "-Tutf8", man], env=dict(os.environ, MANWIDTH="200",
                                                          MAN_KEEP_FORMATTING="0"))
        page = re.sub(r".\x08", "", page).replace("\u2010", "-")
        helps = [out([exe, "--help"])]
        if name == "ddprun-store":
            app = json.load(open(os.path.join(pkg, name + ".json")))
            helps += [out([exe, s["name"], "--help"]) for s in app["subcommands"]]
        wanted = set().union(*(long_options(h) for h in helps))
        missing = sorted(o for o in wanted if o not in page)
        if missing:
            fail("%s(1) lacks options that --help shows: %s" % (name, missing))
        warn = subprocess.run(["groff", "-man", "-ww", "-z", man], stderr=subprocess.PIPE,
                              text=True).stderr
        if warn.strip():
            fail("groff warns about %s: %s" % (man, warn))
        version = out([exe, "--version"])
        m = re.match(re.escape(name) + r" (\d+\.\d+\.\d+)( \(git ([0-9a-f]{12})\))?", version)
        if not m or m.group(1) != app_version(pkg, name):
            fail("%s --version %r does not show %s" % (name, version, app_version(pkg, name)))
        if os.path.exists(os.path.join(SRC, ".git")) and not m.group(3):
            fail("%s --version %r, built from a git checkout, lacks the commit" % (name, version))
        bash_file = os.path.join(pkg, "bash", name)
        # The completion offers every long option --help shows.
        words = ["ddprun", "--"] if name == "ddprun" else ["ddprun-store", "serve", "--"]
        got = complete_bash(bash_file, words)
        expect = long_options(helps[0] if name == "ddprun" else out([exe, "serve", "--help"]))
        if not expect <= set(got):
            fail("bash completion of %s misses %s" % (name, sorted(expect - set(got))))
        run(["zsh", "-n", os.path.join(pkg, "zsh", "_" + name)])
    # Choices, subcommands, and files after the training script.
    store_bash = os.path.join(pkg, "bash", "ddprun-store")
    if complete_bash(store_bash, ["ddprun-store", "se"]) != ["serve", "set"]:
        fail("ddprun-store subcommands do not complete")
    if complete_bash(store_bash, ["ddprun-store", "serve", "--log-level", "de"]) != ["debug"]:
        fail("--log-level choices do not complete")
    ddprun_bash = os.path.join(pkg, "bash", "ddprun")
    # The status verb (outside CLI11: the "verbs" of --dump-cli-json): the word, its
    # options and their choices, and its section of the man page.
    if complete_bash(ddprun_bash, ["ddprun", "sta"], files=["start.py"]) != ["start.py", "status"]:
        fail("the status verb does not complete beside the files")
    if complete_bash(ddprun_bash, ["ddprun", "status", "--js"]) != ["--json"]:
        fail("ddprun status options do not complete")
    if complete_bash(ddprun_bash, ["ddprun", "status", "--rdzv-backend", ""]) != \
            ["c10d", "static", "etcd-v3"]:
        fail("ddprun status --rdzv-backend choices do not complete")
    if complete_bash(ddprun_bash, ["ddprun", "status", "--rdzv-id", ""], files=["train.py"]):
        fail("ddprun status --rdzv-id completes file names")
    with open(os.path.join(pkg, "man", "ddprun.1"), encoding="utf-8") as f:
        man = f.read()
    if '.SH "DDPRUN STATUS"' not in man or "\\-\\-watch" not in man:
        fail("the man page has no section for ddprun status")
    if complete_bash(ddprun_bash, ["ddprun", "train.py", "--sta"]):
        fail("options completed after the training script")
    # Values: choices where there are some, file names only where the value is a path.
    if complete_bash(ddprun_bash, ["ddprun", "--rdzv-backend", ""]) != ["static", "c10d", "etcd-v3"]:
        fail("--rdzv-backend choices do not complete")
    if complete_bash(ddprun_bash, ["ddprun", "--nproc-per-node", "g"]) != ["gpu"]:
        fail("--nproc-per-node words do not complete")
    for option in ("-r", "--tee", "--master-port", "--rdzv-endpoint"):
        got = complete_bash(ddprun_bash, ["ddprun", option, ""], files=["train.py"])
        if got:
            fail("%s completes file names: %s" % (option, got))
    for option in ("--log-dir", "--hostfile"):
        if complete_bash(ddprun_bash, ["ddprun", option, "tr"], files=["train.py"]) != ["train.py"]:
            fail("%s does not complete file names" % option)
    print("docs: man pages and completion cover every option of --help")


def app_version(pkg, name):
    return json.load(open(os.path.join(pkg, name + ".json")))["version"]


def complete_bash(script, words, files=()):
    """COMPREPLY of the completion function for `words` (the last one being completed), in
    a directory holding `files`."""
    fn = "_" + os.path.basename(script).replace("-", "_")
    prog = ("source /usr/share/bash-completion/bash_completion; source \"$1\"; shift;"
            "COMP_WORDS=(\"$@\"); COMP_CWORD=$(($# - 1)); COMP_LINE=\"$*\";"
            "COMP_POINT=${#COMP_LINE}; COMPREPLY=(); %s; printf '%%s\\n' \"${COMPREPLY[@]}\"" % fn)
    with tempfile.TemporaryDirectory() as empty:  # no files to complete but `files`
        for name in files:
            open(os.path.join(empty, name), "w").close()
        res = out(["bash", "-c", prog, "complete", script] + words, cwd=empty)
    return [w for w in res.split("\n") if w]


# ---- binaries: what is packaged is self-contained --------------------------------------


def test_binaries(dist, version):
    deb, whl = artifacts(dist, version)
    with tempfile.TemporaryDirectory() as tmp:
        run(["dpkg-deb", "-x", deb, os.path.join(tmp, "deb")])
        with zipfile.ZipFile(whl) as z:
            z.extractall(os.path.join(tmp, "whl"))
            names = z.namelist()
        deb_files = out(["dpkg-deb", "-c", deb])
        for f in ("./usr/bin/ddprun", "./usr/bin/ddprun-store",
                  "./usr/share/man/man1/ddprun.1.gz", "./usr/share/man/man1/ddprun-store.1.gz",
                  "./usr/share/bash-completion/completions/ddprun",
                  "./usr/share/zsh/vendor-completions/_ddprun",
                  "./usr/share/doc/ddprun/copyright", "./usr/share/doc/ddprun/README.md"):
            if f not in deb_files:
                fail("%s lacks %s" % (deb, f))
        control = out(["dpkg-deb", "-f", deb, "Version"]).strip()
        if control != version:
            fail("%s has Version %s, not %s" % (deb, control, version))
        data = "ddprun-%s.data/scripts/" % version
        for prog in ("ddprun", "ddprun-store"):
            if data + prog not in names:
                fail("%s lacks %s" % (whl, data + prog))
        wheel_meta = open(os.path.join(tmp, "whl", "ddprun-%s.dist-info" % version, "WHEEL")).read()
        if "Tag: " + TAG not in wheel_meta:
            fail("WHEEL lacks Tag: " + TAG)
        bins = [os.path.join(tmp, "deb", "usr", "bin", p) for p in ("ddprun", "ddprun-store")]
        bins += [os.path.join(tmp, "whl", data, p) for p in ("ddprun", "ddprun-store")]
        run([os.path.join(SRC, "packaging", "check-binaries")] + bins)
        for b in bins:
            os.chmod(b, 0o755)
            v = out([b, "--version"])
            if version not in v:
                fail("%s --version prints %r, not %s" % (b, v, version))
    print("binaries: the .deb and the wheel hold self-contained %s binaries" % version)


# ---- in the sid chroot -------------------------------------------------------------------


def in_sid(mode, dist, version):
    deb, whl = artifacts(dist, version)
    in_chroot = os.path.join(SRC, "scripts", "in-chroot")
    if not os.access(in_chroot, os.X_OK):
        skip("no scripts/in-chroot")
    if os.geteuid() != 0:
        skip("not root: no sid chroot")
    root = os.path.join(os.environ.get("DDPRUN_CHROOT_CACHE", "/var/cache/ddprun"), "sid")
    if not os.path.exists(os.path.join(root, "usr/bin/python3")):
        skip("no sid chroot at %s (scripts/torch-chroot sid builds it)" % root)
    # Under `flock` on the chroot's lock: one apt/pip test at a time in the shared chroot.
    cmd = ["flock", root + ".lock", in_chroot, "sid", "python3", os.path.abspath(__file__),
           "inside-" + mode, os.path.abspath(dist), version]
    rc = subprocess.run(cmd).returncode
    sys.exit(rc)


SKIP_TREES = ("/proc", "/dev", "/sys", "/tmp", "/run", "/var/cache", "/var/log", "/var/lib/dpkg",
              "/var/lib/apt", "/var/lib/man-db", "/var/lib/ucf", "/etc/ld.so.cache", SRC)


def file_list(top, skip=()):
    found = set()
    for d, dirs, files in os.walk(top):
        dirs[:] = [x for x in dirs if os.path.join(d, x) not in skip]
        for x in dirs + files:
            p = os.path.join(d, x)
            if p not in skip and "__pycache__" not in p:
                found.add(p)
    return found


def ddp_job(ddprun, tmp, env):
    """Runs a 2-worker gloo all_reduce; returns the workers' reports."""
    report = os.path.join(tmp, "report")
    os.makedirs(report, exist_ok=True)
    run([ddprun, "--standalone", "--nproc-per-node=2", WORKER, report], env=env, cwd=tmp,
        timeout=180)
    got = [json.load(open(os.path.join(report, f))) for f in sorted(os.listdir(report))]
    if len(got) != 2 or any(r["sum"] != 3.0 for r in got):
        fail("the 2-worker job reported %s" % got)
    return got


def inside_deb(dist, version):
    deb = os.path.join(dist, "ddprun_%s_amd64.deb" % version)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive", USE_LIBUV="0")
    if os.path.exists("/usr/bin/ddprun"):
        run(["dpkg", "--purge", "ddprun"], env=env)  # a leftover of an earlier run
    before = file_list("/", SKIP_TREES)
    with tempfile.TemporaryDirectory() as tmp:
        # A copy readable by apt's unprivileged download user (_apt).
        local = os.path.join(tmp, os.path.basename(deb))
        shutil.copyfile(deb, local)
        os.chmod(tmp, 0o755)
        run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", local], env=env)
        try:
            page = out(["man", "-w", "ddprun"]).strip()
            if page != "/usr/share/man/man1/ddprun.1.gz":
                fail("man -w ddprun says %s" % page)
            out(["man", "-w", "ddprun-store"])
            if version not in out(["ddprun", "--version"]):
                fail("ddprun --version lacks " + version)
            got = ddp_job("ddprun", tmp, env)
            print("deb: 2-worker job with torch %s ran: %s" % (got[0]["torch"], got))
        finally:
            run(["apt-get", "remove", "-y", "-qq", "ddprun"], env=env)
            left = sorted(file_list("/", SKIP_TREES) - before)
            run(["dpkg", "--purge", "ddprun"], env=env)  # if remove left any state
    if left:
        fail("apt remove left %s" % left)
    print("deb: installed with apt in sid, man -w ddprun found the page, apt remove left nothing")


def inside_wheel(dist, version):
    whl = os.path.join(dist, "ddprun-%s-%s.whl" % (version, TAG))
    with tempfile.TemporaryDirectory() as tmp:
        venv = os.path.join(tmp, "venv")
        run(["python3", "-m", "venv", "--system-site-packages", venv])
        before = file_list(venv)
        run([os.path.join(venv, "bin", "pip"), "install", "--no-index", "-q", whl])
        ddprun = os.path.join(venv, "bin", "ddprun")
        for p in (ddprun, os.path.join(venv, "bin", "ddprun-store")):
            if not os.access(p, os.X_OK):
                fail("pip install did not put %s beside the venv's python" % p)
        # PATH without the venv: the workers must still be the venv's python (the python
        # beside ddprun), which sees the venv's site-packages.
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHON_EXEC")}
        env.update(PATH="/usr/sbin:/usr/bin:/sbin:/bin", USE_LIBUV="0")
        got = ddp_job(ddprun, tmp, env)
        prefixes = sorted({r["prefix"] for r in got})
        if prefixes != [venv]:
            fail("workers ran with sys.prefix %s (executable %s), not the venv %s" % (
                prefixes, sorted({r["executable"] for r in got}), venv))
        print("wheel: workers ran %s (sys.prefix %s), torch %s" % (
            got[0]["executable"], got[0]["prefix"], got[0]["torch"]))
        run([os.path.join(venv, "bin", "pip"), "uninstall", "-y", "-q", "ddprun"])
        left = sorted(file_list(venv) - before)  # files and folders
        if left:
            fail("pip uninstall left %s" % left)
    print("wheel: pip install put ddprun beside the venv's python; uninstall left no file")


def main():
    try:
        dispatch(sys.argv[1], sys.argv[2:])
    except subprocess.CalledProcessError as e:
        fail("%s exited with %s" % (" ".join(map(str, e.cmd)), e.returncode))
    except subprocess.TimeoutExpired as e:
        fail("%s did not end within %s s" % (" ".join(map(str, e.cmd)), e.timeout))


def dispatch(mode, args):
    if mode == "docs":
        test_docs(*args)
    elif mode == "binaries":
        test_binaries(*args)
    elif mode in ("deb", "wheel"):
        in_sid(mode, *args)
    elif mode == "inside-deb":
        inside_deb(*args)
    elif mode == "inside-wheel":
        inside_wheel(*args)
    else:
        sys.exit("unknown mode " + mode)


if __name__ == "__main__":
    main()
