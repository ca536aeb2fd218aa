// fr_dump_test.cpp: the flight recorder dumps at a stall (fr_dump.h): the file prefix,
// the user's switch, the hook's answers and the line ddprun logs (tables); and, with the
// ProcessSupervisor and real workers, the question asked of the hooks of Python workers
// without torch (their answer named, the stall handled as before), a hook that cannot answer
// (the wait is bounded), and no question when the user switched the recorder off. The dumps
// PyTorch's analyzer reads are checked by the 2.14 tier (tests/multinode,
// stall_verdict_names_the_culprit_on_every_node).
#include "launcher/process/fr_dump.h"

#include <catch2/catch.hpp>
#include <filesystem>

#include "tests/launcher/process/supervisor_harness.h"
#include "tests/support/log_capture.h"
#include "tests/support/temp_dir.h"

namespace ddprun::launcher::test {
namespace {

using Kind = SupervisorEvent::Kind;

FrDump dump_of(int rank, std::string file) {
  FrDump d;
  d.rank = rank;
  d.file = std::move(file);
  return d;
}

// A Python worker (the host's python3, no torch) that sleeps: stalled once the timeout
// passes, its sampler's hook alive.
WorkerSpec sleeping_python(int rank, const std::string& file) {
  WorkerSpec w;
  w.local_rank = rank;
  w.global_rank = rank + 10;
  w.argv = {"python3", "-c", "import time; time.sleep(60)"};
  w.env = {"PATH=/usr/bin:/bin"};
  w.flight_recorder_file = file;
  return w;
}

}  // namespace

TEST_CASE("fr_dump: the file prefix, PyTorch's or the user's TORCH_FR_DUMP_TEMP_FILE's",
          "[fr_dump]") {
  CHECK(fr_dump_prefix({}) == "nccl_trace_rank_");
  CHECK(fr_dump_prefix({"TORCH_FR_DUMP_TEMP_FILE=/tmp/my_trace_"}) == "my_trace_");
  CHECK(fr_dump_prefix({"TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/x/old_"}) == "old_");
  CHECK(fr_dump_prefix({"TORCH_FR_DUMP_TEMP_FILE=/x/new_",
                        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/x/old_"}) == "new_");
  // No usable name: a folder, or digits last (they would read as the rank).
  CHECK(fr_dump_prefix({"TORCH_FR_DUMP_TEMP_FILE=/tmp/"}) == "nccl_trace_rank_");
  CHECK(fr_dump_prefix({"TORCH_FR_DUMP_TEMP_FILE=/tmp/run7"}) == "nccl_trace_rank_");
}

TEST_CASE("fr_dump: the recorder switched off by the user, PyTorch's variable order", "[fr_dump]") {
  CHECK(fr_recorder_off({}).empty());
  CHECK(fr_recorder_off({"TORCH_FR_BUFFER_SIZE=256"}).empty());
  CHECK(fr_recorder_off({"TORCH_FR_BUFFER_SIZE=0"}) == "TORCH_FR_BUFFER_SIZE=0");
  CHECK(fr_recorder_off({"TORCH_NCCL_TRACE_BUFFER_SIZE=0"}) == "TORCH_NCCL_TRACE_BUFFER_SIZE=0");
  // TORCH_FR_BUFFER_SIZE wins over the older name.
  CHECK(fr_recorder_off({"TORCH_NCCL_TRACE_BUFFER_SIZE=0", "TORCH_FR_BUFFER_SIZE=100"}).empty());
  CHECK(fr_recorder_off({"TORCH_NCCL_TRACE_BUFFER_SIZE=9", "TORCH_FR_BUFFER_SIZE=-1"}) ==
        "TORCH_FR_BUFFER_SIZE=-1");
  CHECK(fr_recorder_off({"TORCH_FR_BUFFER_SIZE=lots"}).empty());  // not a number: torch's call
}

TEST_CASE("fr_dump: the hook's answers", "[fr_dump]") {
  FrDump d;
  REQUIRE(parse_fr_answer("1 1495 /usr/bin/python3", d));
  CHECK((d.answered && d.written && d.bytes == 1495 && d.python == "/usr/bin/python3"));
  REQUIRE(parse_fr_answer("1 20 /opt/my env/bin/python", d));
  CHECK(d.python == "/opt/my env/bin/python");
  REQUIRE(parse_fr_answer("0 PyTorch 2.6.0 has no flight recorder for its process groups", d));
  CHECK((d.answered && !d.written &&
         d.why == "PyTorch 2.6.0 has no flight recorder for its "
                  "process groups"));
  FrDump bad;
  for (const char* text : {"", "0", "0 ", "1", "1 12", "1 12 ", "1 x /py", "2 why", "1 -3 /py"}) {
    INFO(text);
    CHECK_FALSE(parse_fr_answer(text, bad));
    CHECK_FALSE(bad.answered);
  }
}

TEST_CASE("fr_dump: the line after a stall: where, the analyzer's command, who has none",
          "[fr_dump]") {
  const std::string dir = "/logs/job_x/attempt_0/flight_recorder";
  std::vector<FrDump> dumps;
  for (int r : {0, 1, 2, 3})
    dumps.push_back(dump_of(r, dir + "/nccl_trace_rank_" + std::to_string(r)));
  for (int r : {0, 1, 3}) REQUIRE(parse_fr_answer("1 900 /usr/bin/python3", dumps[r]));
  dumps[2].answered = false;  // never answered
  CHECK(fr_dump_summary(dumps, false) ==
        "stall: flight recorder dumps of ranks 0-1,3 are in " + dir +
            "; analyze them with: /usr/bin/python3 -m torch.distributed.flight_recorder.fr_trace " +
            dir +
            " --prefix nccl_trace_rank_; rank 2 wrote none: no answer from ddprun's sampler "
            "in time");
  // On a node of several: the other nodes' files go beside them.
  CHECK(fr_dump_summary({dumps[0]}, true)
            .ends_with(" --prefix nccl_trace_rank_ (this node's ranks: copy every node's files "
                       "into one folder "
                       "first, or add --allow-incomplete-ranks)"));
  // A path the shell must not split is quoted.
  FrDump spaced = dump_of(12, "/my logs/fr/t_12");
  REQUIRE(parse_fr_answer("1 10 /py", spaced));
  CHECK(fr_dump_summary({spaced}, false).ends_with("fr_trace '/my logs/fr' --prefix t_"));
  // None written: the reasons, ranks with the same one together.
  std::vector<FrDump> none;
  for (int r : {4, 5, 7}) {
    none.push_back(dump_of(r, dir + "/p" + std::to_string(r)));
    REQUIRE(parse_fr_answer(r == 7 ? "0 torch not imported"
                                   : "0 PyTorch 2.6.0 has no flight "
                                     "recorder for its process groups",
                            none.back()));
  }
  none.push_back(dump_of(9, ""));  // not asked: left out
  CHECK(fr_dump_summary(none, false) ==
        "stall: no flight recorder dumps; ranks 4-5 wrote none: PyTorch 2.6.0 has no flight "
        "recorder for its process groups; rank 7 wrote none: torch not imported");
  CHECK(fr_dump_summary({dump_of(1, "")}, false).empty());
}

TEST_CASE("fr_dump: a stall asks the workers' hooks first, and without torch they say so",
          "[fr_dump][stall]") {
  ddprun::test::TempDir dir;
  const std::string folder = dir.str() + "/attempt_0/flight_recorder";
  ddprun::test::LogCapture log;
  Harness h(true, 600ms);
  h.sup->start({sleeping_python(0, folder + "/nccl_trace_rank_10"),
                sleeping_python(1, folder + "/nccl_trace_rank_11")});
  const SupervisorEvent ev = h.next(30s);
  REQUIRE(ev.kind == Kind::kStalled);
  REQUIRE(ev.exits.size() == 2);
  for (const WorkerExit& e : ev.exits) CHECK(e.signal == SIGABRT);  // stopped as before
  INFO(Catch::Detail::stringify(log.lines()));
  CHECK(log.has("stall: no flight recorder dumps; ranks 10-11 wrote none: torch not imported"));
  CHECK_FALSE(std::filesystem::exists(folder));  // made only for a dump
}

TEST_CASE(
    "fr_dump: a hook that cannot answer (its main thread holds the GIL) costs at most "
    "kFrDumpWait, then the stall is handled as before",
    "[fr_dump][stall]") {
  ddprun::test::TempDir dir;
  ddprun::test::LogCapture log;
  Harness h(true, 600ms);
  WorkerSpec w = sleeping_python(0, dir.str() + "/flight_recorder/nccl_trace_rank_10");
  // After its sampler reported (the sleep), a regular expression that backtracks for ever
  // without releasing the GIL: the sampler can neither sample nor answer.
  w.argv = {"python3", "-c",
            "import re, time; time.sleep(0.5); re.match(r'(a+)+$', 'a' * 64 + 'b')"};
  const auto t0 = std::chrono::steady_clock::now();
  h.sup->start({w});
  const SupervisorEvent ev = h.next(30s);
  REQUIRE(ev.kind == Kind::kStalled);
  REQUIRE(ev.exits.size() == 1);
  CHECK(ev.exits[0].signal == SIGABRT);
  CHECK(std::chrono::steady_clock::now() - t0 >= kFrDumpWait);
  INFO(Catch::Detail::stringify(log.lines()));
  CHECK(
      log.has("stall: no flight recorder dumps; rank 10 wrote none: no answer from ddprun's "
              "sampler in time"));
}

TEST_CASE("fr_dump: the recorder switched off by the user: no question, one line",
          "[fr_dump][stall]") {
  ddprun::test::TempDir dir;
  ddprun::test::LogCapture log;
  Harness h(true, 600ms);
  WorkerSpec w = sleeping_python(0, dir.str() + "/flight_recorder/nccl_trace_rank_10");
  w.env.push_back("TORCH_FR_BUFFER_SIZE=0");
  h.sup->start({w});
  const SupervisorEvent ev = h.next(30s);
  REQUIRE(ev.kind == Kind::kStalled);
  INFO(Catch::Detail::stringify(log.lines()));
  CHECK(
      log.has("stall: no flight recorder dumps: the workers' environment switches PyTorch's "
              "flight recorder off (TORCH_FR_BUFFER_SIZE=0)"));
  CHECK_FALSE(log.has("wrote none"));
}

}  // namespace ddprun::launcher::test
