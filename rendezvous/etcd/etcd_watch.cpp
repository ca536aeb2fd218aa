// etcd_watch.cpp: EtcdWatch (see etcd_watch.h).
#include "rendezvous/etcd/etcd_watch.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/beast/http.hpp>
#include <deque>
#include <limits>
#include <optional>
#include <thread>

#include "rendezvous/etcd/etcd_connection.h"

namespace ddprun::rdzv {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using json = nlohmann::json;
using Clock = EtcdWatch::Clock;

// A full turn of the member list without a watch: pause this long before the next turn.
constexpr std::chrono::milliseconds kTurnPause{200};

}  // namespace

struct EtcdWatch::Impl {
  Impl(const EtcdOptions& options, std::string p) : conn(options), prefix(std::move(p)) {}

  ~Impl() {
    // A read still in flight refers to the parser: let it complete (aborted) first. Its
    // handler can throw (std::bad_alloc while it keeps the last lines); no one is left to
    // tell, and an exception leaving a destructor would end the process
    // (bugprone-exception-escape, seen once clang-tidy read etcd_connection.cpp with it).
    if (reading) {
      try {
        conn.close_socket();
        conn.run();
      } catch (...) {
      }
    }
  }

  EtcdConnection conn;
  std::string prefix;
  std::atomic<bool> cancelled{false};

  // The watch on the open connection.
  bool streaming = false;
  std::int64_t next_rev = 0;  // the first revision not delivered yet (0 = none delivered)
  std::optional<http::response_parser<http::buffer_body>> parser;
  std::array<char, 16 * 1024> chunk{};
  std::string partial;        // body bytes after the last complete line
  std::deque<json> messages;  // complete lines not handled yet
  bool reading = false;       // an async read is in flight
  boost::system::error_code read_error;

  bool stopped() const {
    const auto* flag = conn.options().cancel;
    return cancelled.load() || (flag && flag->load());
  }

  void throw_if_stopped() const {
    if (stopped()) throw RendezvousInterruptedError(conn.where() + ": interrupted");
  }

  void drop(const std::string& why) {
    spdlog::debug("{}: watch of {} on {}: {}", conn.where(), prefix, conn.member().to_string(),
                  why);
    streaming = false;
    parser.reset();
    partial.clear();
    messages.clear();
    conn.next_member();
  }

  // Opens a connection to the current member and creates the watch from `from`;
  // EtcdUnreachable on failure.
  void start(std::int64_t from) {
    conn.open();
    json create = etcd_prefix_range(prefix);
    create["start_revision"] = std::to_string(from);
    const json body = {{"create_request", create}};
    // post() requires a leader: a member cut off from the leader ends the watch instead
    // of keeping it silent.
    auto req = conn.post("/v3/watch", body.dump());
    boost::system::error_code ec;
    auto done = [&ec](const boost::system::error_code& e, auto&&...) { ec = e; };
    conn.lowest().expires_after(conn.options().request_timeout);
    conn.with_stream([&](auto& stream) { http::async_write(stream, req, done); });
    conn.run();
    if (ec) throw EtcdUnreachable{"cannot send: " + conn.tls_hint(ec.message())};
    parser.emplace();
    parser->body_limit(std::numeric_limits<std::uint64_t>::max());
    conn.lowest().expires_after(conn.options().request_timeout);
    conn.with_stream(
        [&](auto& stream) { http::async_read_header(stream, conn.buffer(), *parser, done); });
    conn.run();
    if (ec) throw EtcdUnreachable{"no watch answer: " + conn.tls_hint(ec.message())};
    conn.mark_used();
    if (parser->get().result() != http::status::ok) {
      throw EtcdUnreachable{"watch refused: HTTP " + std::to_string(parser->get().result_int())};
    }
    conn.lowest().expires_never();  // a watch is silent until something changes
    streaming = true;
    next_rev = from;
  }

  void read_some() {
    reading = true;
    parser->get().body().data = chunk.data();
    parser->get().body().size = chunk.size();
    conn.with_stream([&](auto& stream) {
      http::async_read_some(
          stream, conn.buffer(), *parser, [this](const boost::system::error_code& ec, std::size_t) {
            reading = false;
            read_error = ec == http::error::need_buffer ? boost::system::error_code() : ec;
            if (!read_error && parser->is_done()) {
              read_error = http::error::end_of_stream;
            }
            const std::size_t n = chunk.size() - parser->get().body().size;
            split(std::string_view(chunk.data(), n));
          });
    });
  }

  void split(std::string_view bytes) {
    partial.append(bytes);
    for (std::size_t nl; (nl = partial.find('\n')) != std::string::npos;) {
      json j = json::parse(partial.substr(0, nl), nullptr, /*allow_exceptions=*/false);
      partial.erase(0, nl + 1);
      if (!j.is_discarded()) messages.push_back(std::move(j));
    }
  }

  // Handles the parsed messages into `out` (events after `after`); EtcdUnreachable when
  // the member ended the watch.
  void handle(std::int64_t after, Result& out) {
    while (!messages.empty()) {
      const json j = std::move(messages.front());
      messages.pop_front();
      if (j.contains("error")) {
        const json& e = j["error"];
        const std::string msg = e.is_object() ? etcd_text(e, "message") : e.dump();
        throw EtcdUnreachable{"watch ended: " + msg};
      }
      if (!j.contains("result") || !j["result"].is_object()) continue;
      const json& r = j["result"];
      if (r.value("canceled", false)) {
        if (etcd_number(r, "compact_revision") > 0) {
          // History before compact_revision is gone: the caller re-reads, and the next
          // wait() starts from that read.
          streaming = false;
          parser.reset();
          conn.close();
          next_rev = 0;
          out.compacted = true;
          return;
        }
        throw EtcdUnreachable{"watch canceled: " + etcd_text(r, "cancel_reason")};
      }
      if (!r.contains("events") || !r["events"].is_array()) continue;
      for (const auto& e : r["events"]) {
        EtcdEvent ev;
        ev.type =
            etcd_text(e, "type") == "DELETE" ? EtcdEvent::Type::kDelete : EtcdEvent::Type::kPut;
        if (e.contains("kv")) ev.kv = decode_etcd_kv(e["kv"]);
        next_rev = std::max(next_rev, ev.kv.mod_revision + 1);
        if (ev.kv.mod_revision > after) out.events.push_back(std::move(ev));
      }
    }
  }

  Result wait(std::int64_t after, Clock::time_point deadline) {
    Result out;
    std::size_t failures = 0;
    for (;;) {
      throw_if_stopped();
      try {
        handle(after, out);
        if (out.changed()) return out;
        if (Clock::now() >= deadline) return out;
        if (!streaming) {
          start(std::max(next_rev, after + 1));
          failures = 0;
          continue;  // the creation may have brought messages already
        }
        if (read_error) {
          const auto ec = read_error;
          read_error = {};
          throw EtcdUnreachable{"watch lost: " + ec.message()};
        }
        if (!reading) read_some();
        conn.ioc().restart();
        conn.ioc().run_until(deadline);
      } catch (const EtcdUnreachable& u) {
        throw_if_stopped();
        drop(u.why);
        if (++failures % conn.members() == 0) {
          std::this_thread::sleep_for(std::min<Clock::duration>(
              kTurnPause, std::max<Clock::duration>(deadline - Clock::now(), {})));
        }
      }
    }
  }
};

EtcdWatch::EtcdWatch(const EtcdOptions& options, std::string prefix)
    : impl_(std::make_unique<Impl>(options, std::move(prefix))) {}

EtcdWatch::~EtcdWatch() = default;

void EtcdWatch::set_prefix(std::string prefix) {
  Impl& i = *impl_;
  if (prefix == i.prefix) return;
  if (i.reading) {  // let the read in flight complete (aborted) before the parser goes
    i.conn.close_socket();
    i.conn.run();
    i.reading = false;
  }
  i.conn.close();
  i.streaming = false;
  i.parser.reset();
  i.partial.clear();
  i.messages.clear();
  i.read_error = {};
  i.next_rev = 0;
  i.prefix = std::move(prefix);
}

EtcdWatch::Result EtcdWatch::wait(std::int64_t after, Clock::time_point deadline) {
  return impl_->wait(after, deadline);
}

void EtcdWatch::cancel() {
  impl_->cancelled.store(true);
  impl_->conn.close_from_any_thread();
}

std::string EtcdWatch::where() const { return impl_->conn.where(); }

}  // namespace ddprun::rdzv
