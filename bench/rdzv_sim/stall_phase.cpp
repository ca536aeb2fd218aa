// stall_phase.cpp: the simulator's job-wide stall phase (stall_phase.h).
#include "bench/rdzv_sim/stall_phase.h"

#include <atomic>
#include <mutex>
#include <optional>
#include <thread>

#include "launcher/jobwide/job_stall.h"
#include "launcher/process/stall_gate.h"

namespace ddprun::bench {

StallPhase run_stall_phase(std::vector<std::unique_ptr<rdzv::RendezvousHandler>>& handlers,
                           int ranks, std::chrono::milliseconds timeout,
                           std::chrono::milliseconds bound) {
  using Clock = std::chrono::steady_clock;
  const int n = static_cast<int>(handlers.size());
  const auto t0 = Clock::now();
  std::vector<std::optional<std::vector<std::string>>> verdicts(static_cast<std::size_t>(n));
  std::vector<Clock::time_point> at(static_cast<std::size_t>(n), t0);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      rdzv::JobBoard* board = handlers[static_cast<std::size_t>(i)]->job_board();
      if (board == nullptr) return;
      launcher::StallGate gate;
      launcher::NodeSample sample;
      sample.all_idle = true;
      sample.last_progress = t0;
      for (int r = 0; r < ranks; ++r) {
        launcher::WorkerPosition w;
        w.local_rank = r;
        w.pid = 10000 + r;
        w.sampled = true;
        const bool odd = i == n / 2 && r == 0;  // the rank the others wait for
        w.where = odd ? "train.py:88 in load_batch"
                      : "/usr/lib/python3/dist-packages/torch/distributed/"
                        "distributed_c10d.py:2501 in all_reduce";
        w.user_where = odd ? "" : "train.py:92 in <module>";
        sample.workers.push_back(w);
      }
      gate.publish(sample);
      launcher::JobStallJudge judge(gate, *board, {timeout, "sim" + std::to_string(i), i * ranks});
      const auto give_up = t0 + timeout + bound;
      for (;;) {
        judge.tick(Clock::now());
        if (gate.decision() || Clock::now() >= give_up) break;
        std::this_thread::sleep_until(std::min(judge.next_tick(), give_up));
      }
      verdicts[static_cast<std::size_t>(i)] = gate.decision();
      at[static_cast<std::size_t>(i)] = Clock::now();
    });
  }
  for (auto& t : threads) t.join();
  StallPhase p;
  for (int i = 0; i < n; ++i) {
    const auto& v = verdicts[static_cast<std::size_t>(i)];
    if (!v || v->empty()) {
      ++p.undecided;
      continue;
    }
    if (p.headline.empty()) p.headline = v->front();
    p.same = p.same && v->front() == p.headline;
    p.latency_s = std::max(
        p.latency_s,
        std::chrono::duration<double>(at[static_cast<std::size_t>(i)] - t0 - timeout).count());
  }
  return p;
}

}  // namespace ddprun::bench
