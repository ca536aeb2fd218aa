// log_capture.h: LogCapture, which keeps every line spdlog's default logger prints while
// it lives (instead of printing), for tests that check what the code under test logged.
// Header-only; the test links spdlog. Thread-safety: the lines are taken under the sink's
// mutex, so code on other threads may log meanwhile; one LogCapture at a time.
#pragma once

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ddprun::test {

// Keeps every line spdlog's default logger prints while it lives (instead of printing).
class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink_));
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  std::vector<std::string> lines() { return sink_->lines(); }
  bool has(const std::string& needle) {
    for (const std::string& l : lines()) {
      if (l.find(needle) != std::string::npos) return true;
    }
    return false;
  }

 private:
  class Sink : public spdlog::sinks::base_sink<std::mutex> {
   public:
    std::vector<std::string> lines() {
      std::lock_guard lock(mutex_);
      return lines_;
    }

   protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
      lines_.emplace_back(msg.payload.data(), msg.payload.size());
    }
    void flush_() override {}

   private:
    std::vector<std::string> lines_;
  };
  std::shared_ptr<Sink> sink_ = std::make_shared<Sink>();
  std::shared_ptr<spdlog::logger> previous_;
};

}  // namespace ddprun::test
