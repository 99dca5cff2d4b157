#include <gtest/gtest.h>

#include <set>

#include "olliesrv/ids.hpp"

using namespace ollie;

TEST(Ids, UuidsAreVersion4LowercaseAndDistinct) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; i++) {
    auto u = new_uuid();
    ASSERT_EQ(u.size(), 36u);
    EXPECT_EQ(u[14], '4');
    EXPECT_TRUE(looks_like_uuid(u));
    EXPECT_EQ(u, [&] { std::string l = u; for (auto& c : l) c = std::tolower(c); return l; }());
    seen.insert(u);
  }
  EXPECT_EQ(seen.size(), 100u);
}

TEST(Ids, NamesFollowTheGrammar) {
  EXPECT_TRUE(valid_name("work"));
  EXPECT_TRUE(valid_name("a.b_c-9"));
  EXPECT_TRUE(valid_name(std::string(64, 'x')));
  EXPECT_FALSE(valid_name(std::string(65, 'x')));
  EXPECT_FALSE(valid_name(""));
  EXPECT_FALSE(valid_name("new"));
  EXPECT_FALSE(valid_name("idx"));
  EXPECT_FALSE(valid_name("-x"));
  EXPECT_FALSE(valid_name("a/b"));
  EXPECT_FALSE(valid_name("a b"));
  EXPECT_FALSE(valid_name("3f0c2b9e-8c1d-4d5e-9a51-0b9f6d0e2a77"));
}

TEST(Ids, BlockIdIsTheSha256PrefixOfTheConcatenation) {
  EXPECT_EQ(block_id("s", "a", 1), "b56752e2");  // printf sa1 | sha256sum
  EXPECT_EQ(block_id("s", "a", 1), block_id("s", "a", 1));
  EXPECT_NE(block_id("s", "a", 1), block_id("s", "a", 2));
}

TEST(Ids, SecretsAre64HexDigits) {
  auto s = new_secret();
  EXPECT_EQ(s.size(), 64u);
  EXPECT_EQ(s.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(s, new_secret());
  EXPECT_TRUE(same_secret(s, s));
  EXPECT_FALSE(same_secret(s, new_secret()));
  EXPECT_FALSE(same_secret(s, s.substr(1)));
}
