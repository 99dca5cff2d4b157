#include <gtest/gtest.h>

#include "backend/text.hpp"

namespace ollie::backend {
namespace {

TEST(BackendText, InvalidUtf8BecomesReplacementCharacters) {
  EXPECT_EQ(valid_utf8("caf\xC3\xA9"), "caf\xC3\xA9");
  EXPECT_EQ(valid_utf8("caf\xC3"), "caf\xEF\xBF\xBD");
  EXPECT_EQ(valid_utf8("a\x80" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD") << "no surrogates";
  EXPECT_EQ(valid_utf8("\xF0\x9F\x99"), "\xEF\xBF\xBD");
}

TEST(BackendText, ClipNeverSplitsACharacter) {
  EXPECT_EQ(clip("short", 10), "short");
  EXPECT_EQ(clip("\xC3\xA9\xC3\xA9\xC3\xA9", 5), "\xC3\xA9...");  // é is two bytes
  EXPECT_EQ(clip("\xC3\xA9\xC3\xA9\xC3\xA9", 6), "\xC3\xA9\xC3\xA9\xC3\xA9");
  EXPECT_LE(clip(std::string(10000, 'x'), 2048).size(), 2048u);
}

TEST(BackendText, ByteSizesReadAsPeopleSayThem) {
  EXPECT_EQ(byte_size(8u << 20), "8 MiB");
  EXPECT_EQ(byte_size(2048), "2 KiB");
  EXPECT_EQ(byte_size(500), "500 bytes");
}

}  // namespace
}  // namespace ollie::backend
