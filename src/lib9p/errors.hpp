#pragma once
/// The one vocabulary of error strings, in Plan 9's wording (lib9p's srv.c, spec §1.8).

#include <string>
#include <string_view>

#include "fcall.hpp"
#include "utf8.hpp"

namespace p9::err {

inline constexpr const char* unknown_fid = "unknown fid";
inline constexpr const char* duplicate_fid = "duplicate fid";
inline constexpr const char* duplicate_tag = "duplicate tag";
inline constexpr const char* file_not_found = "file not found";
inline constexpr const char* permission_denied = "permission denied";
inline constexpr const char* is_directory = "is a directory";
inline constexpr const char* walk_in_non_directory = "walk in non-directory";
inline constexpr const char* cannot_clone_open_fid = "cannot clone open fid";
inline constexpr const char* cannot_walk_open_fid = "cannot walk open fid";
inline constexpr const char* bad_offset = "bad offset";
inline constexpr const char* bad_mode = "bad open mode";
inline constexpr const char* already_open = "fid already open";
inline constexpr const char* not_open_read = "fid not open for reading";
inline constexpr const char* not_open_write = "fid not open for writing";
inline constexpr const char* auth_not_required = "authentication not required";
inline constexpr const char* auth_required = "authentication required";
inline constexpr const char* auth_failed = "authentication failed";
inline constexpr const char* create_not_supported = "create not supported";
inline constexpr const char* remove_not_supported = "remove not supported";
inline constexpr const char* wstat_not_supported = "wstat not supported";
inline constexpr const char* unknown_message = "unknown message";
inline constexpr const char* no_version = "version not negotiated";
inline constexpr const char* msize_too_small = "msize too small";
inline constexpr const char* too_many_walk_names = "too many walk elements";
inline constexpr const char* message_too_large = "message larger than msize";
inline constexpr const char* interrupted = "interrupted";
inline constexpr const char* write_too_large = "write too large";
inline constexpr const char* hung_up = "connection closed";
inline constexpr const char* shutting_down = "server shutting down";
inline constexpr const char* too_many_fids = "too many fids";
inline constexpr const char* too_many_auth_fids = "too many auth fids";
inline constexpr const char* string_too_long = "string too long";
inline constexpr const char* stat_too_long = "stat entry too long";
inline constexpr const char* message_too_long = "message too long";

/// An error string as it goes out in an Rerror: one line of UTF-8 that a terminal shows as it
/// is. A control character in it (a newline of a quoted request, a provider's escape sequence,
/// a NUL no 9P string holds) is written `\n`, `\t`, `\r` or `\xNN`; a byte sequence that is
/// not UTF-8 is U+FFFD. At most ERRMAX-1 bytes: a longer one keeps its start and its end, where
/// the reason is (`cwd: <a long path>: not a directory`), with `…` for the middle; neither cut
/// splits a character.
inline std::string cut(std::string_view text) {
  static constexpr char hex[] = "0123456789abcdef";
  const std::string u = valid_utf8(text);
  std::string e;
  e.reserve(u.size());
  for (std::size_t i = 0; i < u.size(); i++) {
    const auto b = static_cast<unsigned char>(u[i]);
    // C0 controls, DEL, and the C1 controls (U+0080-U+009F, 0xC2 0x80-0x9F) some terminals obey
    const bool c1 = b == 0xC2 && i + 1 < u.size() && (static_cast<unsigned char>(u[i + 1]) & 0xE0) == 0x80;
    if (b >= 0x20 && b != 0x7F && !c1) {
      e += u[i];
      continue;
    }
    if (b == '\n') e += "\\n";
    else if (b == '\t') e += "\\t";
    else if (b == '\r') e += "\\r";
    else {
      for (std::size_t k = 0; k < (c1 ? 2u : 1u); k++) {
        const auto x = static_cast<unsigned char>(u[i + k]);
        e += "\\x";
        e += hex[x >> 4];
        e += hex[x & 15];
      }
      i += c1;
    }
  }
  if (e.size() < ERRMAX) return e;
  constexpr std::string_view ellipsis = "\xE2\x80\xA6";
  constexpr std::size_t keep = ERRMAX - 1 - ellipsis.size();
  const auto inside = [&](std::size_t i) { return (static_cast<unsigned char>(e[i]) & 0xC0) == 0x80; };
  std::size_t head = keep / 2, tail = e.size() - (keep - keep / 2);
  while (head > 0 && inside(head)) head--;
  while (tail < e.size() && inside(tail)) tail++;
  return e.substr(0, head).append(ellipsis).append(e, tail);
}

}  // namespace p9::err
