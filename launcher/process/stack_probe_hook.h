// stack_probe_hook.h: the sitecustomize.py that StackProbe (stack_probe.h) writes for the
// workers: a thread in each worker's first Python process that samples where its main
// thread is every 20 ms and reports, on the inherited pipe DDPRUN_STACK_FD, every
// DDPRUN_STACK_INTERVAL seconds: "<moves> <pid> <file>:<line> <function>[\t<user frame>]",
// preceded by the flight recorder's "F"/"A" lines and the start-up "S" line
// (flight_record.h). When DDPRUN_STACK_FR_FILE names a file and <DDPRUN_STACK_DIR>/fr_dump
// appears (a stall: StackProbe::request_dumps), it writes PyTorch's flight recorder dump
// there once, in the format PyTorch's analyzer reads, and answers "D 1 <bytes> <python>"
// or "D 0 <why>" (fr_dump.h). Used by StackProbe. Thread-safety: a constant text.
#pragma once

namespace ddprun::launcher {

// The hook's text (Python 3).
const char* stack_probe_hook();

}  // namespace ddprun::launcher
