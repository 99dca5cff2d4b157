#include <gtest/gtest.h>

#include "backend/text.hpp"

namespace ollie::backend {
namespace {

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
