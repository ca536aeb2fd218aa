// stall_gate.cpp: StallGate (stall_gate.h), a mutex around what the stall watchdog and
// the job-wide stall judge share.
#include "launcher/process/stall_gate.h"

#include <utility>

namespace ddprun::launcher {

void StallGate::set_judged(bool judged) {
  std::lock_guard lock(mu_);
  judged_ = judged;
}

bool StallGate::judged() const {
  std::lock_guard lock(mu_);
  return judged_;
}

void StallGate::publish(NodeSample sample) {
  std::lock_guard lock(mu_);
  sample_ = std::move(sample);
}

NodeSample StallGate::sample() const {
  std::lock_guard lock(mu_);
  return sample_;
}

void StallGate::decide(std::vector<std::string> verdict) {
  std::lock_guard lock(mu_);
  decision_ = std::move(verdict);
}

std::optional<std::vector<std::string>> StallGate::decision() const {
  std::lock_guard lock(mu_);
  return decision_;
}

void StallGate::reset() {
  std::lock_guard lock(mu_);
  judged_ = false;
  sample_ = NodeSample{};
  decision_.reset();
}

}  // namespace ddprun::launcher
