"""A PyTorch-free worker for the stall watchdog tests (ddprun_test.py
stall_watchdog_sees_where_ranks_are).

    spin.py <out dir> spin            spins in `while True: pass` (the line marked SPIN)
    spin.py <out dir> move <seconds>  computes through changing lines for <seconds>
                                      without printing, writes the loop count to
                                      <out>/count, exits 0
    spin.py <out dir> stop            stops itself with SIGSTOP (the line marked STOP)
"""
import os
import signal
import sys
import time

OUT, MODE = sys.argv[1], sys.argv[2]


def work(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


if MODE == "spin":
    while True: pass  # SPIN
elif MODE == "move":
    count, deadline = 0, time.time() + float(sys.argv[3])
    while time.time() < deadline:
        count += 1
        work(20000)
    with open(os.path.join(OUT, "count"), "w") as f:
        f.write(str(count))
elif MODE == "stop":
    os.kill(os.getpid(), signal.SIGSTOP)  # STOP
    time.sleep(60)
