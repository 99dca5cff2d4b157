#include "magic.hpp"

#include <cstdint>

namespace filetool {

namespace {

unsigned byte(std::string_view s, std::size_t i) { return static_cast<unsigned char>(s[i]); }
unsigned be16(std::string_view s, std::size_t i) { return byte(s, i) << 8 | byte(s, i + 1); }
unsigned le16(std::string_view s, std::size_t i) { return byte(s, i) | byte(s, i + 1) << 8; }
unsigned le24(std::string_view s, std::size_t i) { return le16(s, i) | byte(s, i + 2) << 16; }
std::uint32_t be32(std::string_view s, std::size_t i) { return std::uint32_t(be16(s, i)) << 16 | be16(s, i + 2); }

std::string dims(const char* kind, unsigned long w, unsigned long h) {
  return std::string(kind) + " image, " + std::to_string(w) + "x" + std::to_string(h);
}

// The first SOFn segment of a JPEG carries its size; markers before it are skipped by length.
std::string jpeg(std::string_view s) {
  std::size_t i = 2;
  while (i + 9 < s.size() && byte(s, i) == 0xFF) {
    const unsigned m = byte(s, i + 1);
    if (m == 0xFF) { i++; continue; }
    const bool sof = m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
    if (sof) return dims("JPEG", be16(s, i + 7), be16(s, i + 5));
    if (m == 0xD8 || (m >= 0xD0 && m <= 0xD7) || m == 0x01) { i += 2; continue; }
    i += 2 + be16(s, i + 2);
  }
  return "JPEG image";
}

std::string webp(std::string_view s) {
  if (s.size() >= 30 && s.substr(12, 4) == "VP8X") return dims("WebP", le24(s, 24) + 1, le24(s, 27) + 1);
  if (s.size() >= 30 && s.substr(12, 4) == "VP8 ") return dims("WebP", le16(s, 26) & 0x3FFF, le16(s, 28) & 0x3FFF);
  if (s.size() >= 25 && s.substr(12, 4) == "VP8L" && byte(s, 20) == 0x2F) {
    const std::uint32_t b = byte(s, 21) | byte(s, 22) << 8 | byte(s, 23) << 16 | std::uint32_t(byte(s, 24)) << 24;
    return dims("WebP", (b & 0x3FFF) + 1, ((b >> 14) & 0x3FFF) + 1);
  }
  return "WebP image";
}

}  // namespace

std::optional<std::string> media_kind(std::string_view s) {
  if (s.size() >= 24 && s.substr(0, 8) == "\x89PNG\r\n\x1a\n") return dims("PNG", be32(s, 16), be32(s, 20));
  if (s.size() >= 8 && s.substr(0, 8) == "\x89PNG\r\n\x1a\n") return "PNG image";
  if (s.size() >= 3 && s.substr(0, 3) == "\xFF\xD8\xFF") return jpeg(s);
  if (s.size() >= 10 && (s.substr(0, 6) == "GIF87a" || s.substr(0, 6) == "GIF89a")) return dims("GIF", le16(s, 6), le16(s, 8));
  if (s.size() >= 16 && s.substr(0, 4) == "RIFF" && s.substr(8, 4) == "WEBP") return webp(s);
  if (s.substr(0, 5) == "%PDF-") return "PDF document";
  return std::nullopt;
}

}  // namespace filetool
