// The head-and-tail cap of one output stream.

#include <gtest/gtest.h>

#include "toolsrv/capture.hpp"

namespace toolsrv {
namespace {

TEST(Capture, KeepsEverythingUpToHeadPlusTail) {
  Capture c(4, 3);
  c.append("abcd");
  c.append("efg");
  EXPECT_EQ(c.render(), "abcdefg");
  EXPECT_EQ(c.rendered_size(), 7u);
}

TEST(Capture, KeepsHeadAndTailWithOmissionLine) {
  Capture c(4, 3);
  for (char ch = 'a'; ch <= 'z'; ++ch) c.append(std::string(1, ch));
  EXPECT_EQ(c.render(), "abcd\n[\u2026 19 bytes omitted \u2026]\nxyz");
  EXPECT_EQ(c.rendered_size(), c.render().size());
  EXPECT_EQ(c.total(), 26u);
  EXPECT_EQ(c.head(), "abcd");
}

TEST(Capture, LargeAppendKeepsItsTail) {
  Capture c(2, 3);
  c.append("0123456789");
  EXPECT_EQ(c.render(), "01\n[\u2026 5 bytes omitted \u2026]\n789");
}

TEST(Capture, ReleaseGivesBackTheMemory) {
  Capture c;
  c.append(std::string(1 << 20, 'x'));
  EXPECT_GE(c.held(), 1u << 20);
  c.release();
  EXPECT_LT(c.held(), 64u);
  EXPECT_EQ(c.render(), "");
  c.append("again");
  EXPECT_EQ(c.render(), "again");
}

}  // namespace
}  // namespace toolsrv
