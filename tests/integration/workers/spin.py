"""A PyTorch-free worker for the stall watchdog tests (ddprun_test.py
stall_watchdog_sees_where_ranks_are).

    spin.py <out dir> spin            spins in `while True: pass` (the line marked SPIN)
    spin.py <out dir> move <seconds>  computes through changing lines for <seconds>
                                      without printing, writes the loop count to
                                      <out>/count, exits 0
    spin.py <out dir> stop            stops itself with SIGSTOP (the line marked STOP)
    spin.py <out dir> chatty <lines>  prints <lines> lines of 100 bytes, exits 0
    spin.py <out dir> reexec <secs>   moves for 1.5 s, then re-execs itself (os.execv) as
                                      `move <secs>`
    spin.py <out dir> wrap <secs>     runs `move <secs>` as a child (subprocess.run) and
                                      waits for it, as a wrapper script does
    spin.py <out dir> thread <secs>   runs `move <secs>` in a thread that the main thread
                                      joins
    spin.py <out dir> thread-spin     spins (the line marked THREAD-SPIN) in a thread that
                                      the main thread joins
    spin.py <out dir> import <secs>   imports a module whose top level computes for about
                                      <secs> in one C call (as loading libtorch does),
                                      writes <out>/count, exits 0
    spin.py <out dir> ccall <secs>    the same C call outside any import (the line marked
                                      CCALL)
"""
import os
import signal
import subprocess
import sys
import threading
import time

OUT, MODE = sys.argv[1], sys.argv[2]


def work(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


def move(seconds):
    count, deadline = 0, time.time() + seconds
    while time.time() < deadline:
        count += 1
        work(20000)
    with open(os.path.join(OUT, "count"), "w") as f:
        f.write(str(count))


def spin():
    while True: pass  # THREAD-SPIN


if MODE == "spin":
    while True: pass  # SPIN
elif MODE == "move":
    move(float(sys.argv[3]))
elif MODE == "chatty":
    rank = os.environ.get("RANK", "?")
    for i in range(int(sys.argv[3])):
        print(f"rank {rank} line {i:08d} ".ljust(99, "x"))
elif MODE == "reexec":
    move(1.5)
    os.execv(sys.executable, [sys.executable, __file__, OUT, "move", sys.argv[3]])
elif MODE == "wrap":
    subprocess.run([sys.executable, __file__, OUT, "move", sys.argv[3]], check=True)
elif MODE == "thread":
    t = threading.Thread(target=move, args=(float(sys.argv[3]),))
    t.start()
    t.join()
elif MODE == "thread-spin":
    t = threading.Thread(target=spin, daemon=True)
    t.start()
    t.join()
elif MODE in ("import", "ccall"):
    # One call of hashlib's PBKDF2 (C, without the GIL: the sampler thread sees the main
    # thread on one line), its iterations measured to take at least <secs>: the fastest of
    # five samples, since one that a busy machine preempted made the call short (a CI run's
    # 'ccall 6' ended before the 2 s stall timeout).
    import hashlib

    def sample(n):
        t0 = time.monotonic()
        hashlib.pbkdf2_hmac("sha256", b"ddprun", b"salt", n)
        return time.monotonic() - t0

    n = 20000
    n = int(n * float(sys.argv[3]) / max(min(sample(n) for _ in range(5)), 1e-4))
    if MODE == "ccall":
        hashlib.pbkdf2_hmac("sha256", b"ddprun", b"salt", n)  # CCALL
    else:
        sys.path.insert(0, OUT)
        with open(os.path.join(OUT, "slow_module.py"), "w") as f:
            f.write("import hashlib\nhashlib.pbkdf2_hmac('sha256', b'ddprun', b'salt', %d)\n" % n)
        import slow_module  # noqa: F401
    with open(os.path.join(OUT, "count"), "w") as f:
        f.write(str(n))
elif MODE == "stop":
    os.kill(os.getpid(), signal.SIGSTOP)  # STOP
    time.sleep(60)
