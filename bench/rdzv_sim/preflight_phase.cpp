// preflight_phase.cpp: the simulator's pre-flight phase (preflight_phase.h).
#include "bench/rdzv_sim/preflight_phase.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <optional>
#include <thread>

#include "launcher/preflight/board_exchange.h"
#include "launcher/preflight/preflight_verdict.h"

namespace ddprun::bench {
namespace {

namespace pf = launcher::preflight;

// Node `i`'s findings as a passing check of a GPU node reports them: the interpreter,
// torch, 8 devices, the collective and its link from the previous node of the ring.
pf::NodeResult findings(int i, int n, bool full) {
  pf::NodeResult r;
  r.node = i;
  r.host = fmt::format("gpu-{:04d} (10.{}.{}.{})", i, i >> 16, (i >> 8) & 255, i & 255);
  r.key = fmt::format("gpu-{:04d}", i);
  r.address = fmt::format("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255);
  r.hosts_store = i == 0;
  r.python = "/opt/venv/bin/python3";
  r.checks.push_back({"import torch", true, 1.21, "2.14.0+cu130"});
  for (int d = 0; d < 8; ++d) {
    r.checks.push_back({fmt::format("cuda:{}", d), true, 0.08, "NVIDIA H200, 139 GiB"});
  }
  if (full) {
    r.checks.push_back({"collective", true, 0.05, "all_reduce of 16 MiB"});
    r.links[(i + n - 1) % n] = 0.02;
  }
  return r;
}

}  // namespace

PreflightPhase run_preflight_phase(std::vector<std::unique_ptr<rdzv::RendezvousHandler>>& handlers,
                                   std::chrono::milliseconds bound) {
  using Clock = std::chrono::steady_clock;
  const int n = static_cast<int>(handlers.size());
  const auto t0 = Clock::now();
  std::vector<std::optional<std::string>> verdicts(static_cast<std::size_t>(n));
  std::vector<double> took(static_cast<std::size_t>(n), 0);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  const pf::BoardWait wait = [](std::chrono::milliseconds look) {
    std::this_thread::sleep_for(look);
    return true;
  };
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      rdzv::JobBoard* board = handlers[static_cast<std::size_t>(i)]->job_board();
      if (board == nullptr) return;
      try {
        pf::Settings settings;
        settings.min_nodes = n;
        const auto step = [&](const std::string& prefix, const std::string& mine,
                              const pf::Decide& decide) {
          return *pf::decide_on_board(*board, n, i, prefix, mine, Clock::now() + bound, wait,
                                      decide);
        };
        const auto answer_on = [&](bool last) -> pf::Decide {
          return [&, last](const std::vector<std::string>& values) {
            return pf::findings_answer(values, last, settings, bound, nullptr);
          };
        };
        step("preflight/need/", "1", pf::need_answer);
        const std::string local =
            step("preflight/local/", pf::to_json(findings(i, n, false)), answer_on(false));
        if (local != pf::kGo) return;  // every simulated node passes: a bug
        const std::string verdict =
            step("preflight/full/", pf::to_json(findings(i, n, true)), answer_on(true));
        if (i == 0) pf::wait_until_read(*board, n, "preflight/full/");
        verdicts[static_cast<std::size_t>(i)] = verdict;
        took[static_cast<std::size_t>(i)] =
            std::chrono::duration<double>(Clock::now() - t0).count();
      } catch (const std::exception&) {
        // undecided: counted below
      }
    });
  }
  for (auto& t : threads) t.join();
  PreflightPhase p;
  p.value_bytes = pf::to_json(findings(0, n, true)).size();
  std::vector<double> decided;
  std::optional<std::string> first;
  for (int i = 0; i < n; ++i) {
    const auto& v = verdicts[static_cast<std::size_t>(i)];
    if (!v) {
      ++p.undecided;
      continue;
    }
    if (p.action.empty()) {
      std::vector<pf::NodeResult> rows;
      const pf::Verdict d = pf::read_published(*v, rows);
      p.action = d.action == pf::Verdict::Action::kRun       ? "run"
                 : d.action == pf::Verdict::Action::kExclude ? "exclude"
                                                             : "stop";
    }
    if (!first) first = v;
    p.same = p.same && *v == *first;
    decided.push_back(took[static_cast<std::size_t>(i)]);
  }
  if (!decided.empty()) {
    std::sort(decided.begin(), decided.end());
    p.last_s = decided.back();
    p.median_s = decided[decided.size() / 2];
  }
  return p;
}

}  // namespace ddprun::bench
