// reply_stream_test.cpp: ReplyStream sends exactly what handle_request would have built
// when the request came, whatever the piece size and whatever changes meanwhile.
#include "store/core/reply_stream.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "store/core/handler.h"

namespace ddprun::store {
namespace {

Request multi_get(std::vector<std::string> keys) {
  Request r;
  r.op = Op::kMultiGet;
  r.keys = std::move(keys);
  return r;
}

TEST_CASE("ReplyStream: the bytes of handle_request's reply, in pieces of any size",
          "[reply_stream]") {
  KvState kv;
  KvState::Effects fx;
  kv.set("/a", std::string(1000, 'a'), fx);
  kv.set("/b", "", fx);
  kv.set("/c", std::string(37, 'c'), fx);
  const Request req = multi_get({"/a", "/missing", "/b", "/c", "/a"});
  std::string whole;
  Request copy = req;
  REQUIRE(handle_request(kv, 1, copy, whole, fx).kind == HandleResult::Kind::kDone);
  for (std::size_t piece :
       {std::size_t{1}, std::size_t{8}, std::size_t{9}, std::size_t{100}, std::size_t{1 << 20}}) {
    INFO("piece " << piece);
    ReplyStream stream(kv, req);
    CHECK(stream.remaining() == whole.size());
    std::string out;
    while (!stream.done()) {
      const std::size_t before = out.size();
      stream.next(out, piece);
      CHECK(out.size() - before <= std::max<std::size_t>(piece, 8));
      CHECK(out.size() > before);
    }
    CHECK(stream.remaining() == 0);
    CHECK(out == whole);
  }
}

TEST_CASE("ReplyStream: a snapshot - later changes to the keys do not show", "[reply_stream]") {
  KvState kv;
  KvState::Effects fx;
  kv.set("/k", std::string(64, 'o'), fx);
  Request get;
  get.op = Op::kGet;
  get.keys = {"/k"};
  std::string before;
  Request copy = get;
  handle_request(kv, 1, copy, before, fx);
  ReplyStream stream(kv, get);
  std::string out;
  stream.next(out, 20);
  kv.set("/k", "new", fx);
  kv.append("/k", "er", fx);
  kv.erase("/k", fx);
  while (!stream.done()) stream.next(out, 20);
  CHECK(out == before);
}

TEST_CASE("KvState: APPEND copies a value that a reply still holds", "[reply_stream]") {
  KvState kv;
  KvState::Effects fx;
  kv.set("/k", "abc", fx);
  auto held = kv.value_handle("/k");
  kv.append("/k", "def", fx);
  CHECK(*held == "abc");
  CHECK(*kv.get("/k") == "abcdef");
  held.reset();
  kv.append("/k", "g", fx);  // nobody holds it now: appended in place
  CHECK(*kv.get("/k") == "abcdefg");
}

}  // namespace
}  // namespace ddprun::store
