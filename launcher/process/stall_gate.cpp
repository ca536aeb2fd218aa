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

void StallGate::want_arrivals(bool want) {
  std::lock_guard lock(mu_);
  want_arrivals_ = want;
  if (!want) arrivals_.clear();
}

void StallGate::want_samples(bool want) {
  std::lock_guard lock(mu_);
  want_samples_ = want;
}

bool StallGate::wants_samples() const {
  std::lock_guard lock(mu_);
  return want_samples_;
}

bool StallGate::wants_arrivals() const {
  std::lock_guard lock(mu_);
  return want_arrivals_;
}

void StallGate::add_arrivals(int local_rank, const std::vector<Arrival>& arrivals) {
  std::lock_guard lock(mu_);
  if (!want_arrivals_) return;
  for (const Arrival& a : arrivals) arrivals_.emplace_back(local_rank, a);
  if (arrivals_.size() > kMaxArrivals) {
    arrivals_.erase(arrivals_.begin(), arrivals_.begin() + static_cast<std::ptrdiff_t>(
                                                               arrivals_.size() - kMaxArrivals));
  }
}

std::vector<std::pair<int, Arrival>> StallGate::take_arrivals() {
  std::lock_guard lock(mu_);
  return std::exchange(arrivals_, {});
}

void StallGate::set_startup(int local_rank, const StartupTimes& times) {
  std::lock_guard lock(mu_);
  startup_[local_rank] = times;
}

std::map<int, StartupTimes> StallGate::startup() const {
  std::lock_guard lock(mu_);
  return startup_;
}

void StallGate::reset() {
  std::lock_guard lock(mu_);
  judged_ = false;
  want_arrivals_ = false;
  want_samples_ = false;
  arrivals_.clear();
  startup_.clear();
  sample_ = NodeSample{};
  decision_.reset();
}

}  // namespace ddprun::launcher
