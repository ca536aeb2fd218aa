// The job-wide root cause (launcher/jobwide/job_failures.h): which failure caused the others, the
// record codec, and two nodes sharing their failures over a real store.
#include "launcher/jobwide/job_failures.h"

#include <catch2/catch.hpp>
#include <csignal>
#include <future>
#include <memory>

#include "rendezvous/c10d/store_job_board.h"
#include "store/memory_store.h"

using namespace ddprun::launcher;
using namespace std::chrono_literals;

namespace {

FailureRecord record(std::int64_t seq, int rank, int exitcode, std::string summary) {
  FailureRecord r;
  r.seq = seq;
  r.node = rank;
  r.host = "h" + std::to_string(rank);
  r.rank = rank;
  r.pid = 100 + rank;
  r.exitcode = exitcode;
  r.summary = std::move(summary);
  return r;
}

}  // namespace

TEST_CASE("root cause: what PyTorch's ranks say when a peer went away is a consequence",
          "[job_failures]") {
  // As printed by PyTorch 1.13 (gloo), 2.6 and 2.14, and ranks ddprun stopped.
  CHECK(looks_like_consequence(
      1, "RuntimeError: [./gloo/transport/tcp/pair.cc:598] Connection closed by peer [::1]:1"));
  CHECK(looks_like_consequence(1,
                               "RuntimeError: [../third_party/gloo/gloo/transport/tcp/"
                               "pair.cc:534] Read error [127.0.0.1]:5: Connection reset by peer"));
  CHECK(looks_like_consequence(1, "torch.distributed.DistBackendError: NCCL error in: ..."));
  CHECK(looks_like_consequence(-SIGTERM, "Signal 15 (SIGTERM) received by PID 7"));
  CHECK(looks_like_consequence(-SIGKILL, ""));
  CHECK_FALSE(looks_like_consequence(1, "ValueError: boom"));
  CHECK_FALSE(looks_like_consequence(-SIGSEGV, "Signal 11 (SIGSEGV) received by PID 7"));
  CHECK_FALSE(looks_like_consequence(-SIGABRT, "torch.OutOfMemoryError: CUDA out of memory"));
}

TEST_CASE("root cause: the first failure in the store's order that is not a consequence",
          "[job_failures]") {
  const std::vector<FailureRecord> records = {
      record(1, 0, 1, "RuntimeError: Connection closed by peer"),  // its agent was quicker
      record(2, 1, 1, "ValueError: boom"),
      record(3, 2, 1, "KeyError: 'x'"),
  };
  CHECK(job_root_cause(records) == 1);
  CHECK(job_root_cause({records[0]}) == 0);  // only consequences: the first
  CHECK(root_cause_line(records[1], 3, false) ==
        "root cause (job-wide): rank 1 on h1 (pid 101) failed (the failures reported before it "
        "look like its consequences): exitcode 1: "
        "ValueError: boom; 3 node(s) reported failures (this node's below are most likely its "
        "consequences)");
  CHECK(root_cause_line(record(1, 4, -9, ""), 1, true) ==
        "root cause (job-wide): rank 4 on h4 (pid 104) failed first in the job: exitcode -9");
}

TEST_CASE("root cause: the record codec, and bad input named", "[job_failures]") {
  FailureRecord r = record(0, 7, -11, "Signal 11 (SIGSEGV)");
  std::string error;
  const auto back = decode_failure_record(encode_failure_record(r), error);
  REQUIRE(back);
  CHECK(back->rank == 7);
  CHECK(back->exitcode == -11);
  CHECK(back->summary == r.summary);
  r.summary = std::string(100000, 'x');  // cut, not refused
  CHECK(encode_failure_record(r).size() < 1000);
  for (const std::string& bad :
       {std::string("nope"), std::string(R"({"version":9})"),
        std::string(R"({"version":1,"node":0})"), std::string(5000, '{')}) {
    error.clear();
    CHECK_FALSE(decode_failure_record(bad, error));
    CHECK_FALSE(error.empty());
  }
}

TEST_CASE("root cause: two nodes share their failures and name the same cause", "[job_failures]") {
  auto store = std::make_shared<ddprun::store::MemoryStore>();
  ddprun::rdzv::StoreJobBoard a(store, 0, 0, 2, "test"), b(store, 0, 1, 2, "test");
  Failure victim;
  victim.global_rank = 0;
  victim.exitcode = 1;
  victim.summary = "RuntimeError: Connection closed by peer";
  Failure cause;
  cause.global_rank = 1;
  cause.exitcode = 1;
  cause.summary = "ValueError: boom";
  // The victim's agent reaches the store first.
  auto la =
      std::async(std::launch::async, [&] { return share_job_failure(a, {victim}, "a", 500ms); });
  std::this_thread::sleep_for(100ms);
  const auto lb = share_job_failure(b, {cause}, "b", 500ms);
  const auto line_a = la.get();
  REQUIRE(line_a);
  REQUIRE(lb);
  const std::string cause_line =
      "root cause (job-wide): rank 1 on b (pid 0) failed (the failures reported before it look "
      "like its consequences): exitcode 1: ValueError: boom; 2 node(s) reported failures";
  CHECK(line_a->line == cause_line + " (this node's below are most likely its consequences)");
  CHECK_FALSE(line_a->lost_peer);
  CHECK(lb->line == cause_line);
  // Alone with a consequence: nobody reported a cause, a peer was lost.
  ddprun::rdzv::StoreJobBoard c(store, 1, 0, 2, "test");
  const auto lost = share_job_failure(c, {victim}, "c", 100ms);
  REQUIRE(lost);
  CHECK(lost->lost_peer);
}
