// What each adapter sends: the fake provider records every request.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "backend/limits.hpp"
#include "harness.hpp"
#include "server.hpp"

namespace ollie::backend {
namespace {

using nlohmann::json;
using test::Collected;
using test::Collector;

class BackendRequests : public ::testing::Test {
 protected:
  fakeprovider::Server fake{json{{"models", json::array({{{"id", "fake-model"}, {"context_length", 65536}},
                                                         {{"id", "small"}, {"context_length", 8192}}})},
                                 {"github_tokens", json::array({test::test_key})}}};
  HttpEngine engine;

  std::unique_ptr<Backend> make(const std::string& name, std::function<void(BackendSettings&)> tweak = {}) {
    auto s = test::fake_settings(name, fake.url());
    if (tweak) tweak(s);
    auto b = make_backend(s, engine);
    EXPECT_TRUE(b.ok());
    return std::move(*b);
  }

  /// Streams `req` and returns the terminal event's collection.
  Collected run(Backend& b, const ChatRequest& req, json response = json{{"text", "ok"}}) {
    fake.push(std::move(response));
    Collector col;
    auto s = b.stream(req, col.sink());
    EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
    return col.wait();
  }

  json last_body() { return json::parse(fake.requests().back().body); }
  std::string last_header(const std::string& k) {
    auto r = fake.requests().back();
    return r.headers.count(k) ? r.headers[k] : "";
  }
};

ChatRequest with_params() {
  auto r = test::simple_request();
  r.params.max_tokens = 1000;
  r.params.temperature = 0.5;
  r.params.top_k = 40;
  r.params.min_p = 0.05;
  r.params.frequency_penalty = 0.1;
  r.params.repetition_penalty = 1.1;
  r.params.stop = {"END"};
  return r;
}

TEST_F(BackendRequests, OpenAiAsksForUsageAndSendsOnlyWhatItAccepts) {
  auto b = make("openai", [](BackendSettings& s) { s.headers = {"OpenAI-Organization: org-123"}; });
  auto got = run(*b, with_params());
  ASSERT_FALSE(got.is_error());
  auto body = last_body();
  EXPECT_EQ(fake.requests().back().path, "/v1/chat/completions");
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["max_tokens"], 1000);
  EXPECT_EQ(body["stop"], json::array({"END"}));
  EXPECT_EQ(body["messages"][0], json({{"role", "system"}, {"content", "You are a test."}}));
  EXPECT_EQ(body["tools"][0]["function"]["name"], "read");
  EXPECT_FALSE(body.contains("top_k"));
  EXPECT_FALSE(body.contains("min_p"));
  EXPECT_EQ(last_header("authorization"), "Bearer " + test::test_key);
  EXPECT_EQ(last_header("openai-organization"), "org-123");
}

// Real providers are reached over TLS: a connection per request would pay a handshake per round.
TEST_F(BackendRequests, ConsecutiveRequestsShareOneConnectionAndADroppedStreamEndsIts) {
  auto b = make("openai");
  ASSERT_FALSE(run(*b, test::simple_request()).is_error());
  ASSERT_FALSE(run(*b, test::simple_request()).is_error());
  auto reqs = fake.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].connection, reqs[1].connection) << "the second request opened a connection of its own";
  // A stream cut off mid-way leaves its connection unusable: the next request gets a new one.
  EXPECT_TRUE(run(*b, test::simple_request(),
                  json{{"fault", "drop"}, {"drop_after", 3}, {"text", "some text that streams for a while"}, {"chunk", 4}})
                  .is_error());
  ASSERT_FALSE(run(*b, test::simple_request()).is_error());
  reqs = fake.requests();
  ASSERT_EQ(reqs.size(), 4u);
  EXPECT_EQ(reqs[2].connection, reqs[1].connection);
  EXPECT_NE(reqs[3].connection, reqs[2].connection);
}

TEST_F(BackendRequests, OpenRouterGetsItsExtraSamplers) {
  auto b = make("openrouter");
  auto r = with_params();
  r.params.reasoning = 2000;
  ASSERT_FALSE(run(*b, r).is_error());
  auto body = last_body();
  EXPECT_EQ(fake.requests().back().path, "/api/v1/chat/completions");
  EXPECT_EQ(body["top_k"], 40);
  EXPECT_EQ(body["repetition_penalty"], 1.1);
  EXPECT_EQ(body["reasoning"]["max_tokens"], 2000);
}

TEST_F(BackendRequests, OpenAiToolHistoryRoundTrips) {
  auto b = make("openai");
  auto r = test::simple_request();
  r.messages.push_back(Message{Role::assistant, "", {{"c1", "read", R"({"path":"a"})"}}});
  r.messages.push_back(Message{Role::tool, "file a", {}, "c1"});
  ASSERT_FALSE(run(*b, r).is_error());
  auto msgs = last_body()["messages"];
  ASSERT_EQ(msgs.size(), 4u);
  EXPECT_EQ(msgs[2]["tool_calls"][0]["id"], "c1");
  EXPECT_EQ(msgs[2]["tool_calls"][0]["function"]["arguments"], R"({"path":"a"})");
  EXPECT_EQ(msgs[3], json({{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "file a"}}));
}

TEST_F(BackendRequests, OpenAiBodyOfARoundFollowsEveryChangeToTheHistory) {
  // A backend keeps the wire text of the messages it sent (a round serialises only what is new);
  // a message changed in place (a collapsed result, a compacted history) or removed must be
  // sent as it is now, and the bytes must be those of a body made from scratch.
  auto b = make("openai");
  auto r = test::simple_request();
  r.messages.push_back(Message{Role::assistant, "", {{"c1", "read", R"({"path":"a"})"}}});
  r.messages.push_back(Message{Role::tool, "file a, \"quoted\" and long", {}, "c1"});
  ASSERT_FALSE(run(*b, r).is_error());
  const auto first = fake.requests().back().body;
  r.messages[2].content = "[collapsed]";
  r.messages.push_back(Message{Role::user, "next"});
  ASSERT_FALSE(run(*b, r).is_error());
  auto msgs = last_body()["messages"];
  ASSERT_EQ(msgs.size(), 5u);
  EXPECT_EQ(msgs[3]["content"], "[collapsed]");
  EXPECT_EQ(msgs[4]["content"], "next");
  r.messages.resize(1);
  ASSERT_FALSE(run(*b, r).is_error());
  EXPECT_EQ(last_body()["messages"].size(), 2u);
  // The same history through a fresh backend gives the same bytes.
  r = test::simple_request();
  r.messages.push_back(Message{Role::assistant, "", {{"c1", "read", R"({"path":"a"})"}}});
  r.messages.push_back(Message{Role::tool, "file a, \"quoted\" and long", {}, "c1"});
  auto fresh = make("openai");
  ASSERT_FALSE(run(*fresh, r).is_error());
  EXPECT_EQ(fake.requests().back().body, first);
  EXPECT_EQ(json::parse(first).dump(), first);  // what dumping the whole body at once gives
  // A changed tool list is sent as it is now.
  r.tools.push_back(Tool{"grep", "Search.", R"({"type":"object","properties":{"re":{"type":"string"}}})"});
  ASSERT_FALSE(run(*fresh, r).is_error());
  auto tools = last_body()["tools"];
  ASSERT_EQ(tools.size(), r.tools.size());
  EXPECT_EQ(tools.back()["function"]["parameters"]["properties"]["re"]["type"], "string");
  r.tools.clear();
  ASSERT_FALSE(run(*fresh, r).is_error());
  EXPECT_FALSE(last_body().contains("tools"));
}

TEST_F(BackendRequests, LegacyFunctionCallBecomesACall) {
  auto b = make("openai");
  auto got = run(*b, test::simple_request(),
                 {{"legacy_function_call", true}, {"tool_calls", json::array({{{"name", "read"}, {"arguments", {{"path", "x"}}}}})}});
  ASSERT_FALSE(got.is_error());
  ASSERT_EQ(got.calls.size(), 1u);
  EXPECT_EQ(got.calls[0].name, "read");
  EXPECT_EQ(json::parse(got.calls[0].arguments)["path"], "x");
  EXPECT_EQ(got.end->stop, StopReason::tool_calls);
  EXPECT_EQ(got.end->stop_raw, "function_call");
}

TEST_F(BackendRequests, LengthStopKeepsTheCutOffArguments) {
  for (const char* name : {"openai", "anthropic", "kiro"}) {
    auto b = make(name);
    auto got = run(*b, test::simple_request(),
                   {{"text", "partial"}, {"stop", "length"},
                    {"tool_calls", json::array({{{"id", "t1"}, {"name", "read"}, {"arguments", "{\"path\": \"/et"}}})}});
    ASSERT_TRUE(got.end && got.end->kind == StreamEvent::Kind::done) << name;
    ASSERT_EQ(got.calls.size(), 1u) << name << ": the cut-off call is not dropped";
    EXPECT_EQ(got.calls[0].arguments, "{\"path\": \"/et") << name;
    if (std::string(name) != "kiro") {
      EXPECT_EQ(got.end->stop, StopReason::length) << name;
    }
  }
}

TEST_F(BackendRequests, ContentFilterStopIsReported) {
  for (const char* name : {"openai", "anthropic", "gemini"}) {
    auto b = make(name);
    auto got = run(*b, test::simple_request(), {{"text", "I can't"}, {"stop", "filter"}});
    ASSERT_TRUE(got.end && got.end->kind == StreamEvent::Kind::done) << name;
    EXPECT_EQ(got.end->stop, StopReason::filtered) << name << " " << got.end->stop_raw;
  }
}

// The provider's stop word is shown (`stopped: <word>`): a hostile one cannot put the key, a
// second line or a megabyte into an error block through it.
TEST_F(BackendRequests, AStopWordIsRedactedOneLineAndCut) {
  auto b = make("openai");
  auto got = run(*b, test::simple_request(),
                 {{"text", "no"}, {"stop_word", "filtered_Bearer " + std::string(test::test_key) + "\nline2 " + std::string(5000, 'z')}});
  ASSERT_TRUE(got.end && got.end->kind == StreamEvent::Kind::done);
  const auto& raw = got.end->stop_raw;
  EXPECT_EQ(raw.find(test::test_key), std::string::npos) << raw.substr(0, 100);
  EXPECT_EQ(raw.rfind("filtered_Bearer *** line2 zz", 0), 0u) << raw.substr(0, 100);
  EXPECT_LE(raw.size(), limits::error_text);
}

// Some compatible servers (Gemini's OpenAI endpoint) send each call whole without an `index`:
// a new id is a new call, not more of the last one.
TEST_F(BackendRequests, OpenaiCallsWithoutAnIndexStayApart) {
  auto b = make("openai");
  auto got = run(*b, test::simple_request(),
                 {{"calls_without_index", true},
                  {"tool_calls", json::array({{{"id", "function-call-1"}, {"name", "glob"}, {"arguments", {{"p", "*.c"}}}},
                                              {{"id", "function-call-2"}, {"name", "read"}, {"arguments", {{"path", "a"}}}}})}});
  ASSERT_TRUE(got.end && got.end->kind == StreamEvent::Kind::done);
  ASSERT_EQ(got.calls.size(), 2u);
  EXPECT_EQ(got.calls[0].id, "function-call-1");
  EXPECT_EQ(got.calls[0].name, "glob");
  EXPECT_EQ(got.calls[0].arguments, R"({"p":"*.c"})");
  EXPECT_EQ(got.calls[1].name, "read");
  EXPECT_EQ(got.calls[1].arguments, R"({"path":"a"})");
}

// A compatible server that fills both reasoning fields with the same text: it counts once.
TEST_F(BackendRequests, OpenaiReasoningInBothFieldsCountsOnce) {
  auto b = make("openai");
  auto got = run(*b, test::simple_request(), {{"reasoning_both", true}, {"reasoning", "think twice"}, {"text", "ok"}});
  ASSERT_TRUE(got.end && got.end->kind == StreamEvent::Kind::done);
  EXPECT_EQ(got.reasoning, "think twice");
  EXPECT_EQ(got.text, "ok");
}

// Gemini blocks a prompt with promptFeedback.blockReason and no candidate: a filtered stop
// with that reason, not a stream that dropped (which would be retried).
TEST_F(BackendRequests, GeminiBlockedPromptIsAFilteredStop) {
  auto b = make("gemini");
  auto got = run(*b, test::simple_request(), {{"stop", "blocked"}});
  ASSERT_TRUE(got.end && got.end->kind == StreamEvent::Kind::done) << (got.end ? got.end->error.message : "no end");
  EXPECT_EQ(got.end->stop, StopReason::filtered);
  EXPECT_EQ(got.end->stop_raw, "SAFETY");
  EXPECT_EQ(got.end->usage.input, 12);
}

TEST_F(BackendRequests, AnthropicMaxTokensAlwaysSentAndThinkingDropsSamplers) {
  auto b = make("anthropic");
  auto r = test::simple_request();
  r.params.temperature = 0.3;
  r.params.top_k = 5;
  ASSERT_FALSE(run(*b, r).is_error());
  auto body = last_body();
  EXPECT_EQ(body["max_tokens"], 8192);
  EXPECT_EQ(body["temperature"], 0.3);
  EXPECT_EQ(body["system"][0]["cache_control"]["type"], "ephemeral");
  EXPECT_EQ(last_header("x-api-key"), test::test_key);
  EXPECT_EQ(last_header("anthropic-version"), "2023-06-01");

  r.params.reasoning = 4000;
  r.params.max_tokens = 16000;
  ASSERT_FALSE(run(*b, r).is_error());
  body = last_body();
  EXPECT_EQ(body["thinking"], json({{"type", "enabled"}, {"budget_tokens", 4000}}));
  EXPECT_EQ(body["max_tokens"], 16000);
  EXPECT_FALSE(body.contains("temperature"));
  EXPECT_FALSE(body.contains("top_k"));
}

TEST_F(BackendRequests, AnthropicMaxTokensNotAboveReasoningIsNotSent) {
  auto b = make("anthropic");
  auto r = test::simple_request();
  r.params.reasoning = 8192;
  Collector col;
  auto s = b->stream(r, col.sink());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "anthropic: maxTokens 8192 must exceed reasoning 8192");
  EXPECT_TRUE(fake.requests().empty());
}

TEST_F(BackendRequests, AnthropicThinkingBlocksGoBackUnchangedToAnthropicOnly) {
  auto b = make("anthropic");
  auto r = test::simple_request();
  Message a{Role::assistant, "calling", {{"toolu_1", "read", R"({"path":"a"})"}}};
  a.reasoning_items = {R"({"type":"thinking","thinking":"hmm","signature":"SIG=="})"};
  a.reasoning_backend = "anthropic";
  r.messages.push_back(a);
  r.messages.push_back(Message{Role::tool, "file a", {}, "toolu_1"});
  r.messages.push_back(Message{Role::user, "and now?"});
  ASSERT_FALSE(run(*b, r).is_error());
  auto msgs = last_body()["messages"];
  ASSERT_EQ(msgs.size(), 3u);
  EXPECT_EQ(msgs[1]["content"][0], json({{"type", "thinking"}, {"thinking", "hmm"}, {"signature", "SIG=="}}));
  EXPECT_EQ(msgs[1]["content"][2]["type"], "tool_use");
  EXPECT_EQ(msgs[1]["content"][2]["input"], json({{"path", "a"}}));
  // tool result then the context text, in one user turn
  EXPECT_EQ(msgs[2]["content"][0]["type"], "tool_result");
  EXPECT_EQ(msgs[2]["content"][0]["tool_use_id"], "toolu_1");
  EXPECT_EQ(msgs[2]["content"][1]["text"], "and now?");

  r.messages[1].reasoning_backend = "gemini";
  ASSERT_FALSE(run(*b, r).is_error());
  EXPECT_EQ(last_body()["messages"][1]["content"][0]["type"], "text");
}

TEST_F(BackendRequests, OllamaSetsNumCtxFromShowCappedByConfigAnd32k) {
  auto b = make("ollama");
  ASSERT_FALSE(run(*b, test::simple_request()).is_error());
  EXPECT_EQ(last_body()["options"]["num_ctx"], 32768);  // show says 65536
  ASSERT_FALSE(run(*b, test::simple_request()).is_error());
  int shows = 0;
  for (const auto& r : fake.requests()) shows += r.path == "/api/show";
  EXPECT_EQ(shows, 1) << "the model's length is cached";

  auto capped = make("ollama", [](BackendSettings& s) { s.num_ctx = 16384; });
  ASSERT_FALSE(run(*capped, test::simple_request()).is_error());
  EXPECT_EQ(last_body()["options"]["num_ctx"], 16384);
  EXPECT_EQ(*capped->context_length("fake-model"), 16384);

  auto small = make("ollama", [](BackendSettings& s) { s.model = "small"; });
  ASSERT_FALSE(run(*small, with_params()).is_error());
  auto body = last_body();
  EXPECT_EQ(body["options"]["num_ctx"], 8192);
  EXPECT_EQ(body["options"]["num_predict"], 1000);
  EXPECT_EQ(body["options"]["repeat_penalty"], 1.1);
  EXPECT_EQ(body["tools"][0]["function"]["name"], "read");
}

TEST_F(BackendRequests, OllamaUnknownModelFailsFromShow) {
  auto b = make("ollama", [](BackendSettings& s) { s.model = "nope:1b"; });
  Collector col;
  auto s = b->stream(test::simple_request(), col.sink());
  auto got = col.wait();
  ASSERT_TRUE(got.is_error());
  EXPECT_EQ(got.error().cls, ErrorClass::client);
  EXPECT_NE(got.error().message.find("not found"), std::string::npos);
}

TEST_F(BackendRequests, GeminiThoughtSignaturesAndFunctionResponses) {
  auto b = make("gemini");
  auto got = run(*b, test::simple_request(),
                 {{"tool_calls", json::array({{{"name", "read"}, {"arguments", {{"path", "a"}}}}})}, {"signature", "TS1"}});
  ASSERT_FALSE(got.is_error());
  EXPECT_EQ(fake.requests().back().path, "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse");
  EXPECT_EQ(last_header("x-goog-api-key"), test::test_key);
  ASSERT_EQ(got.calls.size(), 1u);

  auto r = test::simple_request();
  Message a{Role::assistant, "", got.calls};
  a.reasoning_items = got.end->reasoning_items;
  a.reasoning_backend = "gemini";
  r.messages.push_back(a);
  r.messages.push_back(Message{Role::tool, "contents of a", {}, got.calls[0].id});
  r.params.reasoning = 1024;
  ASSERT_FALSE(run(*b, r).is_error());
  auto body = last_body();
  auto contents = body["contents"];
  ASSERT_EQ(contents.size(), 3u);
  EXPECT_EQ(contents[1]["role"], "model");
  EXPECT_EQ(contents[1]["parts"][0]["thoughtSignature"], "TS1");
  EXPECT_EQ(contents[2]["parts"][0]["functionResponse"]["name"], "read");
  EXPECT_EQ(body["systemInstruction"]["parts"][0]["text"], "You are a test.");
  EXPECT_EQ(body["generationConfig"]["thinkingConfig"]["thinkingBudget"], 1024);
}

TEST_F(BackendRequests, CopilotExchangesTheGithubTokenOnce) {
  auto b = make("copilot");
  ASSERT_FALSE(run(*b, test::simple_request()).is_error());
  ASSERT_FALSE(run(*b, test::simple_request()).is_error());
  int exchanges = 0;
  for (const auto& r : fake.requests()) exchanges += r.path == "/copilot_internal/v2/token";
  EXPECT_EQ(exchanges, 1);
  EXPECT_EQ(last_header("authorization").rfind("Bearer tid=fake;", 0), 0u);
  EXPECT_EQ(last_header("copilot-integration-id"), "vscode-chat");
}

TEST_F(BackendRequests, CopilotRejectedGithubTokenIsAnAuthError) {
  auto b = make("copilot", [](BackendSettings& s) { s.key = "gho_not_accepted"; });
  Collector col;
  auto s = b->stream(test::simple_request(), col.sink());
  auto got = col.wait();
  ASSERT_TRUE(got.is_error());
  EXPECT_EQ(got.error().cls, ErrorClass::auth);
  EXPECT_EQ(got.error().message, "copilot: authentication failed (check OLLIE_COPILOT_TOKEN)");
}

TEST_F(BackendRequests, KiroSendsConversationStateWithToolsAndHistory) {
  auto b = make("kiro");
  auto r = test::simple_request();
  r.messages.push_back(Message{Role::assistant, "", {{"t1", "read", R"({"path":"a"})"}}});
  r.messages.push_back(Message{Role::tool, "file a", {}, "t1"});
  ASSERT_FALSE(run(*b, r).is_error());
  auto st = last_body()["conversationState"];
  EXPECT_EQ(last_header("authorization"), "Bearer " + test::test_key);
  EXPECT_EQ(st["chatTriggerType"], "MANUAL");
  ASSERT_EQ(st["history"].size(), 2u);
  EXPECT_EQ(st["history"][0]["userInputMessage"]["content"], "You are a test.\n\nhello");
  EXPECT_EQ(st["history"][1]["assistantResponseMessage"]["toolUses"][0]["toolUseId"], "t1");
  auto cur = st["currentMessage"]["userInputMessage"];
  EXPECT_EQ(cur["modelId"], "fake-model");
  EXPECT_EQ(cur["userInputMessageContext"]["toolResults"][0]["toolUseId"], "t1");
  EXPECT_EQ(cur["userInputMessageContext"]["tools"][0]["toolSpecification"]["name"], "read");
}

}  // namespace
}  // namespace ollie::backend
