#include <gtest/gtest.h>

#include "virtfs/tokenize.hpp"

using virtfs::tokenize;

TEST(Tokenize, BlanksSeparateAndQuotesJoin) {
  auto t = tokenize("  cwd='/home/me/my project'\tname=x\n");
  ASSERT_TRUE(t);
  EXPECT_EQ(*t, (std::vector<std::string>{"cwd=/home/me/my project", "name=x"}));
  EXPECT_EQ(*tokenize("'it''s' a''b"), (std::vector<std::string>{"it's", "ab"}));
  EXPECT_EQ(*tokenize("''"), (std::vector<std::string>{""}));
  EXPECT_EQ(*tokenize("  a\tb\r\nc "), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(*tokenize("x'y z'w"), (std::vector<std::string>{"xy zw"}));
}

TEST(Tokenize, UnterminatedQuote) { EXPECT_EQ(tokenize("a 'b").ename(), "unterminated quote"); }
