// Every provider streams text, reasoning and tool calls and reports usage, through real
// HTTP against the fake provider speaking that provider's wire format.
#include <gtest/gtest.h>

#include <set>

#include <nlohmann/json.hpp>

#include "harness.hpp"
#include "server.hpp"

namespace ollie::backend {
namespace {

using nlohmann::json;
using test::Collector;

const json models = json::array({{{"id", "fake-model"}, {"context_length", 65536}},
                                 {{"id", "gemini-2.5-flash"}, {"context_length", 1048576}},
                                 {{"id", "claude-sonnet-4-5"}, {"context_length", 200000}}});

json full_response() {
  return {{"reasoning", "Let me think about it."},
          {"text", "Hello, w\u00f6rld! \U0001F642 All good."},
          {"tool_calls", json::array({{{"id", "call_a"}, {"name", "read"}, {"arguments", {{"path", "/etc/hosts"}}}},
                                      {{"id", "call_b"}, {"name", "grep"}, {"arguments", {{"pattern", "a\"b"}, {"n", 3}}}}})},
          {"usage", {{"input", 100}, {"output", 40}, {"cached_input", 20}, {"cache_creation", 10}, {"reasoning_tokens", 5}, {"cost", 0.0042}}},
          {"chunk", 3}};
}

class BackendProviders : public ::testing::TestWithParam<std::string> {
 protected:
  fakeprovider::Server fake{json{{"models", models}}};
  HttpEngine engine;

  std::unique_ptr<Backend> backend() {
    auto b = make_backend(test::fake_settings(GetParam(), fake.url()), engine);
    EXPECT_TRUE(b.ok());
    return std::move(*b);
  }
};

TEST_P(BackendProviders, StreamsTextReasoningToolCallsAndUsage) {
  const auto name = GetParam();
  fake.push(full_response());
  auto b = backend();
  Collector col;
  auto s = b->stream(test::simple_request(), col.sink());
  ASSERT_TRUE(s.ok()) << s.error().message;
  auto got = col.wait();
  ASSERT_TRUE(got.end.has_value()) << "no terminal event";
  ASSERT_EQ(got.end->kind, StreamEvent::Kind::done) << got.error().message;

  EXPECT_EQ(got.text, "Hello, w\u00f6rld! \U0001F642 All good.");
  EXPECT_EQ(got.reasoning, "Let me think about it.");
  int text_events = 0;
  for (const auto& e : got.events) text_events += e.kind == StreamEvent::Kind::content;
  EXPECT_GT(text_events, 3) << "text must arrive as deltas, not at once";

  ASSERT_EQ(got.calls.size(), 2u);
  EXPECT_EQ(got.calls[0].name, "read");
  EXPECT_EQ(json::parse(got.calls[0].arguments), json({{"path", "/etc/hosts"}}));
  EXPECT_EQ(got.calls[1].name, "grep");
  EXPECT_EQ(json::parse(got.calls[1].arguments), json({{"pattern", "a\"b"}, {"n", 3}}));
  EXPECT_FALSE(got.calls[0].id.empty());
  EXPECT_NE(got.calls[0].id, got.calls[1].id);
  if (name != "ollama" && name != "gemini") {  // those two send no call ids
    EXPECT_EQ(got.calls[0].id, "call_a");
    EXPECT_EQ(got.calls[1].id, "call_b");
  } else {
    // The ids made for them differ from one response to the next: one history may go to
    // anthropic after a backend switch, which wants its tool_use ids unique.
    fake.push(full_response());
    Collector again;
    auto s2 = b->stream(test::simple_request(), again.sink());
    ASSERT_TRUE(s2.ok()) << s2.error().message;
    auto next = again.wait();
    ASSERT_EQ(next.calls.size(), 2u);
    EXPECT_NE(next.calls[0].id, got.calls[0].id);
    EXPECT_NE(next.calls[1].id, got.calls[1].id);
  }
  // ollama and gemini report "stop" with calls; the calls still run (spec §8.2).
  const auto stop = got.end->stop;
  EXPECT_TRUE(stop == StopReason::tool_calls || ((name == "ollama" || name == "gemini") && stop == StopReason::end))
      << got.end->stop_raw;

  const auto& u = got.end->usage;
  if (name == "kiro") {  // kiro reports a context percentage only: an estimate
    EXPECT_TRUE(u.estimated);
    EXPECT_EQ(u.input, 100);
    EXPECT_GT(u.output, 0);
  } else {
    EXPECT_FALSE(u.estimated);
    EXPECT_EQ(u.output, 40);
    if (name == "ollama") {
      EXPECT_EQ(u.input, 120);  // ollama has no cache split
    } else {
      EXPECT_EQ(u.input, 100);
      EXPECT_EQ(u.cached_input, 20);
    }
    EXPECT_EQ(u.cache_creation, name == "anthropic" ? 10 : 0);
  }
  if (name == "openrouter") {
    ASSERT_TRUE(u.cost.has_value());
    EXPECT_DOUBLE_EQ(*u.cost, 0.0042);
  }
  if (name == "anthropic") {
    ASSERT_EQ(got.end->reasoning_items.size(), 1u);
    auto item = json::parse(got.end->reasoning_items[0]);
    EXPECT_EQ(item["type"], "thinking");
    EXPECT_EQ(item["thinking"], "Let me think about it.");
    EXPECT_EQ(item["signature"], "sig-fake");
  }
  if (name == "gemini") {
    ASSERT_EQ(got.end->reasoning_items.size(), 2u);
    EXPECT_EQ(json::parse(got.end->reasoning_items[1])["thoughtSignature"], "sig-fake");
  }
}

TEST_P(BackendProviders, TextOnlyAnswerEndsNormally) {
  fake.push({{"text", "Just text."}, {"usage", {{"input", 5}, {"output", 2}}}});
  auto b = backend();
  Collector col;
  auto s = b->stream(test::simple_request(), col.sink());
  ASSERT_TRUE(s.ok());
  auto got = col.wait();
  ASSERT_TRUE(got.end && got.end->kind == StreamEvent::Kind::done) << (got.end ? got.error().message : "timeout");
  EXPECT_EQ(got.text, "Just text.");
  EXPECT_TRUE(got.calls.empty());
  EXPECT_EQ(got.end->stop, StopReason::end);
}

TEST_P(BackendProviders, ListsModelsAndContextLength) {
  const auto name = GetParam();
  auto b = backend();
  auto l = b->list_models();
  ASSERT_TRUE(l.ok()) << l.error().message;
  EXPECT_NE(std::find(l->begin(), l->end(), b->model()), l->end());
  auto n = b->context_length(b->model());
  ASSERT_TRUE(n.ok()) << n.error().message;
  const std::map<std::string, int> expected{{"ollama", 32768},   {"openai", 65536}, {"openrouter", 65536},
                                            {"anthropic", 200000}, {"gemini", 1048576}, {"copilot", 65536},
                                            {"kiro", 128000}};
  EXPECT_EQ(*n, expected.at(name));
  // Lists that come in pages ask for one page of all: a model past the default page would
  // lose its context length (gemini 50 a page, anthropic 20).
  const std::map<std::string, std::string> query{{"gemini", "pageSize=1000"}, {"anthropic", "limit=1000"}};
  if (auto q = query.find(name); q != query.end()) {
    bool asked = false;
    for (const auto& r : fake.requests()) asked = asked || (r.method == "GET" && r.path.ends_with("models?" + q->second));
    EXPECT_TRUE(asked) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(All, BackendProviders,
                         ::testing::Values("ollama", "openai", "openrouter", "anthropic", "gemini", "copilot", "kiro"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ollie::backend
