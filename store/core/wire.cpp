// wire.cpp: see wire.h.
#include "store/core/wire.h"

namespace ddprun::store {
namespace {

// PyTorch writes integers in host order; every supported host is little-endian, but we
// spell the byte order out so that the codec means the same on any host.
template <typename T>
void put_le(std::string& out, T v) {
  char b[sizeof(T)];
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    b[i] = static_cast<char>(static_cast<std::uint64_t>(v) >> (8 * i));
  }
  out.append(b, sizeof(T));
}

template <typename T>
T get_le(const char* p) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    v |= static_cast<std::uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  }
  return static_cast<T>(v);
}

}  // namespace

void Encoder::u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
void Encoder::u32(std::uint32_t v) { put_le(out_, v); }
void Encoder::u64(std::uint64_t v) { put_le(out_, v); }
void Encoder::i64(std::int64_t v) { put_le(out_, static_cast<std::uint64_t>(v)); }
void Encoder::bytes(std::string_view s) {
  u64(s.size());
  out_.append(s);
}

bool Decoder::u8(std::uint8_t& v) {
  if (remaining() < 1) return false;
  v = static_cast<std::uint8_t>(in_[pos_]);
  pos_ += 1;
  return true;
}

bool Decoder::u32(std::uint32_t& v) {
  if (remaining() < 4) return false;
  v = get_le<std::uint32_t>(in_.data() + pos_);
  pos_ += 4;
  return true;
}

bool Decoder::u64(std::uint64_t& v) {
  if (remaining() < 8) return false;
  v = get_le<std::uint64_t>(in_.data() + pos_);
  pos_ += 8;
  return true;
}

bool Decoder::i64(std::int64_t& v) {
  std::uint64_t u = 0;
  if (!u64(u)) return false;
  v = static_cast<std::int64_t>(u);
  return true;
}

bool Decoder::skip(std::size_t n) {
  if (remaining() < n) return false;
  pos_ += n;
  return true;
}

Decoder::BytesStatus Decoder::bytes(std::string& v, std::size_t max_len) {
  if (remaining() < 8) return BytesStatus::kNeedMore;
  const auto len = get_le<std::uint64_t>(in_.data() + pos_);
  if (len > max_len) return BytesStatus::kTooLong;
  if (remaining() - 8 < len) return BytesStatus::kNeedMore;
  v.assign(in_.data() + pos_ + 8, static_cast<std::size_t>(len));
  pos_ += 8 + static_cast<std::size_t>(len);
  return BytesStatus::kOk;
}

}  // namespace ddprun::store
