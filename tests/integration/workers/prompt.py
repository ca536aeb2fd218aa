"""A worker for the terminal-like output tests (ddprun_test.py partial_line_reaches_console,
worker_sees_a_terminal).

    prompt.py <out dir> wait    rank 0 writes "prompt> " with no newline, records the time
                                in <out>/wrote, waits for <out>/go, then ends the line with
                                "answer"; rank 1 (if any) waits for <out>/shown (the test saw
                                the prompt), then prints "other" and exits.
    prompt.py <out dir> input   records whether stdin, stdout and stderr are terminals and
                                where stdin leads in <out>/tty.<rank>.json; rank 0 then reads
                                a line with input("name? ") and prints "got <line>".
    prompt.py <out dir> facts   records the same, then prints "done" to stdout and stderr.
"""
import json
import os
import sys
import time

OUT, MODE = sys.argv[1], sys.argv[2]
RANK = int(os.environ["LOCAL_RANK"])


def path(name):
    return os.path.join(OUT, name)


def wait_for(name):
    while not os.path.exists(path(name)):
        time.sleep(0.005)


if MODE == "wait":
    if RANK == 0:
        t = time.time()
        sys.stdout.write("prompt> ")
        sys.stdout.flush()
        with open(path("wrote.tmp"), "w") as f:
            f.write(repr(t))
        os.rename(path("wrote.tmp"), path("wrote"))
        wait_for("go")
        print("answer")
    else:
        wait_for("shown")
        print("other")
elif MODE in ("input", "facts"):
    facts = {name: getattr(sys, name).isatty() for name in ("stdin", "stdout", "stderr")}
    facts["stdin_target"] = os.path.realpath("/proc/self/fd/0")
    with open(path(f"tty.{RANK}.json"), "w") as f:
        json.dump(facts, f)
    if MODE == "facts":
        print("done")
        print("done", file=sys.stderr)
    elif RANK == 0:
        line = input("name? ")
        print("got " + line)
