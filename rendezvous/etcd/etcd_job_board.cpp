// etcd_job_board.cpp: EtcdJobBoard (etcd_job_board.h) over etcd's KV API.
#include "rendezvous/etcd/etcd_job_board.h"

#include <map>
#include <thread>

#include "base/text.h"
#include "rendezvous/rendezvous.h"

namespace ddprun::rdzv {

EtcdJobBoard::EtcdJobBoard(EtcdClient& client, const EtcdKeys& keys, int round, int node, int nodes)
    : client_(client), prefix_(keys.rkey(round, "view/")), node_(node), nodes_(nodes) {}

std::int64_t EtcdJobBoard::add(const std::string& name, std::int64_t delta) {
  const std::string key = prefix_ + name;
  for (;;) {
    const std::optional<EtcdKv> kv = client_.get(key);
    const std::optional<std::int64_t> value =
        kv ? parse_int<std::int64_t>(kv->value) : std::optional<std::int64_t>(0);
    if (!value || *value < 0) {
      throw RendezvousStateError(client_.where() + ": the job-wide counter " + key + " holds '" +
                                 kv->value.substr(0, 40) + "', not a count");
    }
    if (delta == 0) return *value;
    const EtcdCompare unchanged =
        kv ? EtcdCompare{key, EtcdCompare::Target::kMod, kv->mod_revision, ""}
           : EtcdCompare{key, EtcdCompare::Target::kCreate, 0, ""};
    if (client_.txn({unchanged}, {{key, std::to_string(*value + delta), 0}})) {
      return *value + delta;
    }
  }
}

std::int64_t EtcdJobBoard::bump(const std::string& name) { return client_.put(prefix_ + name, ""); }

std::int64_t EtcdJobBoard::mark(const std::string& name) {
  const std::optional<EtcdKv> kv = client_.get(prefix_ + name);
  return kv ? kv->mod_revision : 0;
}

void EtcdJobBoard::set(const std::string& name, const std::string& value) {
  client_.put(prefix_ + name, value);
}

std::string EtcdJobBoard::set_once(const std::string& name, const std::string& value) {
  const std::string key = prefix_ + name;
  if (client_.txn({{key, EtcdCompare::Target::kCreate, 0, ""}}, {{key, value, 0}})) return value;
  const std::optional<EtcdKv> kv = client_.get(key);
  return kv ? kv->value : value;  // deleted meanwhile: nobody else holds it
}

std::vector<std::optional<std::string>> EtcdJobBoard::get(const std::vector<std::string>& names,
                                                          std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<std::optional<std::string>> out(names.size());
  for (;;) {
    std::map<std::string, std::string> there;
    if (names.size() == 1) {
      if (auto kv = client_.get(prefix_ + names[0])) there[names[0]] = std::move(kv->value);
    } else {
      for (EtcdKv& kv : client_.get_prefix(prefix_)) {
        there[kv.key.substr(prefix_.size())] = std::move(kv.value);
      }
    }
    bool all = true;
    for (std::size_t i = 0; i < names.size(); ++i) {
      const auto it = there.find(names[i]);
      if (it != there.end()) out[i] = it->second;
      all = all && out[i].has_value();
    }
    if (all || std::chrono::steady_clock::now() >= deadline) return out;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace ddprun::rdzv
