// Text from outside (tool output cut by a byte cap, a user's paste) may hold invalid UTF-8.
// Every provider's request still serialises, with U+FFFD in place of the broken sequence, and
// so does every later request of the same history.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "harness.hpp"
#include "server.hpp"

namespace ollie::backend {
namespace {

using nlohmann::json;
using test::Collector;

const std::string replacement = "\xEF\xBF\xBD";

class BackendUtf8 : public ::testing::TestWithParam<std::string> {
 protected:
  fakeprovider::Server fake;
  HttpEngine engine;
};

ChatRequest history_with_cut_characters() {
  auto r = test::simple_request("caf\xC3");  // é cut after its first byte
  r.system = "You are a test \xF0\x9F\x99";  // 🙂 cut after three of its four bytes
  r.tools[0].description = "Read a file \xE2\x82";
  r.messages.push_back(Message{Role::assistant, "calling \xC3", {{"c1", "read", R"({"path":"a"})"}}});
  r.messages.push_back(Message{Role::tool, "tool output cut by the cap: caf\xC3", {}, "c1"});
  r.messages.push_back(Message{Role::user, "and a stray byte \x80 too"});
  return r;
}

TEST_P(BackendUtf8, CutCharactersAreReplacedInEveryRequestOfTheHistory) {
  auto b = make_backend(test::fake_settings(GetParam(), fake.url()), engine);
  ASSERT_TRUE(b.ok());
  const auto req = history_with_cut_characters();
  for (int round = 0; round < 2; ++round) {
    fake.push({{"text", "fine"}});
    Collector col;
    auto s = (*b)->stream(req, col.sink());
    ASSERT_TRUE(s.ok()) << s.error().message;
    auto got = col.wait();
    ASSERT_TRUE(got.end && got.end->kind == StreamEvent::Kind::done) << (got.end ? got.error().message : "no end");
    const auto body = fake.requests().back().body;
    // nlohmann's parser rejects invalid UTF-8 in strings: a body it accepts is valid UTF-8.
    const auto j = json::parse(body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "round " << round << ": the request is not valid JSON in UTF-8";
    EXPECT_NE(body.find("caf" + replacement), std::string::npos) << "round " << round;
    EXPECT_NE(body.find("stray byte " + replacement + " too"), std::string::npos) << "round " << round;
  }
}

INSTANTIATE_TEST_SUITE_P(All, BackendUtf8,
                         ::testing::Values("ollama", "openai", "openrouter", "anthropic", "gemini", "copilot", "kiro"),
                         [](const auto& info) {
                           std::string n = info.param;
                           n[0] = static_cast<char>(std::toupper(n[0]));
                           return n;
                         });

}  // namespace
}  // namespace ollie::backend
