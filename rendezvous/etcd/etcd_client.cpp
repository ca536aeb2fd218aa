// etcd_client.cpp: EtcdClient (etcd_client.h): the v3 gateway's kv, txn and lease calls,
// each retried along the member list until its failover deadline.
#include "rendezvous/etcd/etcd_client.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/beast/http.hpp>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "rendezvous/etcd/etcd_connection.h"

namespace ddprun::rdzv {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

// A try that failed after this long met a member that is silent or stalled (a timeout),
// not one that refused at once ("no leader", a refused connection).
constexpr Ms kSlowTry{500};

// Says, at WARNING, that a call left `failed` ("member: why") for `now_on`: once per member
// and minute in this process, whichever of the agent's clients (its own, its session's,
// the revocation's) meets the member first; the others say it at DEBUG.
void say_failover(const std::string& member, const std::string& failed, const std::string& now_on) {
  static std::mutex mu;
  static std::map<std::string, Clock::time_point> said;  // guarded by mu
  constexpr auto kQuiet = std::chrono::minutes(1);
  bool loud = false;
  {
    std::lock_guard lock(mu);
    auto [it, fresh] = said.try_emplace(member, Clock::now());
    loud = fresh || Clock::now() - it->second >= kQuiet;
    if (loud) it->second = Clock::now();
  }
  spdlog::log(loud ? spdlog::level::warn : spdlog::level::debug, "etcd member {}; going on with {}",
              failed, now_on);
}

}  // namespace

struct EtcdClient::Impl {
  explicit Impl(EtcdOptions options) : conn(std::move(options)) {}
  EtcdConnection conn;

  template <class Stream>
  http::response<http::string_body> exchange(Stream& stream,
                                             const http::request<http::string_body>& req) {
    const auto timeout = conn.options().request_timeout;
    boost::system::error_code ec;
    auto done = [&ec](const boost::system::error_code& e, auto&&...) { ec = e; };
    conn.lowest().expires_after(timeout);
    http::async_write(stream, req, done);
    conn.run();
    if (ec) throw EtcdUnreachable{"cannot send: " + conn.tls_hint(ec.message())};
    http::response_parser<http::string_body> parser;
    parser.body_limit(64u << 20);
    conn.lowest().expires_after(timeout);
    http::async_read(stream, conn.buffer(), parser, done);
    conn.run();
    if (ec == beast::error::timeout) {
      throw EtcdUnreachable{"no answer within " + std::to_string(timeout.count()) + " ms"};
    }
    if (ec) throw EtcdUnreachable{"connection lost: " + conn.tls_hint(ec.message())};
    return parser.release();
  }

  // One call on the current member; EtcdUnreachable on a transport failure or an
  // answer that says "try again / elsewhere".
  json call_once(const std::string& path, const json& body) {
    if (!conn.is_open()) conn.open();
    const http::request<http::string_body> req = conn.post(path, body.dump());
    http::response<http::string_body> res;
    try {
      conn.with_stream([&](auto& stream) { res = exchange(stream, req); });
      conn.mark_used();
    } catch (const EtcdUnreachable&) {
      conn.close();
      throw;
    }
    if (!res.keep_alive()) conn.close();
    json j = json::parse(res.body(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      conn.close();
      throw EtcdUnreachable{"HTTP " + std::to_string(res.result_int()) +
                            " without a JSON answer (is this an etcd v3 client URL?)"};
    }
    if (j.contains("error")) {
      // A unary call's error is {"error": "...", "code": N, "message": "..."}; a streamed
      // one's (lease keepalive) {"error": {"grpc_code": N, "message": "...", ...}}.
      const json& e = j["error"].is_object() ? j["error"] : j;
      const std::int64_t code = etcd_number(e, e.contains("grpc_code") ? "grpc_code" : "code");
      std::string msg = etcd_text(e, "message");
      if (msg.empty()) msg = etcd_text(j, "error");
      if (msg.empty()) msg = j["error"].dump();
      // gRPC Unavailable (14), DeadlineExceeded (4), Unknown (2, "leader changed"),
      // Canceled (1, the member gave up on it): this member cannot serve now; another may.
      if (code == 14 || code == 4 || code == 2 || code == 1) throw EtcdUnreachable{msg};
      throw EtcdError(path + " failed: " + msg, code);
    }
    return j;
  }

  json call(const std::string& path, const json& body) {
    const EtcdOptions& options = conn.options();
    const auto deadline = Clock::now() + options.failover_timeout;
    const std::size_t started = conn.member_index();
    std::string first_member, first, last;
    // Members that failed slowly in this call (silent, stalled) are tried again only once
    // every member has: a minority member that refuses at once must not send the call
    // back to a silent one while the majority elects its leader.
    std::vector<bool> slow(conn.members(), false);
    for (std::size_t since_pause = 1;; ++since_pause) {
      if (options.cancel && options.cancel->load()) {
        throw RendezvousInterruptedError(conn.where() + ": interrupted");
      }
      const auto tried = Clock::now();
      try {
        json answer = call_once(path, body);
        if (conn.member_index() != started) {
          say_failover(first_member, first, conn.member().to_string());
        }
        return answer;
      } catch (const EtcdUnreachable& u) {
        last = conn.member().to_string() + ": " + u.why;
        if (first.empty()) {
          first_member = conn.member().to_string();
          first = last;
        }
        spdlog::debug("{}: {}", conn.where(), last);
        if (Clock::now() - tried >= kSlowTry) slow[conn.member_index()] = true;
      }
      conn.next_member(&slow);  // the next try opens a connection to the next member
      if (Clock::now() >= deadline) {
        throw EtcdError(conn.where() + ": no member answered within " +
                        std::to_string(options.failover_timeout.count() / 1000.0).substr(0, 4) +
                        " s (last: " + last + ")");
      }
      // A turn of the members left to try without an answer: pause before the next turn.
      const auto quick = static_cast<std::size_t>(std::count(slow.begin(), slow.end(), false));
      if (since_pause >= (quick ? quick : slow.size())) {
        const auto pause = std::min<Clock::duration>(Ms(200), deadline - Clock::now());
        std::this_thread::sleep_for(pause);
        since_pause = 0;
      }
    }
  }
};

EtcdClient::EtcdClient(EtcdOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

EtcdClient::~EtcdClient() = default;

std::string EtcdClient::where() const { return impl_->conn.where(); }

std::optional<EtcdKv> EtcdClient::get(const std::string& key, std::int64_t* revision) {
  json r = impl_->call("/v3/kv/range", {{"key", base64_encode(key)}});
  if (revision) *revision = r.contains("header") ? etcd_number(r["header"], "revision") : 0;
  if (!r.contains("kvs") || r["kvs"].empty()) return std::nullopt;
  return decode_etcd_kv(r["kvs"][0]);
}

std::vector<EtcdKv> EtcdClient::get_prefix(const std::string& prefix, bool keys_only,
                                           std::int64_t* revision) {
  json body = etcd_prefix_range(prefix);
  if (keys_only) body["keys_only"] = true;
  json r = impl_->call("/v3/kv/range", body);
  if (revision) *revision = r.contains("header") ? etcd_number(r["header"], "revision") : 0;
  std::vector<EtcdKv> out;
  if (r.contains("kvs")) {
    for (const auto& kv : r["kvs"]) out.push_back(decode_etcd_kv(kv));
  }
  return out;
}

std::int64_t EtcdClient::count(const std::string& prefix) {
  json body = etcd_prefix_range(prefix);
  body["count_only"] = true;
  return etcd_number(impl_->call("/v3/kv/range", body), "count");
}

std::optional<EtcdKv> EtcdClient::oldest(const std::string& prefix, std::int64_t* count) {
  return first_by_creation(prefix, "ASCEND", count);
}

std::optional<EtcdKv> EtcdClient::newest(const std::string& prefix, std::int64_t* count) {
  return first_by_creation(prefix, "DESCEND", count);
}

std::optional<EtcdKv> EtcdClient::first_by_creation(const std::string& prefix, const char* order,
                                                    std::int64_t* count) {
  json body = etcd_prefix_range(prefix);
  body.update(
      {{"keys_only", true}, {"limit", "1"}, {"sort_order", order}, {"sort_target", "CREATE"}});
  json r = impl_->call("/v3/kv/range", body);
  if (count) *count = r.contains("count") ? etcd_number(r, "count") : 0;
  if (!r.contains("kvs") || r["kvs"].empty()) return std::nullopt;
  return decode_etcd_kv(r["kvs"][0]);
}

std::int64_t EtcdClient::put(const std::string& key, const std::string& value, std::int64_t lease) {
  json body = {{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease != 0) body["lease"] = std::to_string(lease);
  json r = impl_->call("/v3/kv/put", body);
  return r.contains("header") ? etcd_number(r["header"], "revision") : 0;
}

std::int64_t EtcdClient::del(const std::string& key, bool prefix) {
  const json body = prefix ? etcd_prefix_range(key) : json{{"key", base64_encode(key)}};
  return etcd_number(impl_->call("/v3/kv/deleterange", body), "deleted");
}

bool EtcdClient::txn(const std::vector<EtcdCompare>& compares, const std::vector<EtcdPut>& puts) {
  json cmp = json::array();
  for (const auto& c : compares) {
    json j = {{"key", base64_encode(c.key)}, {"result", "EQUAL"}};
    switch (c.target) {
      case EtcdCompare::Target::kCreate:
        j["target"] = "CREATE";
        j["create_revision"] = std::to_string(c.number);
        break;
      case EtcdCompare::Target::kMod:
        j["target"] = "MOD";
        j["mod_revision"] = std::to_string(c.number);
        break;
      case EtcdCompare::Target::kVersion:
        j["target"] = "VERSION";
        j["version"] = std::to_string(c.number);
        break;
      case EtcdCompare::Target::kValue:
        j["target"] = "VALUE";
        j["value"] = base64_encode(c.value);
        break;
    }
    cmp.push_back(std::move(j));
  }
  json ops = json::array();
  for (const auto& p : puts) {
    json put = {{"key", base64_encode(p.key)}, {"value", base64_encode(p.value)}};
    if (p.lease != 0) put["lease"] = std::to_string(p.lease);
    ops.push_back({{"request_put", put}});
  }
  json r = impl_->call("/v3/kv/txn", {{"compare", cmp}, {"success", ops}});
  return r.value("succeeded", false);
}

void EtcdClient::compact(std::int64_t revision) {
  impl_->call("/v3/kv/compaction", {{"revision", std::to_string(revision)}});
}

std::int64_t EtcdClient::lease_grant(std::int64_t ttl_s) {
  json r = impl_->call("/v3/lease/grant", {{"TTL", std::to_string(ttl_s)}});
  const std::int64_t id = etcd_number(r, "ID");
  if (id == 0) throw EtcdError(where() + ": lease grant failed: " + etcd_text(r, "error"));
  return id;
}

std::int64_t EtcdClient::lease_keepalive(std::int64_t id) {
  json r = impl_->call("/v3/lease/keepalive", {{"ID", std::to_string(id)}});
  // The gateway streams: one {"result": {...}} per request message.
  return r.contains("result") ? etcd_number(r["result"], "TTL") : 0;
}

void EtcdClient::lease_revoke(std::int64_t id) {
  try {
    impl_->call("/v3/lease/revoke", {{"ID", std::to_string(id)}});
  } catch (const EtcdError& e) {
    if (e.grpc_code() != EtcdError::kNotFound) throw;  // a lease already gone is revoked
  }
}

}  // namespace ddprun::rdzv
