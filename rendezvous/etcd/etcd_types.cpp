// etcd_types.cpp: base64 (the v3 gateway's keys and values) and the parsing of an etcd
// member's endpoint (etcd_types.h).
#include "rendezvous/etcd/etcd_types.h"

#include "rendezvous/endpoint.h"

namespace ddprun::rdzv {
namespace {

constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

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

}  // namespace ddprun::rdzv
