// Catch2 v2 main shared by every test executable. It builds spdlog's registry (a
// function-local static of libspdlog, made on first use) on the main thread before any
// test runs: a test whose first log line came from two of its threads at once built it
// concurrently, which ThreadSanitizer reported as a race on the default logger.
#define CATCH_CONFIG_RUNNER
#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>

int main(int argc, char** argv) {
  spdlog::default_logger_raw();
  return Catch::Session().run(argc, argv);
}
