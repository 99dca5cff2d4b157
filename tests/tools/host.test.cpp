// The harness itself: the shipped tools directory is what toolsrv discovers.
#include <gtest/gtest.h>

#include "tools/host.hpp"

using namespace tools_test;

TEST(ToolHost, AToolOutsideTheShippedSetIsUnknown) {
  ToolHost host;
  EXPECT_NE(host.catalog().find('['), std::string::npos);
  EXPECT_THROW(host.load("no_such_tool"), std::runtime_error);
}
