// stream_fuzz.h: the store_core fuzz entry. Treats bytes as one client connection's
// stream (dialect detection, incremental parsing, round-trip encoding) applied through
// handle_request to one KvState shared by a few client ids, checking invariants.
// Used by the libFuzzer target (fuzz_store_stream) and the corpus replay test.
// Thread-safety: reentrant; each call builds its own state.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ddprun::store::fuzz {

// Runs one input. Returns normally when every invariant held; on a broken invariant it
// prints one line naming it to stderr and aborts (a crash, as libFuzzer expects).
void run_stream(const std::uint8_t* data, std::size_t size);

}  // namespace ddprun::store::fuzz
