// A hostile or sloppy provider: fields of the wrong type, answers too large to hold, answers
// that never complete, a sink that throws. Each ends one request with a clear error; none
// reaches std::terminate. Driven through real HTTP against the fake provider.
#include <gtest/gtest.h>

#include <future>
#include <map>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

#include "backend/limits.hpp"
#include "harness.hpp"
#include "server.hpp"

namespace ollie::backend {
namespace {

using nlohmann::json;
using test::Collected;
using test::Collector;
using namespace std::chrono_literals;

const std::vector<std::string> all_providers{"ollama", "openai", "openrouter", "anthropic", "gemini", "copilot", "kiro"};

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  n[0] = static_cast<char>(std::toupper(n[0]));
  return n;
}

class BackendHostile : public ::testing::TestWithParam<std::string> {
 protected:
  fakeprovider::Server fake;
  HttpEngine engine;

  std::unique_ptr<Backend> backend() {
    auto b = make_backend(test::fake_settings(GetParam(), fake.url()), engine);
    EXPECT_TRUE(b.ok());
    return std::move(*b);
  }

  Collected run(json response) {
    fake.push(std::move(response));
    auto b = backend();
    Collector col;
    auto s = b->stream(test::simple_request(), col.sink());
    EXPECT_TRUE(s.ok());
    return col.wait(20s);
  }

  bool client_closed_chat() {
    for (int i = 0; i < 200; ++i) {
      for (const auto& r : fake.requests())
        if (r.method == "POST" && r.path.find("/api/show") == std::string::npos && r.client_closed) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }
};

TEST_P(BackendHostile, WrongTypedAnswerFieldsEndTheStreamAsMalformed) {
  const std::map<std::string, std::string> problem{
      {"ollama", "\"done\" is a string, not a boolean"},
      {"openai", "\"index\" is a string, not an integer"},
      {"openrouter", "\"index\" is a string, not an integer"},
      {"copilot", "\"index\" is a string, not an integer"},
      {"anthropic", "\"index\" is a string, not an integer"},
      {"gemini", "a part is an integer, not an object"},
      {"kiro", "\"stop\" is a string, not a boolean"},
  };
  auto got = run({{"fault", "malformed"}});
  ASSERT_TRUE(got.is_error()) << "a response with wrong-typed fields must fail its stream";
  EXPECT_EQ(got.error().cls, ErrorClass::client);
  EXPECT_EQ(got.error().message, GetParam() + ": malformed response: " + problem.at(GetParam()));
  EXPECT_EQ(got.text, "ok") << "what came before the bad field was delivered";
}

// Every count of the wrong type: no usage, so it is estimated (§8.14), never counted as free.
TEST_P(BackendHostile, WrongTypedUsageCountsAreIgnored) {
  auto got = run({{"fault", "malformed_usage"}, {"text", "counted anyway"}});
  ASSERT_TRUE(got.end && got.end->kind == StreamEvent::Kind::done) << (got.end ? got.error().message : "no end");
  EXPECT_EQ(got.text, "counted anyway");
  EXPECT_FALSE(got.end->usage.cost.has_value()) << "a cost of the wrong type is no cost";
  EXPECT_TRUE(got.end->usage.estimated);
  EXPECT_GT(got.end->usage.input, 0) << "a count no int64 holds is no count";
  EXPECT_LE(got.end->usage.input, 128000) << "kiro: a percentage past 100 is 100";
  EXPECT_GT(got.end->usage.output, 0);
}

// Counts of the right type but out of range (negative, or 5e18: two of them overflowed olliesrv's
// int64 totals, a UBSan abort) are no counts either, and a negative cost is no cost.
TEST_P(BackendHostile, OutOfRangeUsageCountsAreIgnored) {
  auto got = run({{"fault", "usage_out_of_range"}, {"text", "counted anyway"}});
  ASSERT_TRUE(got.end && got.end->kind == StreamEvent::Kind::done) << (got.end ? got.error().message : "no end");
  EXPECT_EQ(got.text, "counted anyway");
  EXPECT_FALSE(got.end->usage.cost.has_value());
  EXPECT_TRUE(got.end->usage.estimated);
  EXPECT_GT(got.end->usage.input, 0);
  EXPECT_LE(got.end->usage.input, 128000);
  EXPECT_GT(got.end->usage.output, 0);
  EXPECT_LE(got.end->usage.output, 1000);
  EXPECT_GE(got.end->usage.cached_input, 0);
  EXPECT_LE(got.end->usage.cached_input, 128000);
  EXPECT_GE(got.end->usage.cache_creation, 0);
}

TEST_P(BackendHostile, EndlessEventDataIsCutAtTheLimit) {
  auto got = run({{"fault", "endless_data"}, {"text", "x"}});
  ASSERT_TRUE(got.is_error()) << "an event that never ends must fail its stream";
  EXPECT_EQ(got.error().cls, ErrorClass::client);
  EXPECT_NE(got.error().message.find("exceeds 8 MiB"), std::string::npos) << got.error().message;
  if (GetParam() != "kiro") {
    EXPECT_TRUE(client_closed_chat()) << "the transfer is abandoned, not read to its end";
  }
}

// A 5xx whose body never ends is classified from the 8 MiB kept, and its transfer abandoned:
// it was read for ever (the agent `thinking` until a stop).
TEST_P(BackendHostile, AnErrorBodyThatNeverEndsEndsTheRequest) {
  auto got = run({{"fault", "endless_error"}});
  ASSERT_TRUE(got.is_error()) << "a 500 must fail its stream";
  EXPECT_EQ(got.error().cls, ErrorClass::transient) << got.error().message.substr(0, 200);
  EXPECT_EQ(got.error().http_status, 500);
  EXPECT_TRUE(client_closed_chat()) << "the transfer is abandoned, not read to its end";
}

// A model's output is bounded by its limit; a provider that streams on past 16 MiB (text that
// became one block and one history message of 300 MB, resent with every request) is cut off.
TEST_P(BackendHostile, AResponsePastItsBoundEndsTheStream) {
  auto got = run({{"text", std::string(17u << 20, 'y')}, {"chunk", 1u << 20}});
  ASSERT_TRUE(got.is_error()) << "17 MiB of text is not taken";
  EXPECT_EQ(got.error().cls, ErrorClass::client);
  EXPECT_EQ(got.error().message, GetParam() + ": response exceeds 16 MiB");
  EXPECT_LE(got.text.size(), std::size_t{16} << 20);
}

TEST_P(BackendHostile, HugeErrorMessagesAreCut) {
  for (const char* fault : {"bad_request", "stream_error"}) {
    auto got = run({{"fault", fault}, {"message_bytes", 1 << 20}, {"text", "some text first"}, {"chunk", 4}});
    ASSERT_TRUE(got.is_error()) << fault;
    const auto& m = got.error().message;
    EXPECT_LE(m.size(), limits::error_text) << fault;
    EXPECT_TRUE(m.ends_with("xxx...")) << fault << ": " << m.substr(0, 200);
    EXPECT_EQ(m.rfind(GetParam() + ": ", 0), 0u) << fault << ": " << m.substr(0, 200);
  }
}

TEST_P(BackendHostile, HugeToolCallArgumentsEndTheStream) {
  auto got = run({{"tool_calls", json::array({{{"id", "c1"}, {"name", "write"}, {"arguments", {{"content", std::string(5u << 20, 'x')}}}}})},
                  {"chunk", 65536}});
  ASSERT_TRUE(got.is_error()) << "a call of 5 MiB is not assembled";
  EXPECT_EQ(got.error().cls, ErrorClass::client);
  EXPECT_EQ(got.error().message, GetParam() + ": tool call 'write' arguments exceed 4 MiB");
  EXPECT_TRUE(got.calls.empty());
}

TEST_P(BackendHostile, ThrowingSinkBecomesTheStreamsError) {
  fake.push({{"text", "first second third"}, {"chunk", 6}});
  auto b = backend();
  Collector col;
  auto inner = col.sink();
  auto thrown = std::make_shared<bool>(false);
  auto s = b->stream(test::simple_request(), [inner, thrown](StreamEvent ev) {
    if (ev.kind == StreamEvent::Kind::content && !*thrown) {
      *thrown = true;
      throw std::runtime_error("sink refused");
    }
    inner(std::move(ev));
  });
  ASSERT_TRUE(s.ok());
  auto got = col.wait();
  EXPECT_TRUE(*thrown);
  ASSERT_TRUE(got.is_error()) << "the exception stops at the callback boundary and ends the stream";
  EXPECT_EQ(got.error().cls, ErrorClass::client);
  EXPECT_EQ(got.error().message, GetParam() + ": response handler failed: sink refused");
}

INSTANTIATE_TEST_SUITE_P(All, BackendHostile, ::testing::ValuesIn(all_providers), test_name);

// Non-streamed answers: model lists, /api/show, the Copilot token exchange.
class BackendHostileFetch : public ::testing::Test {
 protected:
  HttpEngine engine;

  static json script(const char* fault) {
    return {{"route_faults", {{"models", fault}, {"gemini_models", fault}, {"tags", fault}, {"show", fault}, {"token", fault}}}};
  }

  std::unique_ptr<Backend> make(const std::string& name, fakeprovider::Server& fake,
                                std::chrono::milliseconds deadline = 300ms) {
    auto s = test::fake_settings(name, fake.url());
    s.fetch_timeout = deadline;
    auto b = make_backend(s, engine);
    EXPECT_TRUE(b.ok());
    return std::move(*b);
  }

  // Runs `f` with a bound on the wait, so a fetch that never ends fails the test instead of
  // hanging it (the server's stop ends the transfer).
  template <class F>
  auto bounded(fakeprovider::Server& fake, F f) -> std::optional<decltype(f())> {
    auto fut = std::async(std::launch::async, f);
    if (fut.wait_for(10s) == std::future_status::ready) return fut.get();
    fake.stop();
    fut.wait();
    return std::nullopt;
  }
};

TEST_F(BackendHostileFetch, OversizedModelListIsRefused) {
  for (const char* name : {"openai", "anthropic", "gemini", "ollama"}) {
    fakeprovider::Server fake(script("oversized"));
    auto b = make(name, fake, 20s);
    auto l = b->list_models();
    ASSERT_FALSE(l.ok()) << name << ": a 12 MiB list is not held";
    EXPECT_EQ(l.error().cls, ErrorClass::client) << name;
    EXPECT_EQ(l.error().message, std::string(name) + ": response body exceeds 8 MiB");
  }
}

TEST_F(BackendHostileFetch, StalledModelListAndLengthLookupMeetTheDeadline) {
  for (const char* name : {"openai", "anthropic", "gemini", "ollama"}) {
    fakeprovider::Server fake(script("stall"));
    auto b = make(name, fake);
    const auto t0 = std::chrono::steady_clock::now();
    auto l = bounded(fake, [&] { return b->list_models(); });
    ASSERT_TRUE(l.has_value()) << name << ": list_models() did not return within 10 s";
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s) << name;
    ASSERT_FALSE(l->ok()) << name;
    EXPECT_EQ(l->error().cls, ErrorClass::transient) << name;
    EXPECT_EQ(l->error().message, std::string(name) + ": deadline: no complete response within 300 ms");
  }
  fakeprovider::Server fake(script("stall"));
  auto b = make("ollama", fake);
  auto n = bounded(fake, [&] { return b->context_length("fake-model"); });
  ASSERT_TRUE(n.has_value()) << "context_length() did not return within 10 s";
  ASSERT_FALSE(n->ok());
  EXPECT_EQ(n->error().message, "ollama: deadline: no complete response within 300 ms");
}

TEST_F(BackendHostileFetch, StalledTokenExchangeAndShowMeetTheDeadline) {
  for (const char* name : {"copilot", "ollama"}) {
    fakeprovider::Server fake(script("stall"));
    fake.push({{"text", "never asked for"}});
    auto b = make(name, fake);
    Collector col;
    auto s = b->stream(test::simple_request(), col.sink());
    ASSERT_TRUE(s.ok());
    auto got = col.wait(10s);
    ASSERT_TRUE(got.is_error()) << name << ": the stream must end";
    EXPECT_EQ(got.error().cls, ErrorClass::transient) << name;
    EXPECT_EQ(got.error().message, std::string(name) + ": deadline: no complete response within 300 ms");
  }
}

TEST_F(BackendHostileFetch, WrongTypedListsAreMalformedAndWrongTypedLengthsIgnored) {
  for (const char* name : {"anthropic", "gemini", "ollama"}) {
    fakeprovider::Server fake(script("malformed"));
    auto b = make(name, fake);
    auto l = b->list_models();
    ASSERT_FALSE(l.ok()) << name << ": a list that is an array where an object belongs";
    EXPECT_EQ(l.error().cls, ErrorClass::client) << name;
    EXPECT_EQ(l.error().message.rfind(std::string(name) + ": malformed response: an array in place of an object", 0), 0u)
        << l.error().message;
  }
  fakeprovider::Server fake(script("malformed"));
  auto openai = make("openai", fake);
  auto l = openai->list_models();  // openai accepts a bare array: entries of the wrong type are skipped
  ASSERT_TRUE(l.ok()) << l.error().message;
  EXPECT_EQ(*l, std::vector<std::string>{"fake-model"});
  EXPECT_EQ(*openai->context_length("fake-model"), 128000) << "a length that is a string is no length";
  auto ollama = make("ollama", fake);
  EXPECT_EQ(*ollama->context_length("fake-model"), 32768) << "a length that is a string is no length";
}

TEST_F(BackendHostileFetch, TokenExpiryNoClockCanHoldIsIgnored) {
  fakeprovider::Server fake(script("malformed"));
  fake.push({{"text", "still served"}});
  auto b = make("copilot", fake);
  Collector col;
  auto s = b->stream(test::simple_request(), col.sink());
  ASSERT_TRUE(s.ok());
  auto got = col.wait();
  ASSERT_TRUE(got.end && got.end->kind == StreamEvent::Kind::done) << (got.end ? got.error().message : "no end");
  EXPECT_EQ(got.text, "still served");
}

}  // namespace
}  // namespace ollie::backend
