// rdzv_conf.cpp: parse_rdzv_conf() (rdzv_conf.h): --rdzv-conf key=value pairs, one
// setter per key, each bad value a one-line RendezvousError naming it.
#include "rendezvous/rdzv_conf.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>

#include "base/text.h"
#include "rendezvous/rendezvous.h"
#include "store/store.h"

namespace ddprun::rdzv {
namespace {

using Ms = RdzvConf::Ms;

[[noreturn]] void bad(const std::string& key, const std::string& value, const std::string& want) {
  throw RendezvousError("--rdzv-conf " + key + "='" + value + "' " + want);
}

Ms seconds(const std::string& key, const std::string& v) {
  char* end = nullptr;
  const double s = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(s) || s < 0 || s > 1e9) {
    bad(key, v, "is not a non-negative number of seconds");
  }
  return Ms(static_cast<long long>(std::llround(s * 1000.0)));
}

Ms positive_seconds(const std::string& key, const std::string& v) {
  const Ms t = seconds(key, v);
  if (t.count() <= 0) bad(key, v, "must be a positive number of seconds");
  return t;
}

int integer(const std::string& key, const std::string& v, int min, int max) {
  const std::optional<int> out = parse_int<int>(v);
  if (!out || *out < min || *out > max) {
    bad(key, v, "is not an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return *out;
}

bool boolean(const std::string& key, const std::string& value) {
  std::string v = value;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "1" || v == "true" || v == "t" || v == "yes" || v == "y") return true;
  if (v == "0" || v == "false" || v == "f" || v == "no" || v == "n") return false;
  bad(key, value, "is not a boolean (1/true/t/yes/y or 0/false/f/no/n)");
}

using Setter = std::function<void(RdzvConf&, const std::string& key, const std::string& value)>;

Setter duration(std::optional<Ms> RdzvConf::*field, bool positive = false) {
  return [=](RdzvConf& c, const std::string& k, const std::string& v) {
    c.*field = positive ? positive_seconds(k, v) : seconds(k, v);
  };
}
Setter whole(std::optional<int> RdzvConf::*field, int min, int max) {
  return [=](RdzvConf& c, const std::string& k, const std::string& v) {
    c.*field = integer(k, v, min, max);
  };
}
Setter path(std::optional<std::string> RdzvConf::*field) {
  return [=](RdzvConf& c, const std::string& k, const std::string& v) {
    if (v.empty()) bad(k, v, "is empty (expected a file)");
    c.*field = v;
  };
}
Setter flag(std::optional<bool> RdzvConf::*field) {
  return [=](RdzvConf& c, const std::string& k, const std::string& v) { c.*field = boolean(k, v); };
}

// A key prefix etcdctl shows as typed: '/' then '/'-separated names of printable ASCII
// without blanks (no empty name: "//" is a mistake). Other bytes are shown as \xNN in
// the error, so that it stays one line.
Setter etcd_prefix() {
  return [](RdzvConf& c, const std::string& k, const std::string& v) {
    const std::string p = v.size() > 1 && v.back() == '/' ? v.substr(0, v.size() - 1) : v;
    const bool printable = std::all_of(p.begin(), p.end(), [](char ch) {
      return static_cast<unsigned char>(ch) > ' ' && static_cast<unsigned char>(ch) < 0x7f;
    });
    if (p.size() < 2 || p.front() != '/' || !printable || p.find("//") != std::string::npos) {
      bad(k, store::escape_bytes(v),
          "is not an etcd key prefix: '/' and names of printable characters without blanks, "
          "e.g. /ddprun/rdzv");
    }
    c.etcd_prefix = p;
  };
}

// The one table of the keys ddprun understands, and how each value is read.
const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> table = {
      {"join_timeout", duration(&RdzvConf::join_timeout)},
      {"timeout", duration(&RdzvConf::timeout)},
      {"last_call_timeout", duration(&RdzvConf::last_call_timeout)},
      {"close_timeout", duration(&RdzvConf::close_timeout)},
      {"heartbeat_timeout", duration(&RdzvConf::heartbeat_timeout)},
      {"keep_alive_interval", duration(&RdzvConf::keep_alive_interval, /*positive=*/true)},
      {"keep_alive_max_attempt", whole(&RdzvConf::keep_alive_max_attempt, 1, 1'000'000)},
      // As torchrun: 0 would make every store read time out at once (or never).
      {"read_timeout", duration(&RdzvConf::read_timeout, /*positive=*/true)},
      {"is_host", flag(&RdzvConf::is_host)},
      {"rank", whole(&RdzvConf::rank, 0, 1'000'000)},
      {"store_type",
       [](RdzvConf&, const std::string& k, const std::string& v) {
         if (v != "tcp") bad(k, v, "is not supported (only tcp)");
       }},
      {"workers_port", whole(&RdzvConf::workers_port, 0, 65535)},
      {"use_agent_store", flag(&RdzvConf::use_agent_store)},
      {"job_check", flag(&RdzvConf::job_check)},
      {"etcd_prefix", etcd_prefix()},
      {"prefix", etcd_prefix()},
      {"cacert", path(&RdzvConf::cacert)},
      {"cert", path(&RdzvConf::cert)},
      {"key", path(&RdzvConf::key)},
      // torchrun's etcd-v2 spellings of the same three files, and its protocol key.
      {"ca_cert", path(&RdzvConf::cacert)},
      {"ssl_cert", path(&RdzvConf::cert)},
      {"ssl_cert_key", path(&RdzvConf::key)},
      {"protocol",
       [](RdzvConf& c, const std::string& k, const std::string& v) {
         if (v != "http" && v != "https")
           bad(k, v, "is not a protocol etcd speaks (http or https)");
         c.etcd_protocol = v;
       }},
      {"failover_timeout", duration(&RdzvConf::failover_timeout, /*positive=*/true)},
  };
  return table;
}

}  // namespace

RdzvConf parse_rdzv_conf(const std::string& text) {
  RdzvConf conf;
  if (trim(text).empty()) return conf;
  std::string::size_type start = 0;
  while (start <= text.size()) {
    auto comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string pair = text.substr(start, comma - start);
    start = comma + 1;
    const auto eq = pair.find('=');
    const std::string key =
        eq == std::string::npos ? "" : std::string(trim(std::string_view(pair).substr(0, eq)));
    if (key.empty()) {
      throw RendezvousError("--rdzv-conf: malformed pair '" + pair + "' in '" + text +
                            "' (expected key=value,key=value)");
    }
    const std::string value(trim(std::string_view(pair).substr(eq + 1)));
    if (std::find(conf.keys.begin(), conf.keys.end(), key) == conf.keys.end()) {
      conf.keys.push_back(key);
    }
    if (auto it = setters().find(key); it != setters().end()) it->second(conf, key, value);
  }
  return conf;
}

void warn_unused_conf_keys(const RdzvConf& conf, std::initializer_list<const char*> known,
                           const std::string& backend) {
  for (const std::string& key : conf.keys) {
    bool found = std::any_of(known.begin(), known.end(), [&](const char* k) { return key == k; });
    if (!found) {
      std::string list;
      for (const char* k : known) list += std::string(list.empty() ? "" : ", ") + k;
      spdlog::warn(
          "--rdzv-conf key '{}' is not used by the {} rendezvous and is ignored "
          "(known keys: {})",
          key, backend, list);
    }
  }
}

}  // namespace ddprun::rdzv
