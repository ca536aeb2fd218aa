// fuzz_store_server.cpp: libFuzzer entry point for the server fuzzer (server_fuzz.h).
// Built only with -DDDPRUN_FUZZ=ON and clang; run it through scripts/fuzz.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/server_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ddprun::store::fuzz::run_server(data, size);
  return 0;
}
