// status_publisher.cpp: StatusPublisher (status_publisher.h).
#include "launcher/jobwide/status_publisher.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <utility>

#include "rendezvous/rendezvous.h"

namespace ddprun::launcher {

StatusPublisher::StatusPublisher(StallGate* gate, rdzv::JobBoard& board, Params params)
    : gate_(gate), board_(board), params_(std::move(params)), next_(Clock::now()) {
  if (gate_ != nullptr) gate_->want_samples(true);
  if (!params_.wall_s) {
    params_.wall_s = [] {
      return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
          .count();
    };
  }
}

StatusPublisher::~StatusPublisher() {
  if (gate_ != nullptr) gate_->want_samples(false);
}

NodeStatus StatusPublisher::status() const {
  NodeStatus s;
  s.node = board_.node();
  s.host = params_.host;
  s.agent_pid = ::getpid();
  s.state = state_;
  s.attempt = params_.attempt;
  s.restarts = params_.restarts;
  s.max_restarts = params_.max_restarts;
  s.time = params_.wall_s();
  s.straggler = straggler_;
  const NodeSample sample = gate_ != nullptr ? gate_->sample() : NodeSample{};
  for (int local = 0; local < params_.nproc; ++local) {
    RankStatus r;
    r.rank = params_.rank_base + local;
    r.local_rank = local;
    // Only live workers are in a sample: one without this rank saw it gone.
    r.state = sample.workers.empty() ? "?" : "exited";
    for (const WorkerPosition& w : sample.workers) {
      if (w.local_rank != local) continue;
      r.pid = w.pid;
      r.state = std::string(1, w.state);
      r.idle_s = w.idle_s;
      if (w.sampled) r.where = w.user_where.empty() ? w.where : w.user_where;
      r.collectives = w.collectives;
    }
    s.ranks.push_back(std::move(r));
  }
  return s;
}

void StatusPublisher::publish() {
  if (failed_) return;
  try {
    board_.set(name(board_.node()), encode_node_status(status()));
  } catch (const rdzv::RendezvousError& e) {
    failed_ = true;
    spdlog::debug("status: not published again this attempt: {}", e.what());
  }
}

void StatusPublisher::tick(Clock::time_point now) {
  if (now < next_) return;
  next_ = now + kPeriod;
  publish();
}

void StatusPublisher::set_state(const std::string& state, int restarts) {
  state_ = state;
  params_.restarts = restarts;
  publish();
}

}  // namespace ddprun::launcher
