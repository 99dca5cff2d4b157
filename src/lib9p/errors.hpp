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

/// An error string as it goes out in an Rerror: UTF-8 (a walked name or another client's bytes
/// quoted in it need not be: each bad sequence is a U+FFFD) of at most ERRMAX-1 bytes, cut at
/// a character boundary (never before a UTF-8 continuation byte).
inline std::string cut(std::string_view text) {
  std::string ename = valid_utf8(text);
  if (ename.size() < ERRMAX) return ename;
  std::size_t n = ERRMAX - 1;
  while (n > 0 && (static_cast<unsigned char>(ename[n]) & 0xC0) == 0x80) n--;
  ename.resize(n);
  return ename;
}

}  // namespace p9::err
