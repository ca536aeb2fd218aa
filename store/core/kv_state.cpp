// kv_state.cpp: see kv_state.h. Waits are indexed both per key and per client so that a
// mutation touches only the waits on its key, and a cancel or close only that client's.
#include "store/core/kv_state.h"

#include <algorithm>
#include <charconv>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>

namespace ddprun::store {
namespace {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

using WaitId = std::uint64_t;  // ascending in registration order, so std::map is FIFO

// What one key or queue item costs beyond its bytes (hash node, string and shared_ptr
// headers), for KvState::freed_bytes.
constexpr std::uint64_t kEntryOverhead = 96;

// A hash table keeps its bucket array at its largest size: 1 M keys set and deleted
// leave about 16 MB of empty buckets. Shrinks it when under 1/8 full; each shrink costs
// O(size) and follows at least 7/8 of the table's entries being erased, so erasing stays
// O(1) amortised.
template <typename Map>
void shrink_if_sparse(Map& m) {
  constexpr std::size_t kMinBuckets = 1024;
  if (m.bucket_count() > kMinBuckets && m.size() < m.bucket_count() / 8) m.rehash(0);
}
using NoteKind = KvState::Notification::Kind;

// Renders a key or value for an error line: printable ASCII kept, the rest escaped,
// long strings cut, so that one bad byte string cannot garble a log.
std::string printable(std::string_view s) {
  constexpr std::size_t kMax = 64;
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size() && i < kMax; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  out += s.size() > kMax ? "\"..." : "\"";
  return out;
}

// c10d stores counters as std::to_string output; we accept exactly an optional sign and
// decimal digits (stricter than std::stoll, which ignores trailing junk).
std::optional<std::int64_t> parse_decimal(std::string_view s) {
  std::size_t i = 0;
  if (!s.empty() && s[0] == '+') i = 1;
  if (i == s.size()) return std::nullopt;
  std::int64_t v = 0;
  const char* first = s.data() + i;
  const char* last = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(first, last, v);
  if (ec != std::errc() || ptr != last) return std::nullopt;
  if (i == 1 && *first == '-') return std::nullopt;  // "+-5"
  return v;
}

}  // namespace

struct KvState::Impl {
  struct Pending {
    ClientId who;
    std::size_t missing;            // WAIT: key occurrences still absent
    std::vector<std::string> keys;  // keys it is indexed under (BARRIER: its one key)
    bool barrier;
  };

  // Values are shared with replies still being sent (value_handle), so they are replaced,
  // never changed in place, while such a reply holds them.
  StringMap<std::shared_ptr<std::string>> kv;
  StringMap<std::deque<std::string>> queues;
  std::unordered_map<WaitId, Pending> pending;
  StringMap<std::map<WaitId, std::uint32_t>> key_waits;  // key -> wait -> occurrences
  StringMap<std::set<WaitId>> barrier_waits;             // key -> waits
  std::unordered_map<ClientId, std::vector<WaitId>> client_waits;
  StringMap<std::vector<ClientId>> watchers;
  std::unordered_map<ClientId, std::vector<std::string>> client_watches;
  WaitId next_id = 1;

  bool present(std::string_view key) const {
    if (kv.find(key) != kv.end()) return true;
    auto q = queues.find(key);
    return q != queues.end() && !q->second.empty();
  }

  template <typename V>
  static V& slot(StringMap<V>& m, std::string_view key) {
    auto it = m.find(key);
    if (it == m.end()) it = m.emplace(std::string(key), V{}).first;
    return it->second;
  }

  void notify(std::string_view key, NoteKind kind, const std::string& old_value,
              const std::string& new_value, Effects& fx) const {
    auto it = watchers.find(key);
    if (it == watchers.end()) return;
    for (ClientId w : it->second) {
      fx.notifications.push_back({w, kind, std::string(key), old_value, new_value});
    }
  }

  bool watched(std::string_view key) const { return watchers.find(key) != watchers.end(); }

  // Removes `id` from every index and from `pending`.
  void unregister(WaitId id) {
    auto it = pending.find(id);
    if (it == pending.end()) return;
    Pending& p = it->second;
    for (const auto& k : p.keys) {
      if (p.barrier) {
        if (auto b = barrier_waits.find(k); b != barrier_waits.end()) {
          b->second.erase(id);
          if (b->second.empty()) barrier_waits.erase(b);
        }
      } else if (auto w = key_waits.find(k); w != key_waits.end()) {
        w->second.erase(id);
        if (w->second.empty()) key_waits.erase(w);
      }
    }
    if (auto c = client_waits.find(p.who); c != client_waits.end()) {
      auto& ids = c->second;
      if (auto pos = std::find(ids.begin(), ids.end(), id); pos != ids.end()) {
        *pos = ids.back();
        ids.pop_back();
      }
      if (ids.empty()) client_waits.erase(c);
    }
    pending.erase(it);
  }

  void release(WaitId id, Effects& fx) {
    auto it = pending.find(id);
    if (it == pending.end()) return;
    fx.released.push_back(it->second.who);
    unregister(id);
  }

  // Every wait on `key` loses that key's occurrences; those left with none are released.
  void wake_all(std::string_view key, Effects& fx) {
    auto w = key_waits.find(key);
    if (w == key_waits.end()) return;
    const auto waits = std::move(w->second);
    key_waits.erase(w);
    for (const auto& [id, occurrences] : waits) {
      if (satisfy(id, occurrences)) release(id, fx);
    }
  }

  // QUEUE_PUSH: satisfies waits on `key` in registration order until one is released, so
  // that one pushed item completes at most one blocking pop (WAIT + QUEUE_POP).
  void wake_one(std::string_view key, Effects& fx) {
    auto w = key_waits.find(key);
    if (w == key_waits.end()) return;
    auto& waits = w->second;
    std::optional<WaitId> done;
    while (!waits.empty() && !done) {
      const auto [id, occurrences] = *waits.begin();
      waits.erase(waits.begin());
      if (satisfy(id, occurrences)) done = id;
    }
    if (waits.empty()) key_waits.erase(w);
    if (done) release(*done, fx);
  }

  // Counts `occurrences` of a key as present for wait `id`; true if nothing is missing now.
  bool satisfy(WaitId id, std::uint32_t occurrences) {
    auto it = pending.find(id);
    if (it == pending.end()) return false;
    auto& missing = it->second.missing;
    missing -= std::min<std::size_t>(occurrences, missing);
    return missing == 0;
  }

  WaitId new_pending(ClientId who, std::size_t missing, std::vector<std::string> keys,
                     bool barrier) {
    const WaitId id = next_id++;
    pending.emplace(id, Pending{who, missing, std::move(keys), barrier});
    client_waits[who].push_back(id);
    return id;
  }

  // Stores `value` at `key` (a SET-like change): notifies watchers, wakes waiters.
  void store(std::string_view key, std::string value, Effects& fx) {
    auto it = kv.find(key);
    if (watched(key)) {
      const bool existed = it != kv.end();
      notify(key, existed ? NoteKind::kUpdated : NoteKind::kCreated,
             existed ? *it->second : std::string(), value, fx);
    }
    auto shared = std::make_shared<std::string>(std::move(value));
    if (it == kv.end()) {
      kv.emplace(std::string(key), std::move(shared));
    } else {
      it->second = std::move(shared);
    }
    wake_all(key, fx);
  }
};

KvState::KvState() : impl_(std::make_unique<Impl>()) {}
KvState::~KvState() = default;

void KvState::set(std::string_view key, std::string value, Effects& fx) {
  impl_->store(key, std::move(value), fx);
}

std::string KvState::compare_set(std::string_view key, std::string_view expected,
                                 std::string desired, Effects& fx) {
  auto it = impl_->kv.find(key);
  if (it == impl_->kv.end()) {
    if (!expected.empty()) return std::string(expected);  // c10d's "lie": nothing stored
    impl_->store(key, desired, fx);
    return desired;
  }
  if (*it->second == expected) {
    impl_->store(key, std::move(desired), fx);
    it = impl_->kv.find(key);
  }
  return *it->second;
}

const std::string* KvState::get(std::string_view key) const {
  auto it = impl_->kv.find(key);
  return it == impl_->kv.end() ? nullptr : it->second.get();
}

std::shared_ptr<const std::string> KvState::value_handle(std::string_view key) const {
  auto it = impl_->kv.find(key);
  return it == impl_->kv.end() ? nullptr : it->second;
}

std::optional<std::int64_t> KvState::add(std::string_view key, std::int64_t delta, Effects& fx,
                                         std::string& error) {
  std::int64_t current = 0;
  if (auto it = impl_->kv.find(key); it != impl_->kv.end()) {
    auto parsed = parse_decimal(*it->second);
    if (!parsed) {
      error = "the value at key " + printable(key) +
              " is not a decimal integer: " + printable(*it->second);
      return std::nullopt;
    }
    current = *parsed;
  }
  std::int64_t sum = 0;
  if (__builtin_add_overflow(current, delta, &sum)) {
    error = "adding " + std::to_string(delta) + " to " + std::to_string(current) + " at key " +
            printable(key) + " overflows a signed 64-bit integer";
    return std::nullopt;
  }
  impl_->store(key, std::to_string(sum), fx);
  return sum;
}

bool KvState::check(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(),
                     [&](const std::string& k) { return impl_->present(k); });
}

KvState::WaitResult KvState::wait(const std::vector<std::string>& keys, ClientId who) {
  std::vector<std::string_view> missing;
  for (const auto& k : keys) {
    if (!impl_->present(k)) missing.emplace_back(k);
  }
  if (missing.empty()) return WaitResult::kReady;
  // Distinct missing keys with their occurrence counts (duplicates count twice).
  std::sort(missing.begin(), missing.end());
  std::vector<std::pair<std::string_view, std::uint32_t>> counted;
  for (std::string_view k : missing) {
    if (counted.empty() || counted.back().first != k) counted.emplace_back(k, 0);
    ++counted.back().second;
  }
  std::vector<std::string> distinct;
  distinct.reserve(counted.size());
  for (const auto& [k, n] : counted) distinct.emplace_back(k);
  const WaitId id = impl_->new_pending(who, missing.size(), std::move(distinct), false);
  for (const auto& [k, n] : counted) Impl::slot(impl_->key_waits, k).emplace(id, n);
  return WaitResult::kPending;
}

bool KvState::cancel_wait(ClientId who) {
  auto c = impl_->client_waits.find(who);
  if (c == impl_->client_waits.end()) return false;
  const std::vector<WaitId> ids = c->second;
  for (WaitId id : ids) impl_->unregister(id);
  return !ids.empty();
}

void KvState::forget(ClientId who) {
  cancel_wait(who);
  auto c = impl_->client_watches.find(who);
  if (c == impl_->client_watches.end()) return;
  for (const auto& key : c->second) {
    auto w = impl_->watchers.find(key);
    if (w == impl_->watchers.end()) continue;
    std::erase(w->second, who);
    if (w->second.empty()) impl_->watchers.erase(w);
  }
  impl_->client_watches.erase(c);
}

std::int64_t KvState::num_keys() const { return static_cast<std::int64_t>(impl_->kv.size()); }

bool KvState::erase(std::string_view key, Effects& fx) {
  auto it = impl_->kv.find(key);
  if (it == impl_->kv.end()) return false;
  impl_->notify(key, NoteKind::kDeleted, *it->second, std::string(), fx);
  freed_bytes_ += key.size() + it->second->capacity() + kEntryOverhead;
  impl_->kv.erase(it);
  shrink_if_sparse(impl_->kv);
  return true;
}

void KvState::append(std::string_view key, std::string_view data, Effects& fx) {
  auto it = impl_->kv.find(key);
  if (it == impl_->kv.end()) {
    impl_->store(key, std::string(data), fx);
    return;
  }
  if (impl_->watched(key)) {
    impl_->notify(key, NoteKind::kUpdated, *it->second, *it->second + std::string(data), fx);
  }
  if (it->second.use_count() > 1) it->second = std::make_shared<std::string>(*it->second);
  it->second->append(data);
  impl_->wake_all(key, fx);
}

std::vector<std::string> KvState::multi_get(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) {
    const std::string* v = get(k);
    out.push_back(v ? *v : std::string());
  }
  return out;
}

void KvState::multi_set(const std::vector<std::string>& keys, std::vector<std::string> values,
                        Effects& fx) {
  const std::size_t n = std::min(keys.size(), values.size());
  for (std::size_t i = 0; i < n; ++i) impl_->store(keys[i], std::move(values[i]), fx);
}

void KvState::watch(std::string_view key, ClientId who) {
  auto& list = Impl::slot(impl_->watchers, key);
  if (std::find(list.begin(), list.end(), who) != list.end()) return;
  list.push_back(who);
  impl_->client_watches[who].emplace_back(key);
}

void KvState::queue_push(std::string_view key, std::string value, Effects& fx) {
  Impl::slot(impl_->queues, key).push_back(std::move(value));
  impl_->wake_one(key, fx);
}

std::int64_t KvState::queue_pop(std::string_view key, std::string& value) {
  auto it = impl_->queues.find(key);
  if (it == impl_->queues.end()) return 0;
  const auto len = static_cast<std::int64_t>(it->second.size());
  if (len > 0) {
    value = std::move(it->second.front());
    it->second.pop_front();
    freed_bytes_ += value.capacity() + kEntryOverhead;
  }
  if (it->second.empty()) {  // an empty queue is an absent one
    impl_->queues.erase(it);
    shrink_if_sparse(impl_->queues);
  }
  return len;
}

const std::string* KvState::queue_front(std::string_view key) const {
  auto it = impl_->queues.find(key);
  return it == impl_->queues.end() || it->second.empty() ? nullptr : &it->second.front();
}

std::int64_t KvState::queue_len(std::string_view key) const {
  auto it = impl_->queues.find(key);
  return it == impl_->queues.end() ? 0 : static_cast<std::int64_t>(it->second.size());
}

std::vector<std::string> KvState::list_keys() const {
  std::vector<std::string> out;
  out.reserve(impl_->kv.size());
  for (const auto& [k, v] : impl_->kv) out.push_back(k);
  return out;
}

std::optional<KvState::WaitResult> KvState::barrier(std::string_view key, std::int64_t world_size,
                                                    ClientId who, Effects& fx, std::string& error) {
  if (world_size <= 0) {
    // A barrier nobody can be counted towards: completing it at once would let a caller
    // with a garbled size run ahead of the others unnoticed.
    error = "world size " + std::to_string(world_size) + " is not a positive number";
    return std::nullopt;
  }
  const auto count = add(key, 1, fx, error);
  if (!count) return std::nullopt;
  if (*count >= world_size) {
    if (auto b = impl_->barrier_waits.find(key); b != impl_->barrier_waits.end()) {
      const auto waits = std::move(b->second);
      impl_->barrier_waits.erase(b);
      for (WaitId id : waits) impl_->release(id, fx);
    }
    return WaitResult::kReady;
  }
  const WaitId id = impl_->new_pending(who, 1, {std::string(key)}, true);
  Impl::slot(impl_->barrier_waits, key).insert(id);
  return WaitResult::kPending;
}

void KvState::clear() {
  for (const auto& [key, value] : impl_->kv) {
    freed_bytes_ += key.size() + value->capacity() + kEntryOverhead;
  }
  for (const auto& [key, items] : impl_->queues) {
    for (const std::string& item : items) freed_bytes_ += item.capacity() + kEntryOverhead;
  }
  impl_ = std::make_unique<Impl>();
}

std::size_t KvState::pending_waits() const { return impl_->pending.size(); }

}  // namespace ddprun::store
