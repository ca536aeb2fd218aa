// thread_supervisor.h: ThreadSupervisor, an in-process implementation of the Supervisor
// interface (launcher/process/supervisor_interface.h) for the Agent's tests: each worker
// is a C++ program run on its own thread with the WorkerSpec the Agent built (argv, env),
// so agent tests need no shells, no timing slack for process start-up, and can steer a
// worker directly. It keeps the real contract: start() throws SpawnError for a program it
// does not know, having stopped the workers it started; each exit is reported once;
// kAllSucceeded follows the last successful exit; stop() asks every worker to stop and
// returns the exits not yet reported; raise() delivers a handled signal as ProcessSupervisor
// does. The real process supervision is tested in tests/launcher/process.
// Thread-safety: the Supervisor calls come from the Agent's thread; raise() from any
// thread; each program runs on its own thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "launcher/process/spawn.h"
#include "launcher/process/supervisor_interface.h"

namespace ddprun::launcher::test {

class ThreadSupervisor final : public Supervisor {
 public:
  // What a running program sees besides its spec.
  class Worker {
   public:
    // Blocks until the agent stops this worker (stop()), then returns the signal used.
    int wait_for_stop() {
      std::unique_lock lock(owner_->mu_);
      owner_->cv_.wait(lock, [&] { return stop_signal_ != 0; });
      return stop_signal_;
    }
    // The environment variable `name` of the spec ("" when unset).
    std::string env(const std::string& name) const {
      for (const std::string& kv : spec_.env) {
        if (kv.size() > name.size() && kv.compare(0, name.size(), name) == 0 &&
            kv[name.size()] == '=') {
          return kv.substr(name.size() + 1);
        }
      }
      return {};
    }
    const WorkerSpec& spec() const { return spec_; }

   private:
    friend class ThreadSupervisor;
    ThreadSupervisor* owner_ = nullptr;
    WorkerSpec spec_;
    int stop_signal_ = 0;  // under owner_->mu_
    bool done_ = false;    // under owner_->mu_
    std::thread thread_;
  };

  // A program returns its exit code, or -signo to end "killed by signo".
  using Program = std::function<int(Worker&)>;

  ~ThreadSupervisor() override { stop(SIGKILL, std::chrono::milliseconds(0)); }

  // Makes `program` startable as argv[0] == `name`.
  void install(const std::string& name, Program program) { programs_[name] = std::move(program); }

  // A handled signal arrives (what ProcessSupervisor reads from its signalfd).
  void raise(int signo) {
    SupervisorEvent ev;
    ev.kind = SupervisorEvent::Kind::kSignal;
    ev.signo = signo;
    std::lock_guard lock(mu_);
    events_.push_back(ev);
    cv_.notify_all();
  }

  int starts() const { return starts_; }

  void start(std::vector<WorkerSpec> specs) override {
    stop(SIGKILL, std::chrono::milliseconds(0));  // as ProcessSupervisor: a clean slate
    ++starts_;
    for (WorkerSpec& spec : specs) {
      const std::string name = spec.argv.empty() ? std::string() : spec.argv[0];
      auto program = programs_.find(name);
      if (program == programs_.end()) {
        stop(SIGKILL, std::chrono::milliseconds(0));
        throw SpawnError("cannot execute '" + name + "': No such file or directory");
      }
      auto w = std::make_unique<Worker>();
      w->owner_ = this;
      w->spec_ = std::move(spec);
      Worker* raw = w.get();
      {
        std::lock_guard lock(mu_);
        workers_.push_back(std::move(w));
      }
      raw->thread_ = std::thread([this, raw, run = program->second] {
        const int result = run(*raw);
        exited(*raw, result);
      });
    }
  }

  SupervisorEvent next_event(std::chrono::milliseconds timeout) override {
    auto limit = std::min<std::chrono::milliseconds>(timeout, std::chrono::hours(24));
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, limit, [&] { return !events_.empty(); })) return {};
    SupervisorEvent ev = events_.front();
    events_.pop_front();
    return ev;
  }

  void forward_signal(int signo) override {
    std::lock_guard lock(mu_);
    forwarded_.push_back(signo);
  }

  // Every worker is asked to stop with `signo` and joined (programs must return when
  // asked: threads cannot be killed, so `grace` is not enforced).
  std::vector<WorkerExit> stop(int signo, std::chrono::milliseconds grace) override {
    (void)grace;
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      for (auto& w : workers_) {
        if (!w->done_) w->stop_signal_ = signo;
      }
      cv_.notify_all();
    }
    for (auto& w : workers_) {
      if (w->thread_.joinable()) w->thread_.join();
    }
    std::lock_guard lock(mu_);
    std::vector<WorkerExit> exits = std::move(stop_exits_);
    stop_exits_.clear();
    std::deque<SupervisorEvent> keep;
    for (const SupervisorEvent& ev : events_) {
      if (ev.kind == SupervisorEvent::Kind::kWorkerExited) {
        exits.push_back(ev.exit);
      } else if (ev.kind == SupervisorEvent::Kind::kSignal) {
        keep.push_back(ev);
      }
    }
    events_ = std::move(keep);
    workers_.clear();
    stopping_ = false;
    attempt_failed_ = false;
    return exits;
  }

  std::vector<int> forwarded() {
    std::lock_guard lock(mu_);
    return forwarded_;
  }

 private:
  void exited(Worker& w, int result) {
    WorkerExit e;
    e.local_rank = w.spec_.local_rank;
    e.global_rank = w.spec_.global_rank;
    e.exit_code = result >= 0 ? result : 0;
    e.signal = result < 0 ? -result : 0;
    e.when = std::chrono::system_clock::now();
    std::lock_guard lock(mu_);
    w.done_ = true;
    if (stopping_) {
      stop_exits_.push_back(e);
      return;
    }
    SupervisorEvent ev;
    ev.kind = SupervisorEvent::Kind::kWorkerExited;
    ev.exit = e;
    events_.push_back(ev);
    if (e.failed()) attempt_failed_ = true;
    const bool all_done =
        std::all_of(workers_.begin(), workers_.end(), [](auto& other) { return other->done_; });
    if (all_done && !attempt_failed_) {
      SupervisorEvent all;
      all.kind = SupervisorEvent::Kind::kAllSucceeded;
      events_.push_back(all);
    }
    cv_.notify_all();
  }

  std::map<std::string, Program> programs_;
  int starts_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::deque<SupervisorEvent> events_;
  std::vector<WorkerExit> stop_exits_;
  std::vector<int> forwarded_;
  bool stopping_ = false;
  bool attempt_failed_ = false;
};

}  // namespace ddprun::launcher::test
