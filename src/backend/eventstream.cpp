#include "backend/eventstream.hpp"

#include <array>

#include "backend/text.hpp"

namespace ollie::backend {

namespace {

std::uint32_t be32(std::string_view b, std::size_t at) {
  return (std::uint32_t(std::uint8_t(b[at])) << 24) | (std::uint32_t(std::uint8_t(b[at + 1])) << 16) |
         (std::uint32_t(std::uint8_t(b[at + 2])) << 8) | std::uint32_t(std::uint8_t(b[at + 3]));
}

constexpr std::array<std::uint32_t, 256> crc_table = [] {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}();

// Sizes of the fixed-length header value types 0..9 (-1: variable, 2-byte length prefix).
constexpr std::array<int, 10> value_size{0, 0, 1, 2, 4, 8, -1, -1, 8, 16};

}  // namespace

std::uint32_t crc32(std::string_view bytes, std::uint32_t crc) {
  crc = ~crc;
  for (char ch : bytes) crc = crc_table[(crc ^ std::uint8_t(ch)) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

std::size_t EventStreamDecoder::next(std::string_view b, EventStreamMessage& m) {
  if (b.size() < 12) return 0;
  const auto total = be32(b, 0);
  const auto hlen = be32(b, 4);
  if (crc32(b.substr(0, 8)) != be32(b, 8)) {
    error_ = "event-stream prelude CRC mismatch";
    return 1;
  }
  if (total > max_message) {
    error_ = "event-stream frame exceeds " + byte_size(max_message);
    return 1;
  }
  if (total < 16 || hlen > total - 16) {
    error_ = "event-stream frame has an impossible length";
    return 1;
  }
  if (b.size() < total) return 0;
  if (crc32(b.substr(0, total - 4)) != be32(b, total - 4)) {
    error_ = "event-stream message CRC mismatch";
    return 1;
  }
  std::string_view h = b.substr(12, hlen);
  while (!h.empty()) {
    const std::size_t nlen = std::uint8_t(h[0]);
    if (h.size() < 1 + nlen + 1) { error_ = "event-stream header truncated"; return 1; }
    std::string name(h.substr(1, nlen));
    const auto type = std::uint8_t(h[1 + nlen]);
    h.remove_prefix(2 + nlen);
    if (type >= value_size.size()) { error_ = "event-stream header of unknown type"; return 1; }
    std::size_t vlen = value_size[type] >= 0 ? std::size_t(value_size[type]) : 0;
    std::size_t skip = 0;
    if (value_size[type] < 0) {
      if (h.size() < 2) { error_ = "event-stream header truncated"; return 1; }
      vlen = (std::size_t(std::uint8_t(h[0])) << 8) | std::uint8_t(h[1]);
      skip = 2;
    }
    if (h.size() < skip + vlen) { error_ = "event-stream header truncated"; return 1; }
    if (type == 7) m.headers[std::move(name)] = std::string(h.substr(skip, vlen));  // strings only
    h.remove_prefix(skip + vlen);
  }
  m.payload.assign(b.substr(12 + hlen, total - 16 - hlen));
  return total;
}

}  // namespace ollie::backend
