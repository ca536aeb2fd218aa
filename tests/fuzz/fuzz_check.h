// fuzz_check.h: FUZZ_CHECK, the fuzz entries' assertion: a broken check prints one line
// naming it and aborts (a crash, as libFuzzer expects), in every build type.
// Used by stream_fuzz.cpp and server_fuzz.cpp. Thread-safety: any thread.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace ddprun::store::fuzz {

[[noreturn]] inline void fuzz_check_failed(const char* what, const char* file, int line) {
  std::fprintf(stderr, "store fuzz check failed (%s:%d): %s\n", file, line, what);
  std::abort();
}

}  // namespace ddprun::store::fuzz

#define FUZZ_CHECK(cond)                                                              \
  do {                                                                                \
    if (!(cond)) ::ddprun::store::fuzz::fuzz_check_failed(#cond, __FILE__, __LINE__); \
  } while (0)
