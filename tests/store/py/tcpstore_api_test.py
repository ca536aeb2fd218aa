"""Every Store method of the PyTorch under test (1.13, or 2.6 or 2.14 in their chroots) against
ddprun-store: the client half (tcpstore_api_client.py) runs under $DDPRUN_TEST_PYTHON,
this half runs ddprun-store on the host and inspects it afterwards with the CLI.
Usage: tcpstore_api_test.py PATH/TO/ddprun-store   (exit 77 = skipped: no torch there)"""
import os
import subprocess
import sys

from store_proc import SKIP, StoreProcess, cli, watchdog

PYTHON = os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3")
CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tcpstore_api_client.py")


def main(binary):
    if not os.access(PYTHON, os.X_OK):
        print(f"SKIP: no interpreter at {PYTHON}")
        return SKIP
    watchdog(200)
    with StoreProcess(binary) as store:
        p = subprocess.run([PYTHON, CLIENT, str(store.port)], capture_output=True, text=True,
                           timeout=180)
        print(p.stdout + p.stderr, end="")
        if p.returncode == SKIP or (p.returncode == 127 and "in-chroot" in p.stderr):
            print(f"SKIP: no torch in {PYTHON}")
            return SKIP
        if p.returncode != 0:
            print(f"FAIL: client exited {p.returncode}")
            return 1
        rc, out, _ = cli(binary, "keys", f"--addr=127.0.0.1:{store.port}")
        keys = out.split()
        # 1.13 clients put "/" before every key; 2.x clients send keys as given.
        for key in ("k", "cnt", "pre/k", "done", "init/"):
            if not ({key, "/" + key} & set(keys)):
                print(f"FAIL: key {key!r} not in the store: {keys}")
                return 1
        rc, out, _ = cli(binary, "get", f"--addr=127.0.0.1:{store.port}", "init/")
        if rc != 0 or int(out) < 3:
            print(f"FAIL: init/ counted {out!r}, expected at least 3 clients")
            return 1
        if store.stop() != 0:
            print("FAIL: ddprun-store exit status")
            return 1
    print("tcpstore_api_test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
