#!/usr/bin/env python3
"""The chroot tiers leave no mount behind (issue 23 item 9): after scripts/torch-chroot
SUITE and a run through scripts/in-chroot (and its python-torch wrapper), nothing is
mounted under the chroot in this mount namespace, so `rm -rf` of the cache can never
reach /tmp or a checkout; during the run, /tmp, the checkout and /dev/shm are visible
inside, and the wrapper's process id is the interpreter's own (signals reach it).

    chroot_test.py trixie|sid        (exit 77 = skipped: not root, or no such chroot)
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCRIPTS = os.path.join(REPO, "scripts")
CACHE = os.environ.get("DDPRUN_CHROOT_CACHE", "/var/cache/ddprun")
WRAPPER = {"trixie": "python-torch26", "sid": "python-torch214"}
SKIP = 77


def mounts_under(root):
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    return [p for p in points if p == root or p.startswith(root + "/")]


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def main(suite):
    root = os.path.join(CACHE, suite)
    if os.geteuid() != 0:
        print("SKIP: not root")
        return SKIP
    if not os.path.isdir(root):
        print(f"SKIP: no {suite} chroot at {root} (scripts/torch-chroot {suite})")
        return SKIP
    # Idempotent and quick once built; the old script mounted here and left the mounts.
    r = subprocess.run([os.path.join(SCRIPTS, "torch-chroot"), suite], capture_output=True,
                       text=True, timeout=600)
    expect(r.returncode == 0, f"torch-chroot {suite} exited {r.returncode}: {r.stderr}")
    expect(not mounts_under(root), f"mounts left by torch-chroot: {mounts_under(root)}")

    with tempfile.TemporaryDirectory(prefix="ddprun_chroot_") as tmp:
        inside = ("test -e /dev/shm && test -f {repo}/CMakeLists.txt && echo hi >{tmp}/mark"
                  " && read line && echo \"$line\"").format(repo=REPO, tmp=tmp)
        p = subprocess.Popen([os.path.join(SCRIPTS, "in-chroot"), suite, "sh", "-c", inside],
                             cwd=tmp, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        # While it runs (blocked on stdin), the host namespace sees none of its mounts.
        during = mounts_under(root)
        out, err = p.communicate("bye\n", timeout=60)
        expect(p.returncode == 0, f"in-chroot exited {p.returncode}: {err}")
        expect(out == "bye\n", f"in-chroot output {out!r}")
        expect(not during, f"mounts visible to the host during the run: {during}")
        with open(os.path.join(tmp, "mark")) as f:
            expect(f.read() == "hi\n", "the chroot's /tmp is not the host's")

        wrapper = os.path.join(SCRIPTS, WRAPPER[suite])
        p = subprocess.Popen([wrapper, "-c", "import os; print(os.getpid())"], cwd=tmp,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = p.communicate(timeout=120)
        expect(p.returncode == 0, f"{wrapper} exited {p.returncode}: {err}")
        expect(out.strip() == str(p.pid),
               f"the interpreter runs as pid {out.strip()}, not the wrapper's {p.pid}")
    left = mounts_under(root)
    expect(not left, f"mounts left under {root}: {left}")
    print(f"chroot_test {suite}: ok")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1]))
    except AssertionError as e:
        print(f"FAIL: {e}")
        sys.exit(1)
