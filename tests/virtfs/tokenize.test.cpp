#include <gtest/gtest.h>

#include "virtfs/tokenize.hpp"

using virtfs::parse_command;
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

TEST(Command, OneVerbPerRequest) {
  auto c = parse_command("  kill  \n");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->verb, "kill");
  EXPECT_TRUE(c->args.empty());
  EXPECT_EQ(parse_command("kill\nkill\n").ename(), "one command per request");
  EXPECT_EQ(parse_command(" \n").ename(), "empty command");
  EXPECT_EQ(parse_command("model 'a b'")->args, (std::vector<std::string>{"a b"}));
}
