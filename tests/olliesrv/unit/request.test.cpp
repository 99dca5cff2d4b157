#include <gtest/gtest.h>

#include "olliesrv/request.hpp"

using namespace ollie;

namespace {
const std::initializer_list<std::string_view> kSession{"cwd", "name", "remote", "backend", "model"};
const std::initializer_list<std::string_view> kAgent{"name", "cwd", "agent", "backend", "model", "parent", "timeout"};
}  // namespace

TEST(Request, QuotedValueIsOneToken) {
  auto r = parse_request("cwd='/home/me/my project' name=work", kSession);
  ASSERT_TRUE(r) << r.ename();
  EXPECT_EQ(r->get("cwd"), "/home/me/my project");
  EXPECT_EQ(r->get("name"), "work");
  EXPECT_FALSE(r->has("model"));
  EXPECT_FALSE(r->prompt);
}

TEST(Request, DoubledQuoteInsideQuotesIsOneQuote) {
  auto r = parse_request("name='it''s' cwd=/a'b c'd", kSession);
  ASSERT_TRUE(r) << r.ename();
  EXPECT_EQ(r->get("name"), "it's");
  EXPECT_EQ(r->get("cwd"), "/ab cd");
}

TEST(Request, UnterminatedQuote) {
  auto r = parse_request("cwd='/home/me name=x", kSession);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.ename(), "unterminated quote");
}

TEST(Request, Errors) {
  EXPECT_EQ(parse_request("cwd=/a bogus", kSession).ename(), "bad token: bogus");
  EXPECT_EQ(parse_request("=x", kSession).ename(), "unknown key: ");  // §1.3: split at the first `=`
  EXPECT_EQ(parse_request("color=red", kSession).ename(), "unknown key: color");
  EXPECT_EQ(parse_request("name=a name=b", kSession).ename(), "duplicate key: name");
  // prompt= is only special where the caller says so.
  EXPECT_EQ(parse_request("cwd=/a prompt=hi", kSession).ename(), "unknown key: prompt");
}

TEST(Request, EmptyValueIsGivenAndEmpty) {
  auto r = parse_request("model= name=''", kSession);
  ASSERT_TRUE(r) << r.ename();
  EXPECT_TRUE(r->has("model"));
  EXPECT_EQ(r->get("model"), "");
  EXPECT_TRUE(r->has("name"));
  EXPECT_EQ(r->get("name"), "");
  auto empty = parse_request(" \n\t", kSession);
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->values.empty());
}

TEST(Request, OneLineOrSeveralIsTheSameRequest) {
  auto a = parse_request("cwd=/src name=w backend=ollama", kSession);
  auto b = parse_request("cwd=/src\nname=w\r\nbackend=ollama\n", kSession);
  ASSERT_TRUE(a);
  ASSERT_TRUE(b);
  EXPECT_EQ(a->values, b->values);
}

TEST(Request, PromptTakesTheRawRemainder) {
  auto r = parse_request("name=helper\nprompt=Fix 'this' bug.\n  Then  run\tthe tests\n", kAgent, true);
  ASSERT_TRUE(r) << r.ename();
  EXPECT_EQ(r->get("name"), "helper");
  ASSERT_TRUE(r->prompt);
  EXPECT_EQ(*r->prompt, "Fix 'this' bug.\n  Then  run\tthe tests");
  EXPECT_FALSE(r->has("prompt"));
}

TEST(Request, PromptRemovesExactlyOneTrailingNewline) {
  auto r = parse_request("prompt=a\n\n", kAgent, true);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r->prompt, "a\n");
  auto e = parse_request("prompt=", kAgent, true);
  ASSERT_TRUE(e);
  ASSERT_TRUE(e->prompt);
  EXPECT_EQ(*e->prompt, "");
}

TEST(Request, PromptKeepsWhatLooksLikeKeysAndUnbalancedQuotes) {
  auto r = parse_request("prompt=name=x it's cwd='", kAgent, true);
  ASSERT_TRUE(r) << r.ename();
  EXPECT_EQ(*r->prompt, "name=x it's cwd='");
  EXPECT_TRUE(r->values.empty());
}

TEST(Request, PromptInsideQuotesIsAnOrdinaryToken) {
  // prompt= inside a quoted segment does not start the remainder...
  auto r = parse_request("name='x prompt=y' timeout=5", kAgent, true);
  ASSERT_TRUE(r) << r.ename();
  EXPECT_EQ(r->get("name"), "x prompt=y");
  EXPECT_EQ(r->get("timeout"), "5");
  EXPECT_FALSE(r->prompt);
  // ...nor does a token that is quoted from its start: it is a key=value token like any other,
  // the prompt its value alone.
  auto q = parse_request("'prompt=a b' name=x", kAgent, true);
  ASSERT_TRUE(q) << q.ename();
  EXPECT_EQ(q->prompt, "a b");
  EXPECT_EQ(q->get("name"), "x");
  EXPECT_EQ(parse_request("'prompt=a' prompt=b", kAgent, true).ename(), "duplicate key: prompt");
  EXPECT_EQ(parse_request("'prompt=a' 'prompt=b'", kAgent, true).ename(), "duplicate key: prompt");
}

TEST(Request, PromptAfterAnUnterminatedQuoteIsNotReached) {
  EXPECT_EQ(parse_request("name='x prompt=y", kAgent, true).ename(), "unterminated quote");
}
