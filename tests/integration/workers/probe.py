"""Integration-test worker without torch: records what it was started with, then acts.

argv: <out_dir> <token> [mode ...]. Writes <out_dir>/env.<RANK>.json (environment, argv,
pid, pgid) and <out_dir>/pids (one "rank pid" line per process, grandchildren included).
Modes, applied in order:
  grandchild       start a `python -c sleep` grandchild carrying <token> in its argv
  trap             on SIGTERM/SIGINT/SIGHUP: write <out_dir>/got.<RANK>.<SIGNAME>, exit 0
  usr1-exit        on SIGUSR1: write <out_dir>/got.<RANK>.SIGUSR1 and exit 0
  usr1-note        on SIGUSR1: write <out_dir>/got.<RANK>.SIGUSR1 and keep running
  sleep            sleep until killed
  exit=<code>      exit with <code> if this is rank --rank (see rank=)
  rank=<r>         restrict the exit= / fail-first modes to rank r
  fail-first       exit 1 on attempt 0 (TORCHELASTIC_RESTART_COUNT == 0)
  print=<text>     print <text> to stdout and "err:<text>" to stderr
  raise            raise ValueError from a torch `@record` entry point (writes the error
                   file), if this is rank --rank (imports torch: seconds of CPU)
  kill=<SIGNAME>   kill itself with that signal, if this is rank --rank
"""
import json
import os
import signal
import subprocess
import sys
import time

out_dir, token, modes = sys.argv[1], sys.argv[2], sys.argv[3:]
rank = os.environ.get("RANK", "?")


def note(line):
    with open(os.path.join(out_dir, "pids"), "a") as f:
        f.write(line + "\n")


# Written whole or not at all: the launcher may stop this worker mid-write (another rank
# failed first), and a reader must never find a cut file.
env_file = os.path.join(out_dir, f"env.{rank}.json")
with open(env_file + ".tmp", "w") as f:
    json.dump({"env": dict(os.environ), "argv": sys.argv, "pid": os.getpid(),
               "pgid": os.getpgid(0), "sid": os.getsid(0)}, f)
os.replace(env_file + ".tmp", env_file)
note(f"{rank} {os.getpid()}")

only_rank = None
for m in modes:
    if m.startswith("rank="):
        only_rank = m.split("=", 1)[1]
mine = only_rank is None or only_rank == rank


def note_signal(signo, _frame):
    name = signal.Signals(signo).name
    open(os.path.join(out_dir, f"got.{rank}.{name}"), "w").close()


def on_signal(signo, frame):
    note_signal(signo, frame)
    sys.exit(0)


for m in modes:
    if m == "grandchild":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", token])
        note(f"{rank}-child {child.pid}")
    elif m == "trap":
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, on_signal)
    elif m == "usr1-exit":
        signal.signal(signal.SIGUSR1, on_signal)
    elif m == "usr1-note":
        signal.signal(signal.SIGUSR1, note_signal)
    elif m.startswith("print="):
        print(m[6:], flush=True)
        print("err:" + m[6:], file=sys.stderr, flush=True)
    elif m.startswith("exit=") and mine:
        sys.exit(int(m[5:]))
    elif m == "fail-first" and mine and os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
        sys.exit(1)
    elif m == "raise" and mine:
        from torch.distributed.elastic.multiprocessing.errors import record

        @record
        def entry():
            raise ValueError(f"rank {rank} failed on purpose")
        entry()
    elif m.startswith("kill=") and mine:
        os.kill(os.getpid(), signal.Signals[m[5:]])
    elif m == "sleep":
        open(os.path.join(out_dir, f"ready.{rank}"), "w").close()
        while True:
            time.sleep(0.5)
