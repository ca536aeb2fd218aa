// memory_return_test.cpp: a real ddprun-store process gives memory back. A raw client
// sets 1 M keys and deletes them, then pushes and pops 200 k queue items; the server's
// VmRSS (/proc/<pid>/status) must come back near where it started (issue 23 item 4: it
// stayed at +200 MB and +28 MB, the hash table's buckets and glibc's freed chunks).

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/eventually.h"
#include "tests/support/raw_client.h"
#include "tests/support/store_process.h"

// A sanitizer's allocator keeps freed memory (ASan's quarantine, TSan's shadow), so the
// RSS says nothing there: these cases exist only in builds without one (scripts/test runs
// them from the Release build).
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)

namespace {

using namespace ddprun::store;
using namespace ddprun::store::testing;

using ddprun::test::StoreProcess;

std::string key_of(int i) { return "/mem/" + std::to_string(i); }

constexpr int kBatch = 4000;

// Runs `count` requests built by `request(i)` in pipelined batches; each batch's replies
// (`reply_bytes` each; 0: none, then a PING fences the batch) are read in one piece.
template <class Request>
void pipeline(RawClient& c, int count, std::size_t reply_bytes, Request request) {
  for (int first = 0; first < count; first += kBatch) {
    const int n = std::min(kBatch, count - first);
    std::string out;
    for (int i = first; i < first + n; ++i) out += request(i);
    if (reply_bytes == 0) out += encode(Op::kPing, Dialect::kModern, {}, {}, 7);
    c.send(out);
    const std::size_t expect = reply_bytes == 0 ? 4 : reply_bytes * static_cast<std::size_t>(n);
    REQUIRE(c.read_exact(expect, std::chrono::seconds(60)).has_value());
  }
}

constexpr long kMiB = 1024;  // in KiB

TEST_CASE("store process: 1 M keys set then deleted give their memory back", "[server][memory]") {
  StoreProcess store(DDPRUN_STORE_BIN);
  RawClient c(store.port());
  c.handshake();
  const long start = store.rss_kib();
  const std::string value(100, 'v');
  pipeline(c, 1'000'000, 0,
           [&](int i) { return encode(Op::kSet, Dialect::kModern, {key_of(i)}, {value}); });
  const long full = store.rss_kib();
  pipeline(c, 1'000'000, 8,
           [&](int i) { return encode(Op::kDeleteKey, Dialect::kModern, {key_of(i)}); });
  long after = 0;
  bool back = ddprun::test::eventually([&] { return (after = store.rss_kib()) < start + 8 * kMiB; },
                                       std::chrono::seconds(5));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  INFO("VmRSS KiB: start " << start << ", with 1 M keys " << full << ", after deleting " << after
                           << ", 1 s later " << store.rss_kib());
  CHECK(full > start + 100 * kMiB);  // the keys really were held
  CHECK(back);
  c.expect_ping_echo(9);  // and the server still serves
}

TEST_CASE("store process: 200 k queue items pushed then popped give their memory back",
          "[server][memory]") {
  StoreProcess store(DDPRUN_STORE_BIN);
  RawClient c(store.port());
  c.handshake();
  const long start = store.rss_kib();
  const std::string value(100, 'q');
  pipeline(c, 200'000, 0,
           [&](int) { return encode(Op::kQueuePush, Dialect::kModern, {"/q"}, {value}); });
  const long full = store.rss_kib();
  // QUEUE_POP's reply: the length before the pop (i64), then the value (u64 length + bytes).
  pipeline(c, 200'000, 8 + 8 + value.size(),
           [&](int) { return encode(Op::kQueuePop, Dialect::kModern, {"/q"}); });
  long after = 0;
  bool back = ddprun::test::eventually([&] { return (after = store.rss_kib()) < start + 8 * kMiB; },
                                       std::chrono::seconds(5));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  INFO("VmRSS KiB: start " << start << ", with 200 k items " << full << ", after popping " << after
                           << ", 1 s later " << store.rss_kib());
  CHECK(full > start + 20 * kMiB);
  CHECK(back);
  c.expect_ping_echo(9);
}

}  // namespace

#endif  // no sanitizer
