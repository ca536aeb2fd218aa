// etcd_connection.h: EtcdConnection, one HTTP/1.1 connection (Beast, plain or TLS) to one
// etcd member at a time, with the member list to fail over along, and the decoding of the
// v3 gateway's fields (decimal 64-bit numbers, base64). Internal to EtcdClient and
// EtcdWatch. Thread-safety: one thread drives the connection (its io_context);
// close_from_any_thread() may be called from any thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/etcd/etcd_types.h"

namespace ddprun::rdzv {

// A transport-level failure of one member (refused, lost, timed out, "no leader"): the
// caller tries the next member.
struct EtcdUnreachable {
  std::string why;
};

// A 64-bit number of the gateway's JSON: a decimal string, a number, or absent (0).
std::int64_t etcd_number(const nlohmann::json& j, const char* field);
// A string field, or "" when absent.
std::string etcd_text(const nlohmann::json& j, const char* field);
// The end of the key range holding every key that starts with `prefix`.
std::string etcd_prefix_end(std::string prefix);
// The fields {key, range_end} (base64) of a request on every key that starts with `prefix`.
nlohmann::json etcd_prefix_range(const std::string& prefix);
// A "kv" object of an answer or an event (key and value base64-decoded).
EtcdKv decode_etcd_kv(const nlohmann::json& j);

class EtcdConnection {
 public:
  // Checks the endpoints (RendezvousError on a bad one, none, or a TLS file that cannot
  // be read) and loads the TLS context; connects on open(). Neither copied nor moved (it
  // owns its io_context).
  explicit EtcdConnection(EtcdOptions options);
  ~EtcdConnection();

  const EtcdOptions& options() const { return options_; }
  boost::asio::io_context& ioc() { return ioc_; }
  std::size_t members() const { return endpoints_.size(); }
  const EtcdEndpoint& member() const { return endpoints_[current_]; }
  std::size_t member_index() const { return current_; }
  // Closes the connection and moves on to the next member of the list; with `avoid` (one
  // flag per member), to the next one not flagged, unless every member is.
  void next_member(const std::vector<bool>* avoid = nullptr);

  bool is_open() const { return plain_ || secure_; }
  // Connects to the current member (within connect_timeout() for the TCP connect and
  // request_timeout for the TLS handshake); EtcdUnreachable on failure.
  void open();
  // request_timeout, or silent_member_timeout when shorter: a member's kernel answers a
  // connect at once unless the member is cut off or gone.
  std::chrono::milliseconds connect_timeout() const;
  void close();
  // Closes the socket but keeps the stream: a pending operation completes with
  // operation_aborted when the io_context runs next (this thread).
  void close_socket();
  // Closes the socket from any thread (posted to the io_context): the pending operation
  // completes with operation_aborted in the thread that runs the io_context.
  void close_from_any_thread();

  // Runs the io_context until the pending operation completed.
  void run();
  // The stream of the open connection (plain or TLS), for Beast's async operations.
  template <class F>
  void with_stream(F&& f) {
    if (secure_) {
      f(*secure_);
    } else {
      f(*plain_);
    }
  }
  // The TCP layer (timeouts).
  boost::beast::tcp_stream& lowest();
  boost::beast::flat_buffer& buffer() { return buffer_; }

  // After a failure on this connection: `why`, with what it most likely means when a TLS
  // member ended a new connection at its first request (it refused this client's
  // certificate: TLS 1.3 checks it after the client's side of the handshake, and the alert
  // that says so may be lost to the reset); certain when the alert came through.
  std::string tls_hint(std::string why) const;
  // An exchange completed on this connection (it is no longer new).
  void mark_used() { fresh_ = false; }

  // A POST of `body` (JSON) to `path` on the current member, requiring a leader.
  boost::beast::http::request<boost::beast::http::string_body> post(const std::string& path,
                                                                    const std::string& body) const;

  // "etcd at http://a:1, http://b:2": how messages name the cluster.
  std::string where() const;

 private:
  EtcdOptions options_;
  std::vector<EtcdEndpoint> endpoints_;
  bool tls_ = false;
  std::size_t current_ = 0;
  boost::asio::io_context ioc_;
  std::optional<boost::asio::ssl::context> ssl_ctx_;
  // The connection to endpoints_[current_], when open.
  std::optional<boost::beast::tcp_stream> plain_;
  std::optional<boost::beast::ssl_stream<boost::beast::tcp_stream>> secure_;
  boost::beast::flat_buffer buffer_;
  bool fresh_ = false;  // open, TLS, and no exchange completed yet
};

}  // namespace ddprun::rdzv
