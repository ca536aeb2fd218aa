// etcd_connection.cpp: EtcdConnection and the gateway's field decoding (see
// etcd_connection.h).
#include "rendezvous/etcd/etcd_connection.h"

#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <algorithm>
#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <fstream>

#include "base/silent_peer.h"
#include "base/text.h"
#include "rendezvous/endpoint.h"

namespace ddprun::rdzv {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using json = nlohmann::json;

std::int64_t etcd_number(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return 0;
  if (it->is_number_integer()) return it->get<std::int64_t>();
  if (it->is_string()) return parse_int<std::int64_t>(it->get<std::string>()).value_or(0);
  return 0;
}

std::string etcd_text(const json& j, const char* field) {
  auto it = j.find(field);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string etcd_prefix_end(std::string prefix) {
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

json etcd_prefix_range(const std::string& prefix) {
  return {{"key", base64_encode(prefix)}, {"range_end", base64_encode(etcd_prefix_end(prefix))}};
}

EtcdKv decode_etcd_kv(const json& j) {
  EtcdKv kv;
  kv.key = base64_decode(etcd_text(j, "key")).value_or("");
  kv.value = base64_decode(etcd_text(j, "value")).value_or("");
  kv.create_revision = etcd_number(j, "create_revision");
  kv.mod_revision = etcd_number(j, "mod_revision");
  kv.version = etcd_number(j, "version");
  kv.lease = etcd_number(j, "lease");
  return kv;
}

EtcdConnection::EtcdConnection(EtcdOptions options) : options_(std::move(options)) {
  auto& o = options_;
  if (o.endpoints.empty()) throw RendezvousError("--rdzv-endpoint: no etcd endpoint given");
  for (const auto& e : o.endpoints) {
    endpoints_.push_back(parse_etcd_endpoint(e));
    tls_ = tls_ || endpoints_.back().tls;
  }
  tls_ = tls_ || !o.cacert.empty() || !o.cert.empty() || !o.key.empty();
  for (auto& ep : endpoints_) ep.tls = tls_;
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
  if (tls_) {
    auto& ctx = ssl_ctx_.emplace(asio::ssl::context::tls_client);
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

EtcdConnection::~EtcdConnection() { close(); }

beast::tcp_stream& EtcdConnection::lowest() {
  return secure_ ? beast::get_lowest_layer(*secure_) : *plain_;
}

void EtcdConnection::close_socket() {
  boost::system::error_code ignored;
  if (plain_) plain_->socket().close(ignored);
  if (secure_) beast::get_lowest_layer(*secure_).socket().close(ignored);
}

void EtcdConnection::close() {
  close_socket();
  plain_.reset();
  secure_.reset();
  buffer_.clear();
  fresh_ = false;
}

void EtcdConnection::close_from_any_thread() {
  asio::post(ioc_, [this] { close_socket(); });
}

void EtcdConnection::next_member(const std::vector<bool>* avoid) {
  close();
  const bool every = !avoid || std::find(avoid->begin(), avoid->end(), false) == avoid->end();
  do {
    current_ = (current_ + 1) % endpoints_.size();
  } while (!every && (*avoid)[current_]);
}

void EtcdConnection::run() {
  ioc_.restart();
  ioc_.run();
}

std::chrono::milliseconds EtcdConnection::connect_timeout() const {
  const auto silent = options_.silent_member_timeout;
  return silent.count() > 0 ? std::min(options_.request_timeout, silent) : options_.request_timeout;
}

void EtcdConnection::open() {
  close();
  const EtcdEndpoint& ep = endpoints_[current_];
  boost::system::error_code ec;
  tcp::resolver resolver(ioc_);
  auto results = resolver.resolve(ep.host, std::to_string(ep.port), ec);
  if (ec) throw EtcdUnreachable{"cannot resolve " + ep.host + ": " + ec.message()};
  auto done = [&ec](const boost::system::error_code& e, auto&&...) { ec = e; };
  if (tls_) {
    secure_.emplace(ioc_, *ssl_ctx_);
    auto& low = beast::get_lowest_layer(*secure_);
    low.expires_after(connect_timeout());
    low.async_connect(results, done);
    run();
    if (ec) throw EtcdUnreachable{"cannot connect: " + ec.message()};
    bound_silent_peer(low.socket().native_handle(), options_.silent_member_timeout);
    // The member's certificate must name the host or IP of the endpoint; OpenSSL's
    // own check, so that a refusal says why (SSL_get_verify_result).
    SSL* ssl = secure_->native_handle();
    const bool checked =
        is_ip_literal(ep.host)
            ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), ep.host.c_str()) == 1
            : SSL_set_tlsext_host_name(ssl, ep.host.c_str()) == 1 &&
                  SSL_set1_host(ssl, ep.host.c_str()) == 1;
    if (!checked) throw EtcdUnreachable{"cannot set up the TLS host check for " + ep.host};
    low.expires_after(options_.request_timeout);
    secure_->async_handshake(asio::ssl::stream_base::client, done);
    run();
    if (ec) {
      std::string why = tls_hint(ec.message());
      if (const long v = SSL_get_verify_result(ssl); v != X509_V_OK) {
        why += std::string(" (") + X509_verify_cert_error_string(v) + ")";
      }
      throw EtcdUnreachable{"TLS handshake failed: " + why};
    }
    fresh_ = true;
  } else {
    plain_.emplace(ioc_);
    plain_->expires_after(connect_timeout());
    plain_->async_connect(results, done);
    run();
    if (ec) throw EtcdUnreachable{"cannot connect: " + ec.message()};
    bound_silent_peer(plain_->socket().native_handle(), options_.silent_member_timeout);
  }
}

std::string EtcdConnection::tls_hint(std::string why) const {
  const bool alert = why.find("alert bad certificate") != std::string::npos ||
                     why.find("alert certificate required") != std::string::npos;
  if (!secure_ || (!fresh_ && !alert)) return why;
  if (options_.cert.empty()) {
    return why +
           (alert ? " (the member requires a client certificate: "
                  : " (does the member require a client certificate? ") +
           "--rdzv-conf cert=,key=)";
  }
  return why + (alert
                    ? " (the member refused the client certificate '" + options_.cert + "')"
                    : " (does the member refuse the client certificate '" + options_.cert + "'?)");
}

http::request<http::string_body> EtcdConnection::post(const std::string& path,
                                                      const std::string& body) const {
  const EtcdEndpoint& ep = endpoints_[current_];
  http::request<http::string_body> req{http::verb::post, path, 11};
  req.set(http::field::host, Endpoint{ep.host, ep.port}.to_string());
  req.set(http::field::content_type, "application/json");
  // etcd's "require leader" metadata (the gateway passes Grpc-Metadata- headers on): a
  // member that knows no leader (cut into a minority) answers "no leader" at once, and
  // the caller fails over, instead of holding the call until etcd's own request timeout
  // (7 s) or this client's.
  req.set("Grpc-Metadata-hasleader", "true");
  req.keep_alive(true);
  req.body() = body;
  req.prepare_payload();
  return req;
}

std::string EtcdConnection::where() const {
  std::string out = "etcd at ";
  for (std::size_t i = 0; i < endpoints_.size(); ++i) {
    out += (i ? ", " : "") + endpoints_[i].to_string();
  }
  return out;
}

}  // namespace ddprun::rdzv
