"""A job for the file timer test (ddprun_test.py file_timer_kills_expired_scope): the real
FileTimerClient of the worker's PyTorch, under TORCHELASTIC_ENABLE_FILE_TIMER=1.

    file_timer.py <out dir>

Attempt 0: rank 0 first writes to the pipe what no client would (a malformed line, an
oversized line, a request whose pid is the agent's), then both ranks enter a scope of the
same name "step" (timers are per pid): rank 0 leaves it at once and sleeps; rank 1 stays
in it past its 1 s and is sent SIGTERM, the signal its client asked for. Attempt 1: both
ranks exit 0 at once (no torch import to wait for). Each rank writes
<out>/<what>.<attempt>.<rank>.
"""
import json
import os
import signal
import stat
import sys
import time

OUT = sys.argv[1]
ATTEMPT = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
RANK = int(os.environ["RANK"])
PIPE = os.environ["TORCHELASTIC_TIMER_FILE"]


def mark(name):
    with open(os.path.join(OUT, f"{name}.{ATTEMPT}.{RANK}"), "w") as f:
        f.write(repr(time.time()))


def raw(text):
    fd = os.open(PIPE, os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


if ATTEMPT == 0:
    from torch.distributed.elastic.timer import FileTimerClient, configure, expires

    configure(FileTimerClient(PIPE, signal=signal.SIGTERM))
    if RANK == 0:
        raw("this is not json\n")
        raw('{"pid": "one", "scope_id": "x", "expiration_time": 1, "signal": 9}\n')
        raw("{" + "x" * 5000 + "}\n")
        # The agent itself (our parent): never a process of the job, so never signalled.
        raw(json.dumps({"version": 1, "pid": os.getppid(), "scope_id": "agent",
                        "expiration_time": time.time() + 0.5, "signal": 9}) + "\n")
        mark("sent")
    else:
        # The oversized line is not one atomic write: no request may land inside it.
        while not os.path.exists(os.path.join(OUT, "sent.0.0")):
            time.sleep(0.05)
    with expires(after=1, scope="step"):
        mark("entered")
        if RANK == 1:
            time.sleep(120)
    mark("left")
    time.sleep(120)
else:
    # The server outlives an attempt: the same pipe is there for the next one.
    if stat.S_ISFIFO(os.stat(PIPE).st_mode):
        mark("done")
