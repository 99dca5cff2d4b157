#pragma once
/// The error classes of spec §8.2. The agent loop owns the retry policy; this library only
/// classifies, exactly, and never puts a secret in a message.

#include <optional>
#include <string>
#include <string_view>

namespace ollie::backend {

/// What went wrong, in the terms the retry policy of spec §8.2 needs.
enum class ErrorClass {
  rate_limit,        ///< HTTP 429; `retry_after_s` when the provider gave one.
  transient,         ///< 5xx, network, DNS, TLS, connect or idle timeout.
  stream_drop,       ///< The response ended without the provider's done marker.
  context_overflow,  ///< The provider's overflow marker (spec §8.16).
  tool_unsupported,  ///< The model does not accept tools (spec §8.16 markers).
  auth,              ///< 401/403 (or the provider's invalid-key answer).
  client,            ///< Any other 4xx or an unparsable response: the provider's message.
  config,            ///< Not sent: missing key, bad backends.conf, invalid parameters.
};

/// A classified failure. `message` is ready for an `error` block and never holds a secret.
struct Error {
  ErrorClass cls = ErrorClass::client;
  std::string message;
  int http_status = 0;                  ///< 0 when no HTTP status was received.
  std::optional<int> retry_after_s;     ///< Retry-After (or the provider's equivalent), seconds.
};

/// The class's name as used in logs and tests: "rate limit", "transient", ...
std::string_view class_name(ErrorClass c);

/// Everything needed to classify a failed HTTP answer of one backend.
struct HttpFailure {
  std::string_view backend;      ///< e.g. "openai"
  std::string_view key_var;      ///< e.g. "OPENAI_API_KEY" (named in auth errors)
  std::string_view model;        ///< named in tool-unsupported errors
  int status = 0;
  std::string_view body;         ///< the response body (redacted before use)
  std::string_view retry_after;  ///< the Retry-After header, "" when absent
  std::string_view secret;       ///< redacted from everything taken from the body
};

/// Classifies an HTTP error answer (status ≥ 400) into an Error, by status and the
/// overflow/tool-unsupported markers of spec §8.16, with the provider's message extracted
/// from its JSON body.
Error classify_http(const HttpFailure& f);

/// The class of an error event inside a 200 stream, from the HTTP-like code it carries (0 = none)
/// and its text: 429 a rate limit, the overflow marker an overflow, any other 4xx a client error
/// (not retried), else transient (§8.2).
ErrorClass classify_in_stream(int code, std::string_view text);
/// An error event inside a 200 stream: classified as classify_in_stream says; a transient one
/// reads as a server error does (`<backend>: server error: [<code> ]<message>`), others
/// `<backend>: error in stream: <message>`.
Error in_stream_error(std::string_view backend, int code, std::string_view message, std::string_view whole);

/// True when `text` carries one of the context-overflow markers of spec §8.16.
bool has_overflow_marker(std::string_view text);
/// True when `text` carries one of the tool-unsupported markers of spec §8.16.
bool has_tool_unsupported_marker(std::string_view text);

/// The shortest key redact() hides: a shorter one is a stand-in (the README's `x` for a local
/// server), no secret, and hiding it would garble every provider message holding that text.
inline constexpr std::size_t min_secret = 8;
/// `text` with every occurrence of `secret` replaced by "***" (no-op for a key shorter than
/// min_secret).
std::string redact(std::string text, std::string_view secret);

/// Parses a Retry-After value: delta-seconds or an HTTP-date. nullopt when unparsable.
std::optional<int> parse_retry_after(std::string_view value);

}  // namespace ollie::backend
