// fr_dump.h: PyTorch's flight recorder dumps at a stall (issue 32). With --stall-timeout
// each worker's file is <log dir>/attempt_<N>/flight_recorder/<prefix><global rank>, the
// naming PyTorch's analyzer reads (python -m torch.distributed.flight_recorder.fr_trace
// <folder> --prefix <prefix>); when a stall is declared the stack probe's hook
// (stack_probe_hook.h) writes it, asked by StackProbe::request_dumps, and answers. Here
// the pure parts: the file prefix, whether the user switched the recorder off, the hook's
// answer, and the one line ddprun logs once the answers are in (where the dumps are, the
// analyzer's command, the ranks without one). Used by make_worker_specs (worker_env.cpp),
// StackProbe and StallWatchdog. Thread-safety: pure functions and plain values.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::launcher {

// The folder of an attempt's dumps, in attempt_<N>/.
inline constexpr std::string_view kFrDumpFolder = "flight_recorder";
// PyTorch's own file prefix, the basename of TORCH_FR_DUMP_TEMP_FILE's default.
inline constexpr std::string_view kFrDefaultPrefix = "nccl_trace_rank_";
// How long the watchdog waits for the answers before it stops the workers anyway (the
// hook looks for the question each 20 ms sample; a dump of 256 entries takes a few ms). On a node
// of a job of several, once a rank there dumped, it waits that long: the other nodes hear the
// job-wide verdict up to a sample and a judge's read later (1 s each at most), and ranks
// stopped here would break their ranks' collectives (a gloo rank then fails and exits)
// before those are asked.
inline constexpr std::chrono::milliseconds kFrDumpWait{3000};

// The file prefix: the basename of the workers' TORCH_FR_DUMP_TEMP_FILE (or the older
// TORCH_NCCL_DEBUG_INFO_TEMP_FILE) when set, else kFrDefaultPrefix. `env` holds
// "NAME=value" entries.
std::string fr_dump_prefix(const std::vector<std::string>& env);

// "TORCH_FR_BUFFER_SIZE=0" (the setting as written) when `env` switches PyTorch's
// recorder off: the first of TORCH_FR_BUFFER_SIZE and TORCH_NCCL_TRACE_BUFFER_SIZE that
// is set (PyTorch's order) is a number <= 0; "" otherwise.
std::string fr_recorder_off(const std::vector<std::string>& env);

// One worker's dump at a stall.
struct FrDump {
  int rank = 0;           // the global rank
  std::string file;       // where it goes ("": none asked of this worker)
  bool answered = false;  // the hook answered
  bool written = false;   // ... that it wrote `file`
  std::uint64_t bytes = 0;
  std::string why;     // not written: the hook's reason, or ddprun's ("no answer ...")
  std::string python;  // written: the worker's interpreter (sys.executable)
};

// The hook's answer after "D ": "1 <bytes> <python>" or "0 <why>". Fills `d`'s answer
// fields; false (and `d` unchanged) when malformed.
bool parse_fr_answer(std::string_view answer, FrDump& d);

// The folder of the first dump written ("": none written).
std::string fr_dump_folder(const std::vector<FrDump>& dumps);

// The analyzer's command line for the dumps in `folder`, each word shell-quoted:
// "<python> -m torch.distributed.flight_recorder.fr_trace <folder> --prefix <prefix>".
std::string fr_analyzer_command(std::string_view python, std::string_view folder,
                                std::string_view prefix);

// The line after a stall's dumps (`dumps`: every stopped worker's; those without a file
// are left out): "stall: flight recorder dumps of ranks 0-3 are in <folder>; analyze them
// with: <command>", with, on a node of several (`several_nodes`), how to put the other
// nodes' files beside them, and "; rank 2 wrote none: <why>" for each rank without one
// (ranks with the same reason together). "" when no worker had a file.
std::string fr_dump_summary(const std::vector<FrDump>& dumps, bool several_nodes);

}  // namespace ddprun::launcher
