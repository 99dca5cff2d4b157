#include <gtest/gtest.h>

#include <limits>

#include "backend/error.hpp"
#include "backend/types.hpp"

namespace ollie::backend {
namespace {

Error classify(int status, std::string_view body, std::string_view retry_after = "") {
  return classify_http(HttpFailure{"openai", "OPENAI_API_KEY", "gpt-x", status, body, retry_after, "sk-live-123"});
}

TEST(BackendErrors, StatusClasses) {
  EXPECT_EQ(classify(429, "{}").cls, ErrorClass::rate_limit);
  EXPECT_EQ(classify(500, "{}").cls, ErrorClass::transient);
  EXPECT_EQ(classify(503, "upstream").cls, ErrorClass::transient);
  EXPECT_EQ(classify(401, "{}").cls, ErrorClass::auth);
  EXPECT_EQ(classify(403, "{}").cls, ErrorClass::auth);
  EXPECT_EQ(classify(404, R"({"error":{"message":"model not found"}})").cls, ErrorClass::client);
  EXPECT_EQ(classify(400, R"({"error":{"message":"bad"}})").message, "openai: 400 bad");
}

TEST(BackendErrors, EveryOverflowMarkerIsContextOverflow) {
  for (const char* m : {"context_length_exceeded", "Prompt is too long", "please reduce the length", "Too many tokens",
                        "maximum context length", "exceeds the maximum number of tokens"})
    EXPECT_EQ(classify(400, std::string("{\"error\":{\"message\":\"x ") + m + "\"}}").cls, ErrorClass::context_overflow) << m;
  EXPECT_EQ(classify(400, R"({"error":{"message":"too long"}})").cls, ErrorClass::client);
  // Only a 400 is an overflow (§8.2): another client error with a marker is that client error.
  for (int status : {404, 413, 422}) {
    const auto e = classify(status, R"({"error":{"message":"prompt is too long"}})");
    EXPECT_EQ(e.cls, ErrorClass::client) << status;
    EXPECT_EQ(e.message, "openai: " + std::to_string(status) + " prompt is too long");
  }
}

TEST(BackendErrors, EveryToolMarkerIsToolUnsupportedOn400404And422) {
  for (const char* m : {"tool use is not supported", "tools is not supported", "function calling is not supported",
                        "does not support tools", "does not support function", "tool_use is not enabled",
                        "not support tool", "No endpoints found that support tool use"})
    for (int status : {400, 404, 422}) {
      auto e = classify(status, std::string("{\"error\":\"") + m + "\"}");
      EXPECT_EQ(e.cls, ErrorClass::tool_unsupported) << m << " " << status;
      EXPECT_EQ(e.message, "model does not support tool calls: gpt-x");
    }
  EXPECT_EQ(classify(500, R"({"error":"does not support tools"})").cls, ErrorClass::transient);
}

TEST(BackendErrors, AuthNamesTheVariableNeverTheKey) {
  auto e = classify(401, R"({"error":{"message":"Incorrect API key provided: sk-live-123"}})");
  EXPECT_EQ(e.message, "openai: authentication failed (check OPENAI_API_KEY)");
  auto c = classify(400, R"({"error":{"message":"echo sk-live-123 back"}})");
  EXPECT_EQ(c.message.find("sk-live-123"), std::string::npos);
  EXPECT_NE(c.message.find("***"), std::string::npos);
}

// A key is hidden wherever a provider echoes it; a stand-in shorter than a secret (the README's
// `x`) is not, or every provider message holding that letter would come out garbled.
TEST(BackendErrors, RedactHidesKeysNotStandIns) {
  EXPECT_EQ(redact("bad key sk-test-1234 (sk-test-1234)", "sk-test-1234"), "bad key *** (***)");
  EXPECT_EQ(redact("\"index\" is a string, not an integer", "x"), "\"index\" is a string, not an integer");
  EXPECT_EQ(redact("abcdefg", "abcdefg"), "abcdefg");
  EXPECT_EQ(redact("abcdefgh", "abcdefgh"), "***");
  EXPECT_EQ(redact("text", ""), "text");
}

TEST(BackendErrors, RetryAfterSecondsAndHttpDate) {
  EXPECT_EQ(classify(429, "{}", "17").retry_after_s, 17);
  EXPECT_FALSE(classify(429, "{}").retry_after_s.has_value());
  EXPECT_EQ(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), 0);  // in the past
  EXPECT_FALSE(parse_retry_after("soon").has_value());
  // Waits no int holds are still waits, above §8.2's 120 s (not retried), never none (retried).
  EXPECT_EQ(parse_retry_after("99999999999"), std::numeric_limits<int>::max());
  EXPECT_EQ(parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT"), std::numeric_limits<int>::max());
  auto g = classify(429, R"({"error":{"code":429,"details":[{"retryDelay":"9s"}]}})");
  EXPECT_EQ(g.retry_after_s, 9);
}

TEST(BackendErrors, UnparsableBodyKeepsATrimmedMessage) {
  EXPECT_EQ(classify(418, "  <html>teapot</html>\n").message, "openai: 418 <html>teapot</html>");
  EXPECT_EQ(classify(400, "").message, "openai: 400 empty response body");
  EXPECT_LT(classify(400, std::string(5000, 'x')).message.size(), 600u);
  // Blocks and chat show it on one line: a proxy's HTML page by its title, other text collapsed.
  EXPECT_EQ(classify(502, "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
                          "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n")
                .message,
            "openai: server error: 502 502 Bad Gateway");
  EXPECT_EQ(classify(503, "upstream connect error\n   or disconnect\treset\n").message,
            "openai: server error: 503 upstream connect error or disconnect reset");
  // A JSON message too, and one that ends a stream: no newline or escape sequence reaches a block.
  EXPECT_EQ(classify(502, R"({"error":{"message":"boom\nline2 \u001b[31mRED"}})").message,
            "openai: server error: 502 boom line2  [31mRED");
  EXPECT_EQ(in_stream_error("openai", 500, "boom\nline2", "{}").message, "openai: server error: 500 boom line2");
}

TEST(BackendErrors, HugeProviderMessageIsCutWithAnEllipsis) {
  const auto e = classify(400, R"({"error":{"message":")" + std::string(1 << 20, 'x') + "\"}}");
  EXPECT_LE(e.message.size(), std::string("openai: 400 ").size() + 2048);
  EXPECT_TRUE(e.message.ends_with("x...")) << e.message.substr(0, 100);
}

TEST(BackendErrors, StopReasonsMapAsTheSpecLists) {
  for (const char* s : {"stop", "END_TURN", "stop_sequence"}) EXPECT_EQ(map_stop_reason(s), StopReason::end) << s;
  for (const char* s : {"tool_use", "tool_calls", "function_call"}) EXPECT_EQ(map_stop_reason(s), StopReason::tool_calls) << s;
  for (const char* s : {"length", "MAX_TOKENS"}) EXPECT_EQ(map_stop_reason(s), StopReason::length) << s;
  for (const char* s : {"content_filter", "SAFETY", "refusal", "recitation"}) EXPECT_EQ(map_stop_reason(s), StopReason::filtered) << s;
}

}  // namespace
}  // namespace ollie::backend
