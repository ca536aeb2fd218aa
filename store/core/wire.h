// wire.h: little-endian framing primitives of the c10d TCPStore protocol.
// Encoder appends integers and u64-length-prefixed byte strings to a std::string;
// Decoder reads them from a byte view and reports short input instead of throwing.
// Used by protocol.cpp (server side) and tcp_store_client.cpp (client side).
// Thread-safety: plain values; one instance per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ddprun::store {

// Appends wire values to `out`. Integers are little-endian (x86/ARM host order, which is
// what PyTorch sends raw); strings are `u64 length` followed by the bytes.
class Encoder {
 public:
  explicit Encoder(std::string& out) : out_(out) {}
  void u8(std::uint8_t v);
  void u32(std::uint32_t v);
  void u64(std::uint64_t v);
  void i64(std::int64_t v);
  void bytes(std::string_view s);  // u64 length + data

 private:
  std::string& out_;
};

// Reads wire values from `in`. Every read returns false on short input and then leaves
// the position unchanged, so a caller can retry once more bytes have arrived.
class Decoder {
 public:
  explicit Decoder(std::string_view in) : in_(in) {}
  bool u8(std::uint8_t& v);
  bool u32(std::uint32_t& v);
  bool u64(std::uint64_t& v);
  bool i64(std::int64_t& v);
  enum class BytesStatus { kOk, kNeedMore, kTooLong };
  // Reads a u64 length and that many bytes. A declared length above `max_len` is
  // kTooLong without allocating anything.
  BytesStatus bytes(std::string& v, std::size_t max_len);
  // Advances over `n` bytes without reading them; false (position unchanged) if fewer remain.
  bool skip(std::size_t n);
  std::size_t position() const { return pos_; }
  std::size_t remaining() const { return in_.size() - pos_; }

 private:
  std::string_view in_;
  std::size_t pos_ = 0;
};

}  // namespace ddprun::store
