// fuzz_store_stream.cpp: libFuzzer entry point for the store_core stream fuzzer.
// Built only with -DDDPRUN_FUZZ=ON and clang; run it through scripts/fuzz.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/stream_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ddprun::store::fuzz::run_stream(data, size);
  return 0;
}
