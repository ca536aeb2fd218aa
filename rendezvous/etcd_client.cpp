#include "rendezvous/etcd_client.h"

#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <spdlog/spdlog.h>

#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "rendezvous/endpoint.h"

namespace ddprun::rdzv {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// A 64-bit number of the gateway's JSON: a decimal string, a number, or absent (0).
std::int64_t number(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return 0;
  if (it->is_number_integer()) return it->get<std::int64_t>();
  if (it->is_string()) {
    try {
      return std::stoll(it->get<std::string>());
    } catch (const std::exception&) {
      return 0;
    }
  }
  return 0;
}

std::string text(const json& j, const char* field) {
  auto it = j.find(field);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The end of the key range holding every key that starts with `prefix`.
std::string prefix_end(std::string prefix) {
  while (!prefix.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(prefix.back());
    if (last < 0xff) {
      ++last;
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

// A transport-level failure of one member: try the next.
struct Unreachable {
  std::string why;
};

}  // namespace

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned v = static_cast<unsigned char>(in[i]) << 16 |
                       static_cast<unsigned char>(in[i + 1]) << 8 |
                       static_cast<unsigned char>(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (i < in.size()) {
    unsigned v = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<unsigned char>(in[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view in) {
  if (in.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (std::size_t i = 0; i < in.size(); i += 4) {
    unsigned v = 0;
    int pad = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      const char c = in[i + k];
      unsigned d = 0;
      if (c == '=' && i + 4 == in.size() && k >= 2) {
        ++pad;
      } else {
        if (pad > 0) return std::nullopt;
        const auto pos = kAlphabet.find(c);
        if (pos == std::string_view::npos) return std::nullopt;
        d = static_cast<unsigned>(pos);
      }
      v = v << 6 | d;
    }
    out += static_cast<char>((v >> 16) & 0xff);
    if (pad < 2) out += static_cast<char>((v >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(v & 0xff);
  }
  return out;
}

std::string EtcdEndpoint::to_string() const {
  return std::string(tls ? "https://" : "http://") + Endpoint{host, port}.to_string();
}

EtcdEndpoint parse_etcd_endpoint(std::string_view text) {
  EtcdEndpoint out;
  std::string_view rest = text;
  if (rest.rfind("https://", 0) == 0) {
    out.tls = true;
    rest.remove_prefix(8);
  } else if (rest.rfind("http://", 0) == 0) {
    rest.remove_prefix(7);
  } else if (rest.find("://") != std::string_view::npos) {
    throw RendezvousError("--rdzv-endpoint '" + std::string(text) +
                          "': an etcd endpoint is http://host:port, https://host:port or "
                          "host:port");
  }
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  const Endpoint ep = parse_endpoint(rest, 2379, "--rdzv-endpoint");
  if (ep.port == 0) {
    throw RendezvousError("--rdzv-endpoint '" + std::string(text) + "': etcd port 0");
  }
  out.host = ep.host;
  out.port = ep.port;
  return out;
}

struct EtcdClient::Impl {
  EtcdOptions options;
  std::vector<EtcdEndpoint> endpoints;
  bool tls = false;
  std::size_t current = 0;
  asio::io_context ioc;
  std::optional<asio::ssl::context> ssl_ctx;
  // The connection to endpoints[current], when open.
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> secure;
  beast::flat_buffer buffer;
  bool fresh = false;  // no exchange yet on this connection

  beast::tcp_stream& lowest() { return secure ? beast::get_lowest_layer(*secure) : *plain; }

  void close() {
    boost::system::error_code ignored;
    if (plain) plain->socket().close(ignored);
    if (secure) beast::get_lowest_layer(*secure).socket().close(ignored);
    plain.reset();
    secure.reset();
    buffer.clear();
    fresh = false;
  }

  // Runs the io_context until the pending operation completed; ec is its result.
  void run() {
    ioc.restart();
    ioc.run();
  }

  void open(const EtcdEndpoint& ep) {
    close();
    boost::system::error_code ec;
    tcp::resolver resolver(ioc);
    auto results = resolver.resolve(ep.host, std::to_string(ep.port), ec);
    if (ec) throw Unreachable{"cannot resolve " + ep.host + ": " + ec.message()};
    auto done = [&ec](const boost::system::error_code& e, auto&&...) { ec = e; };
    if (tls) {
      secure.emplace(ioc, *ssl_ctx);
      auto& low = beast::get_lowest_layer(*secure);
      low.expires_after(options.request_timeout);
      low.async_connect(results, done);
      run();
      if (ec) throw Unreachable{"cannot connect: " + ec.message()};
      // The member's certificate must name the host or IP of the endpoint; OpenSSL's
      // own check, so that a refusal says why (SSL_get_verify_result).
      SSL* ssl = secure->native_handle();
      const bool checked =
          is_ip_literal(ep.host)
              ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), ep.host.c_str()) == 1
              : SSL_set_tlsext_host_name(ssl, ep.host.c_str()) == 1 &&
                    SSL_set1_host(ssl, ep.host.c_str()) == 1;
      if (!checked) throw Unreachable{"cannot set up the TLS host check for " + ep.host};
      low.expires_after(options.request_timeout);
      secure->async_handshake(asio::ssl::stream_base::client, done);
      run();
      if (ec) {
        std::string why = tls_hint(ec.message());
        if (const long v = SSL_get_verify_result(ssl); v != X509_V_OK) {
          why += std::string(" (") + X509_verify_cert_error_string(v) + ")";
        }
        throw Unreachable{"TLS handshake failed: " + why};
      }
      fresh = true;
    } else {
      plain.emplace(ioc);
      plain->expires_after(options.request_timeout);
      plain->async_connect(results, done);
      run();
      if (ec) throw Unreachable{"cannot connect: " + ec.message()};
    }
  }

  template <class Stream>
  http::response<http::string_body> exchange(Stream& stream,
                                             const http::request<http::string_body>& req) {
    boost::system::error_code ec;
    auto done = [&ec](const boost::system::error_code& e, auto&&...) { ec = e; };
    lowest().expires_after(options.request_timeout);
    http::async_write(stream, req, done);
    run();
    if (ec) throw Unreachable{"cannot send: " + tls_hint(ec.message())};
    http::response_parser<http::string_body> parser;
    parser.body_limit(64u << 20);
    lowest().expires_after(options.request_timeout);
    http::async_read(stream, buffer, parser, done);
    run();
    if (ec == beast::error::timeout) {
      throw Unreachable{"no answer within " + std::to_string(options.request_timeout.count()) +
                        " ms"};
    }
    if (ec) throw Unreachable{"connection lost: " + tls_hint(ec.message())};
    return parser.release();
  }

  // A TLS member that ends a new connection at its first request has most likely refused
  // this client's certificate: TLS 1.3 checks it after the client's side of the handshake
  // is done, and the alert that says so may be lost to the connection's reset. Said in
  // the user's terms: certain when the alert came through (then also in a handshake).
  std::string tls_hint(std::string why) const {
    const bool alert = why.find("alert bad certificate") != std::string::npos ||
                       why.find("alert certificate required") != std::string::npos;
    if (!secure || (!fresh && !alert)) return why;
    if (options.cert.empty()) {
      return why +
             (alert ? " (the member requires a client certificate: "
                    : " (does the member require a client certificate? ") +
             "--rdzv-conf cert=,key=)";
    }
    return why + (alert
                      ? " (the member refused the client certificate '" + options.cert + "')"
                      : " (does the member refuse the client certificate '" + options.cert + "'?)");
  }

  // One call on the current member; Unreachable on a transport failure or an
  // answer that says "try again / elsewhere".
  json call_once(const std::string& path, const json& body) {
    const EtcdEndpoint& ep = endpoints[current];
    if (!plain && !secure) open(ep);
    http::request<http::string_body> req{http::verb::post, path, 11};
    req.set(http::field::host, Endpoint{ep.host, ep.port}.to_string());
    req.set(http::field::content_type, "application/json");
    req.keep_alive(true);
    req.body() = body.dump();
    req.prepare_payload();
    http::response<http::string_body> res;
    try {
      res = secure ? exchange(*secure, req) : exchange(*plain, req);
      fresh = false;
    } catch (const Unreachable&) {
      close();
      throw;
    }
    if (!res.keep_alive()) close();
    json j = json::parse(res.body(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      close();
      throw Unreachable{"HTTP " + std::to_string(res.result_int()) +
                        " without a JSON answer (is this an etcd v3 client URL?)"};
    }
    if (j.contains("error")) {
      const std::int64_t code = number(j, "code");
      std::string msg = text(j, "message");
      if (msg.empty()) msg = text(j, "error");
      // gRPC Unavailable (14), DeadlineExceeded (4), Unknown (2, "leader changed"):
      // this member cannot serve now; another may.
      if (code == 14 || code == 4 || code == 2) throw Unreachable{msg};
      throw EtcdError(path + " failed: " + msg);
    }
    return j;
  }

  std::string where() const {
    std::string out = "etcd at ";
    for (std::size_t i = 0; i < endpoints.size(); ++i) {
      out += (i ? ", " : "") + endpoints[i].to_string();
    }
    return out;
  }

  json call(const std::string& path, const json& body) {
    const auto deadline = Clock::now() + options.failover_timeout;
    std::string last;
    for (int attempt = 0;; ++attempt) {
      if (options.cancel && options.cancel->load()) {
        throw RendezvousInterruptedError(where() + ": interrupted");
      }
      try {
        return call_once(path, body);
      } catch (const Unreachable& u) {
        last = endpoints[current].to_string() + ": " + u.why;
        spdlog::debug("{}: {}", where(), last);
      }
      close();  // the next try opens a connection to the next member
      current = (current + 1) % endpoints.size();
      if (Clock::now() >= deadline) {
        throw EtcdError(where() + ": no member answered within " +
                        std::to_string(options.failover_timeout.count() / 1000.0).substr(0, 4) +
                        " s (last: " + last + ")");
      }
      // A full turn of the list without an answer: pause before the next turn.
      if ((attempt + 1) % endpoints.size() == 0) {
        const auto pause = std::min<Clock::duration>(Ms(200), deadline - Clock::now());
        std::this_thread::sleep_for(pause);
      }
    }
  }
};

EtcdClient::EtcdClient(EtcdOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  auto& o = impl_->options;
  if (o.endpoints.empty()) throw RendezvousError("--rdzv-endpoint: no etcd endpoint given");
  for (const auto& e : o.endpoints) {
    impl_->endpoints.push_back(parse_etcd_endpoint(e));
    impl_->tls = impl_->tls || impl_->endpoints.back().tls;
  }
  impl_->tls = impl_->tls || !o.cacert.empty() || !o.cert.empty() || !o.key.empty();
  for (auto& ep : impl_->endpoints) ep.tls = impl_->tls;
  for (const auto& [key, file] : std::array<std::pair<const char*, std::string*>, 3>{
           {{"cacert", &o.cacert}, {"cert", &o.cert}, {"key", &o.key}}}) {
    if (file->empty()) continue;
    std::ifstream probe(*file);
    if (!probe) {
      throw RendezvousError(std::string("--rdzv-conf ") + key + "='" + *file +
                            "': cannot read the file");
    }
  }
  if (o.cert.empty() != o.key.empty()) {
    throw RendezvousError(
        "--rdzv-conf: cert and key go together (a client certificate and its "
        "private key)");
  }
  if (impl_->tls) {
    auto& ctx = impl_->ssl_ctx.emplace(asio::ssl::context::tls_client);
    try {
      if (!o.cacert.empty()) {
        ctx.load_verify_file(o.cacert);
      } else {
        ctx.set_default_verify_paths();
      }
      ctx.set_verify_mode(asio::ssl::verify_peer);
      if (!o.cert.empty()) {
        ctx.use_certificate_chain_file(o.cert);
        ctx.use_private_key_file(o.key, asio::ssl::context::pem);
      }
    } catch (const boost::system::system_error& e) {
      throw RendezvousError("--rdzv-conf cacert/cert/key: cannot load the TLS files: " +
                            std::string(e.what()));
    }
  }
}

EtcdClient::~EtcdClient() { impl_->close(); }

std::string EtcdClient::where() const { return impl_->where(); }

namespace {

EtcdKv decode_kv(const json& j) {
  EtcdKv kv;
  kv.key = base64_decode(text(j, "key")).value_or("");
  kv.value = base64_decode(text(j, "value")).value_or("");
  kv.create_revision = number(j, "create_revision");
  kv.mod_revision = number(j, "mod_revision");
  kv.version = number(j, "version");
  kv.lease = number(j, "lease");
  return kv;
}

}  // namespace

std::optional<EtcdKv> EtcdClient::get(const std::string& key) {
  json r = impl_->call("/v3/kv/range", {{"key", base64_encode(key)}});
  if (!r.contains("kvs") || r["kvs"].empty()) return std::nullopt;
  return decode_kv(r["kvs"][0]);
}

std::vector<EtcdKv> EtcdClient::get_prefix(const std::string& prefix, bool keys_only,
                                           std::int64_t* revision) {
  json body = {{"key", base64_encode(prefix)}, {"range_end", base64_encode(prefix_end(prefix))}};
  if (keys_only) body["keys_only"] = true;
  json r = impl_->call("/v3/kv/range", body);
  if (revision) *revision = r.contains("header") ? number(r["header"], "revision") : 0;
  std::vector<EtcdKv> out;
  if (r.contains("kvs")) {
    for (const auto& kv : r["kvs"]) out.push_back(decode_kv(kv));
  }
  return out;
}

std::int64_t EtcdClient::put(const std::string& key, const std::string& value, std::int64_t lease) {
  json body = {{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease != 0) body["lease"] = std::to_string(lease);
  json r = impl_->call("/v3/kv/put", body);
  return r.contains("header") ? number(r["header"], "revision") : 0;
}

std::int64_t EtcdClient::del(const std::string& key, bool prefix) {
  json body = {{"key", base64_encode(key)}};
  if (prefix) body["range_end"] = base64_encode(prefix_end(key));
  return number(impl_->call("/v3/kv/deleterange", body), "deleted");
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

std::int64_t EtcdClient::lease_grant(std::int64_t ttl_s) {
  json r = impl_->call("/v3/lease/grant", {{"TTL", std::to_string(ttl_s)}});
  const std::int64_t id = number(r, "ID");
  if (id == 0) throw EtcdError(where() + ": lease grant failed: " + text(r, "error"));
  return id;
}

std::int64_t EtcdClient::lease_keepalive(std::int64_t id) {
  json r = impl_->call("/v3/lease/keepalive", {{"ID", std::to_string(id)}});
  // The gateway streams: one {"result": {...}} per request message.
  return r.contains("result") ? number(r["result"], "TTL") : 0;
}

void EtcdClient::lease_revoke(std::int64_t id) {
  try {
    impl_->call("/v3/lease/revoke", {{"ID", std::to_string(id)}});
  } catch (const EtcdError& e) {
    if (std::string(e.what()).find("lease not found") == std::string::npos) throw;
  }
}

}  // namespace ddprun::rdzv
