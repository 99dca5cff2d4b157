#include <gtest/gtest.h>

#include "backend/cost.hpp"

namespace ollie::backend {
namespace {

TEST(BackendCost, LongestPrefixWinsAfterTheLastSlashIgnoringCase) {
  ASSERT_TRUE(price_of("anthropic/Claude-Sonnet-4-20250514"));
  EXPECT_DOUBLE_EQ(price_of("anthropic/Claude-Sonnet-4-20250514")->in, 3.00);
  EXPECT_DOUBLE_EQ(price_of("gpt-4o-mini-2024-07-18")->in, 0.15);  // not gpt-4o
  EXPECT_DOUBLE_EQ(price_of("gpt-4o-2024-08-06")->in, 2.50);
  EXPECT_DOUBLE_EQ(price_of("o1-mini")->out, 12.00);                // not o1
  EXPECT_DOUBLE_EQ(price_of("o1-preview")->out, 60.00);
  EXPECT_DOUBLE_EQ(price_of("openrouter/google/gemini-2.5-flash-lite")->in, 0.15);
  EXPECT_DOUBLE_EQ(price_of("claude-3-5-haiku-latest")->out, 4.00);
}

TEST(BackendCost, UnknownAndLocalModelsCostNothing) {
  EXPECT_FALSE(price_of("qwen3:8b"));
  Usage u;
  u.input = 1'000'000;
  u.output = 1'000'000;
  EXPECT_EQ(cost_of("llama3.1:8b", u), 0.0);
}

TEST(BackendCost, ClaudeCachedInputAtTenPercentAndCreationAt125) {
  Usage u;
  u.input = 1'000'000;
  u.output = 100'000;
  u.cached_input = 2'000'000;
  u.cache_creation = 400'000;
  // 3.00 + 0.1*15 + 2*3*0.10 + 0.4*3*1.25
  EXPECT_NEAR(cost_of("claude-sonnet-4-5", u), 3.00 + 1.50 + 0.60 + 1.50, 1e-9);
}

TEST(BackendCost, OtherModelsCachedInputAtHalf) {
  Usage u;
  u.input = 1'000'000;
  u.cached_input = 1'000'000;
  EXPECT_NEAR(cost_of("gpt-4o", u), 2.50 + 1.25, 1e-9);
}

TEST(BackendCost, ProviderReportedCostWins) {
  Usage u;
  u.input = 1'000'000;
  u.cost = 0.0123;
  EXPECT_DOUBLE_EQ(cost_of("claude-opus-4", u), 0.0123);
}

}  // namespace
}  // namespace ollie::backend
