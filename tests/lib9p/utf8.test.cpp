// The one UTF-8 repair of every layer: Rerror texts, provider requests, tool results.
#include <gtest/gtest.h>

#include <string>

#include "lib9p/utf8.hpp"

using p9::valid_utf8;

namespace {

const std::string fffd = "\xEF\xBF\xBD";

TEST(Utf8, WellFormedTextPassesUnchanged) {
  const std::string s = "plain, \xC3\xA9t\xC3\xA9, \xE2\x82\xAC, \xF0\x9F\x98\x80, \xF4\x8F\xBF\xBF";
  EXPECT_EQ(valid_utf8(s), s);
  EXPECT_EQ(valid_utf8(""), "");
}

TEST(Utf8, EachMaximalInvalidSubpartIsOneReplacement) {
  // Unicode's examples (chapter 3, "U+FFFD substitution of maximal subparts").
  EXPECT_EQ(valid_utf8("a\x80" "b"), "a" + fffd + "b");
  EXPECT_EQ(valid_utf8("\xC0\xAF"), fffd + fffd);                    // overlong lead: each byte
  EXPECT_EQ(valid_utf8("\xE0\x80\xAF"), fffd + fffd + fffd);         // E0 needs A0..BF
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), fffd + fffd + fffd);         // surrogate
  EXPECT_EQ(valid_utf8("\xF4\x90\x80\x80"), fffd + fffd + fffd + fffd);  // above U+10FFFF
  EXPECT_EQ(valid_utf8("\xF5"), fffd);
  EXPECT_EQ(valid_utf8("\xE2\x82" "x"), fffd + "x");                 // truncated: one U+FFFD
  EXPECT_EQ(valid_utf8("\xF0\x9F\x98"), fffd);                       // truncated at the end
  EXPECT_EQ(valid_utf8("\xF0\x9F\x98\xE2\x82\xAC"), fffd + "\xE2\x82\xAC");
  EXPECT_EQ(valid_utf8("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a" + fffd + fffd + fffd + "b" + fffd + "c" + fffd + fffd + "d");
}

}  // namespace
