"""Integration-test worker without torch: starts two daemons that leave its process group.

argv: <out_dir> <token> exit|sleep. Each daemon double-forks, one calling setsid() and the
other setpgid(0, 0) in between, writes its pid to <out_dir>/daemon.<RANK>.<how>, and
sleeps in a `python -c` whose argv carries <token>. The worker waits for both files, then
exits 0 (`exit`) or writes <out_dir>/ready.<RANK> and sleeps until killed (`sleep`).
"""
import os
import sys
import time

out_dir, token, then = sys.argv[1:4]
rank = os.environ.get("RANK", "?")
files = []
for how in ("setsid", "setpgid"):
    path = os.path.join(out_dir, f"daemon.{rank}.{how}")
    files.append(path)
    if os.fork() == 0:
        if how == "setsid":
            os.setsid()
        else:
            os.setpgid(0, 0)
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            with open(path + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename(path + ".tmp", path)
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", token])
        os._exit(0)
    os.wait()
deadline = time.monotonic() + 60
while not all(os.path.exists(f) for f in files) and time.monotonic() < deadline:
    time.sleep(0.02)
if then == "sleep":
    open(os.path.join(out_dir, f"ready.{rank}"), "w").close()
    while True:
        time.sleep(0.5)
