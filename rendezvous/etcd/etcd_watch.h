// etcd_watch.h: EtcdWatch, an etcd v3 watch of every key under a prefix (one streamed
// POST /v3/watch on a connection of its own) that resumes on the next member from the
// last delivered revision. Used by EtcdRendezvous and EtcdSession for all their waits;
// contract tests in tests/rendezvous/etcd/etcd_client_test.cpp.
// Thread-safety: one thread waits; cancel() may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/etcd/etcd_types.h"

namespace ddprun::rdzv {

struct EtcdEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  EtcdKv kv;  // a DELETE carries the key and its mod_revision only
};

// The request is a create_request with key, range_end and start_revision; the chunked
// answer is read incrementally by Beast's response parser (buffer_body), one JSON object
// a line: {"result":{"created":true}}, then {"result":{"events":[{"type":"DELETE"?,
// "kv":{...}}]}} (PUT is the type left out), or {"result":{"canceled":true,
// "compact_revision":"C"}} when the start revision was compacted away.
// The waiting pattern: read the state with a range (its header revision R), act, then
// wait(R, deadline) for the next change; the watch starts at R + 1, so nothing that
// happened between the read and the watch is missed. On a lost connection or a member
// that stops answering it reconnects to the next member and resumes from the last
// delivered revision + 1 (no event lost, none delivered twice).
class EtcdWatch {
 public:
  using Clock = std::chrono::steady_clock;

  struct Result {
    std::vector<EtcdEvent> events;  // in revision order, each after the `after` waited on
    // etcd compacted its history past the revision waited from: changes may have been
    // missed; read the state again (and wait from that read's revision).
    bool compacted = false;
    bool changed() const { return compacted || !events.empty(); }
  };

  // Watches every key starting with `prefix`; connects on the first wait(). Checks the
  // options as EtcdClient does (RendezvousError). options.cancel, when set, is honoured
  // as cancel() is, at the next wakeup.
  EtcdWatch(const EtcdOptions& options, std::string prefix);
  ~EtcdWatch();
  EtcdWatch(const EtcdWatch&) = delete;
  EtcdWatch& operator=(const EtcdWatch&) = delete;

  // Waits until a change under the prefix after store revision `after` that this watch
  // has not returned yet, or `deadline`: the changes as soon as there are some; an
  // unchanged Result at the deadline (also when no member could be reached meanwhile:
  // the caller's next EtcdClient call fails over and reports a lost cluster).
  // Throws RendezvousInterruptedError once cancelled.
  Result wait(std::int64_t after, Clock::time_point deadline);

  // Watches `prefix` from the next wait() on (after `after`, as ever): the stream of the
  // old prefix is closed (a new one is opened on the next wait()). On the waiting thread.
  void set_prefix(std::string prefix);

  // Makes a blocked (or the next) wait() throw RendezvousInterruptedError promptly: closes
  // the watch's socket from the waiting thread (posted to its io_context). Sticky.
  void cancel();

  std::string where() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun::rdzv
