// server_fuzz.h: the server fuzz entry. Sends the bytes as a client connection's stream,
// twice, to one in-process TcpStoreServer over loopback with small caps: one connection
// reads its replies, the other never does (back-pressure, the output budget, streamed
// replies). Then a third client must still be served at once, the server's unsent output
// must stay within its caps, and a reset must leave none. store_core stays pure: this
// entry is the only fuzzer that does I/O.
// Used by the libFuzzer target fuzz_store_server (scripts/fuzz) and its corpus replay.
// Thread-safety: one call at a time (the server is shared by every call).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ddprun::store::fuzz {

// Runs one input. Returns normally when every check held; otherwise prints one line to
// stderr and aborts (a crash, as libFuzzer expects).
void run_server(const std::uint8_t* data, std::size_t size);

}  // namespace ddprun::store::fuzz
