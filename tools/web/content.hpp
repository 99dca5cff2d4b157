#pragma once
/// What a fetched body is: its media type, its kind (HTML, other text, binary) and its charset;
/// conversion to UTF-8 and cutting at a character boundary.

#include <string>
#include <string_view>

namespace web {

enum class Kind { html, text, binary };

/// The UTF-8 byte order mark: it says UTF-8 before anything else does, and is no text.
inline constexpr std::string_view utf8_bom = "\xEF\xBB\xBF";

/// "text/html" from "Text/HTML; charset=utf-8"; empty when there is none.
std::string media_type(const std::string& content_type);
/// From the media type, or, without one, from the first bytes of the body.
Kind classify(const std::string& media_type, std::string_view body);
/// The charset parameter of the Content-Type, else a UTF-8 byte order mark, else for HTML a
/// <meta> charset in the first 2048 bytes; else `windows-1252` when the body is not valid UTF-8
/// (a character cut at the end of a `cut` body aside); lower case, empty for UTF-8.
std::string charset(const std::string& content_type, std::string_view body, Kind kind, bool cut);
/// `body` converted from `charset` to UTF-8 by iconv (bytes it cannot convert become U+FFFD);
/// unchanged for UTF-8, ASCII, none, or a charset iconv does not know.
std::string to_utf8(std::string body, const std::string& charset);
/// The longest prefix of `s` of at most `max` bytes that does not split a UTF-8 character.
std::string_view utf8_prefix(std::string_view s, std::size_t max);

}  // namespace web

namespace web {

/// `s` on one line, whitespace runs collapsed to one space, cut to `max` bytes (with `…`).
std::string one_line(std::string_view s, std::size_t max);

}  // namespace web
