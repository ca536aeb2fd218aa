// --event-log-handler console: the event lines, byte for byte against torchrun 2.14's
// (printed by `torchrun --standalone --nproc-per-node 2 --event-log-handler console`).
#include "launcher/events.h"

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>

#include "tests/support/temp_dir.h"

using namespace ddprun::launcher;

namespace {

EventContext context() {
  return {.run_id = "5972f2bc-ecd9-4bed-a2c3-ded4fd8ecb52",
          .role = "default",
          .hostname = "localhost",
          .rdzv_backend = "c10d",
          .entry_point = "python3",
          .agent_restarts = 0,
          .total_run_time = 0};
}

}  // namespace

TEST_CASE("events: torchrun 2.14's JSON lines", "[events]") {
  EventFields rdzv("RENDEZVOUS");
  rdzv.duration_ms = 460.7827680001719;
  CHECK(format_event(context(), rdzv) ==
        R"({"name": "torchelastic.worker.status.RENDEZVOUS", "source": "AGENT", "timestamp": 0, )"
        R"("metadata": {"run_id": "5972f2bc-ecd9-4bed-a2c3-ded4fd8ecb52", "global_rank": null, )"
        R"("group_rank": null, "worker_id": null, "role": "default", "hostname": "localhost", )"
        R"("state": "RENDEZVOUS", "total_run_time": 0, "rdzv_backend": "c10d", "raw_error": null, )"
        R"("metadata": "{\"group_world_size\": null, \"entry_point\": \"python3\"}", )"
        R"("agent_restarts": 0, "duration_ms": 460.7827680001719}})");
  EventFields failed("FAILED");
  failed.group_rank = 0;
  failed.group_world_size = 1;
  failed.worker.emplace(1, 1, 2);
  failed.worker->pid = 20823;
  failed.worker->exit_code = 3;
  failed.raw_error = raw_error_of("/nonexistent", false, 3);
  CHECK(
      format_event(context(), failed) ==
      R"({"name": "torchelastic.worker.status.FAILED", "source": "WORKER", "timestamp": 0, )"
      R"("metadata": {"run_id": "5972f2bc-ecd9-4bed-a2c3-ded4fd8ecb52", "global_rank": 1, )"
      R"("group_rank": 0, "worker_id": "20823", "role": "default", "hostname": "localhost", )"
      R"("state": "FAILED", "total_run_time": 0, "rdzv_backend": "c10d", "raw_error": )"
      R"("{\"message\": \"<NONE>\", \"errorTraits\": {\"category\": \"system_terminated_error\", )"
      R"(\"retryability\": \"False\"}}", "metadata": "{\"group_world_size\": 1, )"
      R"(\"entry_point\": \"python3\", \"local_rank\": [1], \"role_rank\": [1], )"
      R"(\"role_world_size\": [2], \"exit_code\": [3], \"worker_pid\": [20823]}", )"
      R"("agent_restarts": 0, "duration_ms": null}})");
  EventFields start("START");
  start.group_rank = 0;
  start.group_world_size = 1;
  start.worker.emplace(0, 0, 2);
  CHECK(format_event(context(), start)
            .find(R"(\"role_world_size\": [2], \"exit_code\": [null], \"worker_pid\": [null]}")") !=
        std::string::npos);
  EventFields whole("X");
  whole.duration_ms = 5.0;
  CHECK(format_event(context(), whole).find("\"duration_ms\": 5.0}") != std::string::npos);
}

TEST_CASE("events: a worker's error file re-serialized as Python's json.dumps", "[events]") {
  ddprun::test::TempDir dir;
  const std::string path = (dir.path / "error.json").string();
  std::ofstream(path)
      << R"({"message":{"message":"ValueError: \u00e9","extraInfo":{"timestamp":"1"}},"n":[1,2.5,true]})";
  CHECK(raw_error_of(path, true, 1) ==
        R"({"message": {"message": "ValueError: \u00e9", "extraInfo": {"timestamp": "1"}}, )"
        R"("n": [1, 2.5, true]})");
  CHECK(raw_error_of(path + ".missing", true, -15) == R"({"message": "<NONE>"})");
  std::ofstream(path) << "not json";
  CHECK(raw_error_of(path, true, 1).find("<NONE>") != std::string::npos);
}
