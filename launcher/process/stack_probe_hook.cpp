// stack_probe_hook.cpp: the Python text of the stack probe's hook (see stack_probe_hook.h).
#include "launcher/process/stack_probe_hook.h"

namespace ddprun::launcher {
namespace {

// Runs at interpreter start (site.py imports sitecustomize); must never break the worker:
// every failure leaves it without the sampler (or without the flight recorder's dump).
constexpr const char* kStackProbeHook =
    R"PY(# Written by ddprun for --stall-timeout (launcher/process/stack_probe.cpp); removed
# when ddprun ends. A thread samples where the main thread is and reports it to ddprun.
import os as _os
import sys as _sys


# Never found again (the chained import below would find this file).
_here = _os.path.dirname(_os.path.abspath(__file__))
_sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or ".") != _here]


def _ddprun_stack_probe():
    here = _os.environ.pop("DDPRUN_STACK_DIR", None)
    fd = _os.environ.pop("DDPRUN_STACK_FD", None)
    interval = float(_os.environ.pop("DDPRUN_STACK_INTERVAL", "1"))
    # At a stall ddprun asks, by creating <here>/fr_dump, for PyTorch's flight recorder
    # dump of this rank, to be written to this file (flight_recorder_dump below).
    dump_to = _os.environ.pop("DDPRUN_STACK_FR_FILE", None)
    # The program and its children see the user's PYTHONPATH, without this directory.
    if "DDPRUN_STACK_PYTHONPATH" in _os.environ:
        _os.environ["PYTHONPATH"] = _os.environ.pop("DDPRUN_STACK_PYTHONPATH")
    elif here:
        _os.environ.pop("PYTHONPATH", None)
    if fd is None:
        return
    fd = int(fd)
    _os.set_inheritable(fd, False)
    _os.set_blocking(fd, False)
    import _thread
    import time

    main = _thread.get_ident()
    pid = _os.getpid()
    # The start-up timeline (ns since the epoch; 0: not yet): this interpreter up, torch
    # imported, the process group formed, the first collective entered.
    start = [time.time_ns(), 0, 0, 0]
    start_sent = [False]

    def startup():
        if not start[1]:
            torch = _sys.modules.get("torch")
            # importlib sets __spec__._initializing while the module runs.
            if torch is not None and not getattr(getattr(torch, "__spec__", None),
                                                 "_initializing", False):
                start[1] = time.time_ns()
        if start[1] and not start[2]:
            dist = _sys.modules.get("torch.distributed")
            if dist is not None and getattr(dist, "is_initialized", lambda: False)():
                start[2] = time.time_ns()
    period = min(0.02, interval)
    # Frames of the interpreter's library and installed packages (torch's all_reduce,
    # threading) are not the user's: the report also names the innermost frame outside.
    lib = _os.path.dirname(_os.__file__) + _os.sep

    def library(name):
        return (name.startswith(lib) or name.startswith("<") or "/site-packages/" in name
                or "/dist-packages/" in name)

    def joined(frame):
        # The thread whose Thread.join the stack of `frame` waits in (None: none). The
        # threading module is never imported here: imported first by this thread, it
        # would take this thread for the main one.
        threading = _sys.modules.get("threading")
        join = getattr(getattr(threading, "Thread", None), "join", None)
        code = getattr(join, "__code__", None)
        while code is not None and frame is not None:
            if frame.f_code is code:
                return getattr(frame.f_locals.get("self"), "ident", None)
            frame = frame.f_back
        return None

    def work(frames):
        # The main thread's innermost frame, or, while it joins a thread (training in a
        # thread), that thread's (followed a few levels).
        ident = main
        for _ in range(4):
            nxt = joined(frames.get(ident))
            if nxt is None or nxt == ident or nxt not in frames:
                break
            ident = nxt
        return ident, frames.get(ident)

    # PyTorch's flight recorder (2.14+, on when TORCH_FR_BUFFER_SIZE > 0): per process
    # group, the last collective this rank entered and completed, and when it entered each
    # new one. Any failure switches this part off, never the worker.
    rec = {"dump": None, "off": False, "sent": {}}

    def recorder():
        # Not before torch's import is done (its modules are half made until then).
        dist = _sys.modules.get("torch.distributed")
        initialized = getattr(dist, "is_initialized", None)
        if rec["off"] or not start[1] or initialized is None or not initialized():
            return ""
        if rec["dump"] is None:
            dump = getattr(_sys.modules.get("torch._C._distributed_c10d"), "_dump_fr_trace_json",
                           None)
            if dump is None:
                rec["off"] = True
                return ""
            import json
            rec["dump"], rec["json"] = dump, json
        trace = rec["json"].loads(rec["dump"](True, False))
        status = trace.get("pg_status") or {}
        last, new = {}, {}
        for e in trace.get("entries") or ():
            if e.get("is_p2p"):
                continue
            pg, seq = int(e["pg_id"]), int(e["collective_seq_id"])
            if seq > last.get(pg, (-1, ""))[0]:
                last[pg] = (seq, str(e.get("profiling_name") or "?").replace(" ", "_"))
            if seq > rec["sent"].get(pg, 0):
                new.setdefault(pg, []).append((seq, int(e["time_created_ns"])))
        lines = []
        if new and not start[3]:
            start[3] = min(t for arrivals in new.values() for _, t in arrivals)
        for pg in sorted(last)[:8]:
            st = status.get(str(pg)) or {}
            seq, op = last[pg]
            entered = max(seq, int(st.get("last_enqueued_collective", -1)))
            lines.append("F %d %d %d %s\n" % (pg, entered, int(st.get("last_completed_collective",
                                                                          -1)), op[:64]))
        size = sum(map(len, lines))
        for pg in sorted(new)[:8]:
            arrivals = sorted(new[pg])[-64:]
            rec["sent"][pg] = arrivals[-1][0]
            line = "A %d%s\n" % (pg, "".join(" %d:%d" % a for a in arrivals))
            if size + len(line) <= 4000:  # one atomic write (PIPE_BUF): a few are dropped
                lines.append(line)
                size += len(line)
        return "".join(lines)

    trigger = _os.path.join(here or "", "fr_dump")
    DUMP_LIMIT = 64 << 20  # bytes

    def dumpers():
        # The recorder of every backend's groups (2.14), and NCCL's own (CUDA builds).
        c10d = _sys.modules.get("torch._C._distributed_c10d")
        return [f for f in (getattr(c10d, "_dump_fr_trace", None),
                            getattr(c10d, "_dump_nccl_trace", None)) if f is not None]

    def no_recorder():
        version = getattr(_sys.modules.get("torch"), "__version__", None)
        return ("torch not imported" if version is None else
                "PyTorch %s has no flight recorder for its process groups" % version)

    def flight_recorder_dump():
        # Writes the recorder's pickle where the analyzer (python -m
        # torch.distributed.flight_recorder.fr_trace) reads it; returns its size, or why
        # there is none (a str).
        dumps = dumpers()
        dist = _sys.modules.get("torch.distributed")
        if not dumps:
            return no_recorder()
        if not getattr(dist, "is_initialized", lambda: False)():
            return "no process group yet (torch.distributed not initialized)"
        import pickle
        # With each collective's Python stack only where torch._dynamo is imported already:
        # PyTorch's first stack dump imports it (a second or more, in a stalled worker).
        dynamo = _sys.modules.get("torch._dynamo")
        stacks = dynamo is not None and not getattr(getattr(dynamo, "__spec__", None),
                                                    "_initializing", False)
        trace = None
        for dump in dumps:  # the first with entries
            got = pickle.loads(dump(True, stacks, False))
            if trace is None or (got.get("entries") and not trace.get("entries")):
                trace = got
        # The analyzer finds each entry's group in pg_config by the group's name; the
        # generic recorder registers its groups there without one: name them as the
        # entries do, from torch.distributed's own table (global ranks).
        config = dict(trace.get("pg_config") or {})
        world = getattr(_sys.modules.get("torch.distributed.distributed_c10d"), "_world", None)
        added = False
        for pg, name in list((getattr(world, "pg_names", None) or {}).items()):
            if name and name not in config:
                config[name] = {"name": name, "desc": str(getattr(pg, "group_desc", "") or ""),
                                "ranks": str(list(dist.get_process_group_ranks(pg)))}
                added = True
        if added:
            config.pop("", None)
        trace["pg_config"] = config
        data = pickle.dumps(trace, protocol=2)
        if len(data) > DUMP_LIMIT:
            return "the dump is %d MiB, over ddprun's bound of %d MiB" % (len(data) >> 20,
                                                                          DUMP_LIMIT >> 20)
        # Whole or not at all, and never in the folder the analyzer reads: the partial
        # file sits beside it until renamed.
        folder = _os.path.dirname(dump_to)
        _os.makedirs(folder, exist_ok=True)
        tmp = _os.path.join(_os.path.dirname(folder),
                            ".%s.%d.tmp" % (_os.path.basename(dump_to), pid))
        out = _os.open(tmp, _os.O_WRONLY | _os.O_CREAT | _os.O_TRUNC | _os.O_CLOEXEC, 0o644)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[_os.write(out, view):]
            finally:
                _os.close(out)
            _os.replace(tmp, dump_to)
        except BaseException:
            try:  # no partial file left (a full disk, say)
                _os.unlink(tmp)
            except OSError:
                pass
            raise
        return len(data)

    def dump_answer():
        # "D 1 <bytes> <interpreter>" or "D 0 <why>": the line ddprun waits for.
        try:
            got = flight_recorder_dump()
        except Exception as e:
            got = "%s: %s" % (type(e).__name__, e)
        if isinstance(got, int):
            line = "D 1 %d %s" % (got, _sys.executable)
        else:
            line = "D 0 " + " ".join(got.split())[:300]
        return (line[:1000] + "\n").encode("ascii", "replace")

    # Where the import system's frames come from: a stack holding one is importing a
    # module, which may sit in one C call (loading libtorch) for seconds.
    BOOTSTRAP = "<frozen importlib._bootstrap>"

    def run():
        # The innermost frame is held until the next sample, so that a new call (a loop
        # calling a function, seen at the same back edge each time) is a new object.
        last, last_frame, moves, report = None, None, 0, 0.0
        ask = bool(dump_to and here)
        while True:
            time.sleep(period)
            frames = _sys._current_frames()
            if main not in frames:
                return
            ident, frame = work(frames)
            frames = None
            if not start[2]:
                startup()
                # Said once the process group is formed (torch.distributed's C part
                # loaded): a torch without a recorder, so that ddprun need not ask at a
                # stall (a rank may be gone by then, ended by a peer's abort).
                if start[2] and ask and not dumpers():
                    ask = False
                    try:
                        _os.write(fd, ("N %s\n" % no_recorder()).encode("ascii", "replace"))
                    except OSError:
                        pass
            key, f, importing = [ident], frame, False
            while f is not None:
                key.append((id(f.f_code), f.f_lasti))
                importing = importing or f.f_code.co_filename == BOOTSTRAP
                f = f.f_back
            if key != last or frame is not last_frame:
                moves += last is not None
                last = key
            last_frame = frame
            now = time.monotonic()
            if ask and _os.path.exists(trigger):  # ddprun's question, looked for each sample
                ask = False
                try:
                    _os.write(fd, dump_answer())
                except BlockingIOError:
                    pass
                except OSError:
                    return
            if now >= report:
                report = now + interval
                code = frame.f_code
                where = "%s:%s %s" % (code.co_filename, frame.f_lineno, code.co_name)
                f = frame
                while f is not None and library(f.f_code.co_filename):
                    f = f.f_back
                if f is not None and f is not frame:
                    where += "\t%s:%s %s" % (f.f_code.co_filename, f.f_lineno, f.f_code.co_name)
                f = None
                data = ("%d %d %s\n" % (moves, pid, where)).encode("utf-8", "replace")
                if len(data) > 2048:
                    data = b"%d %d ?\n" % (moves, pid)
                try:
                    # Before the position line, which ends the report; written apart, each
                    # write at most PIPE_BUF bytes (whole or not at all).
                    records = recorder().encode("ascii", "replace")
                except Exception:
                    rec["off"], records = True, b""
                if importing:  # its CPU time is progress too (stall_watch.h)
                    records += b"I\n"
                if not start_sent[0]:
                    # Until every phase is known (the last once the recorder is off).
                    start_sent[0] = all(start) or (rec["off"] and start[2] > 0)
                    records = (b"S %d %d %d %d\n" % tuple(start)) + records
                try:
                    if records:
                        _os.write(fd, records)
                    _os.write(fd, data)
                except BlockingIOError:
                    pass
                except OSError:
                    return
            frame = None

    _thread.start_new_thread(run, ())


try:
    _ddprun_stack_probe()
except Exception:
    pass
del _ddprun_stack_probe

# Load the sitecustomize this one hides, as site.py would have (this module stays in
# sys.modules when there is none: the import system expects an entry).
_self = _sys.modules.pop("sitecustomize", None)
try:
    import sitecustomize  # noqa: F401
except ImportError as _e:
    if _e.name != "sitecustomize":
        raise
finally:
    if _self is not None:
        _sys.modules.setdefault("sitecustomize", _self)
)PY";

}  // namespace

const char* stack_probe_hook() { return kStackProbeHook; }

}  // namespace ddprun::launcher
