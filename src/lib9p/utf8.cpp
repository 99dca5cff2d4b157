#include "lib9p/utf8.hpp"

namespace p9 {

std::string valid_utf8(std::string_view s) {
  static constexpr std::string_view fffd = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(s.size());
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  std::size_t i = 0;
  while (i < s.size()) {
    const unsigned char b = byte(i);
    if (b < 0x80) {
      out += static_cast<char>(b);
      i++;
      continue;
    }
    // Length and the range of the second byte (Unicode Table 3-7, well-formed sequences).
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) len = 2;
    else if (b == 0xE0) len = 3, lo = 0xA0;
    else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) len = 3;
    else if (b == 0xED) len = 3, hi = 0x9F;  // no surrogates
    else if (b == 0xF0) len = 4, lo = 0x90;
    else if (b >= 0xF1 && b <= 0xF3) len = 4;
    else if (b == 0xF4) len = 4, hi = 0x8F;
    if (len == 0) {  // 80..C1, F5..FF: never part of a character
      out += fffd;
      i++;
      continue;
    }
    // The maximal subpart: the lead byte and the continuation bytes that still fit.
    std::size_t k = 1;
    while (k < len && i + k < s.size()) {
      const unsigned char c = byte(i + k);
      const bool fits = k == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
      if (!fits) break;
      k++;
    }
    if (k == len) out.append(s.substr(i, len));
    else out += fffd;
    i += k;
  }
  return out;
}

bool is_utf8(std::string_view s) { return valid_utf8(s) == s; }

}  // namespace p9
