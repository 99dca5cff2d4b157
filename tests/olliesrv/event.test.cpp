// The event bus (spec §5): patterns, filters, per-subscription buffers, overflow, split lines.
#include <gtest/gtest.h>

#include "olliesrv/event.hpp"

using ollie::Bus;
using ollie::Pattern;

namespace {
bool match(const std::string& pat, const std::string& topic) { return Pattern::parse(pat)->matches(topic); }
}  // namespace

TEST(Pattern, SegmentsAndWildcards) {
  EXPECT_TRUE(match("*", "session.1.new"));
  EXPECT_TRUE(match("session.*", "session.1.new"));
  EXPECT_FALSE(match("session.*", "agent.1.new"));
  EXPECT_TRUE(match("agent.*.state", "agent.42.state"));
  EXPECT_FALSE(match("agent.*.state", "agent.42.kill"));
  EXPECT_FALSE(match("agent.*.state", "agent.42.state.x"));
  EXPECT_TRUE(match("agent.42.*", "agent.42.state"));
  EXPECT_FALSE(match("agent.42.*", "agent.42"));
  EXPECT_TRUE(match("session.1.new", "session.1.new"));
  EXPECT_FALSE(match("session.1", "session.1.new"));
}

TEST(Pattern, BadPatterns) {
  EXPECT_EQ(Pattern::parse("a..b").ename(), "bad pattern: a..b");
  EXPECT_EQ(Pattern::parse("a*").ename(), "bad pattern: a*");
  EXPECT_EQ(Pattern::parse(".a").ename(), "bad pattern: .a");
  EXPECT_EQ(Pattern::parse("a.").ename(), "bad pattern: a.");
}

TEST(Bus, SubscriptionSeesOnlyLaterEvents) {
  Bus bus;
  bus.publish("session.0.new", "session/early");
  auto s = bus.subscribe();
  bus.publish("session.1.new", "session/a");
  bus.publish("agent.2.state", "idle");
  bus.publish("bare.topic");
  EXPECT_EQ(s->read(4096).data, "session.1.new session/a\nagent.2.state idle\nbare.topic\n");
  EXPECT_EQ(s->read(4096).data, "");
}

TEST(Bus, FilterAppliesToWhatIsBufferedAndWhatComes) {
  Bus bus;
  auto s = bus.subscribe();
  bus.publish("session.1.new", "session/a");
  bus.publish("agent.2.state", "idle");
  ASSERT_TRUE(s->request("agent.*.state\nsession.9.*"));
  bus.publish("agent.3.state", "thinking");
  bus.publish("session.9.kill", "session/z");
  bus.publish("session.1.kill", "session/a");
  EXPECT_EQ(s->read(4096).data, "agent.2.state idle\nagent.3.state thinking\nsession.9.kill session/z\n");
}

TEST(Bus, BadFilterIsRefused) {
  Bus bus;
  auto s = bus.subscribe();
  EXPECT_EQ(s->request("ok.* bad*").ename(), "bad pattern: bad*");
}

TEST(Bus, ReadsReturnWholeLinesThatFitAndSplitOnlyLongOnes) {
  Bus bus;
  auto s = bus.subscribe();
  bus.publish("a.1.x", "12345");  // 12 bytes with its newline
  bus.publish("b.2.y", "67890");
  EXPECT_EQ(s->read(20).data, "a.1.x 12345\n");
  EXPECT_EQ(s->read(5).data, "b.2.y");
  EXPECT_EQ(s->read(5).data, " 6789");
  EXPECT_EQ(s->read(100).data, "0\n");
}

TEST(Bus, OverflowDropsTheOldestAndSaysHowMany) {
  Bus bus;
  auto s = bus.subscribe();
  ASSERT_TRUE(s->request("keep.*"));
  for (int i = 0; i < 1005; i++) bus.publish("keep." + std::to_string(i) + ".x");
  auto first = s->read(64).data;
  EXPECT_EQ(first.substr(0, first.find('\n') + 1), "event.overflow 5\n");  // whatever the filter
  EXPECT_NE(first.find("keep.5.x\n"), std::string::npos);
}

TEST(Bus, SlowReaderNeverSlowsThePublisherOrOtherReaders) {
  Bus bus;
  auto slow = bus.subscribe();
  auto fast = bus.subscribe();
  for (int i = 0; i < 5000; i++) {
    bus.publish("t." + std::to_string(i) + ".x");
    if (i % 100 == 0) (void)fast->read(1 << 20);
  }
  auto rest = fast->read(1 << 20).data;
  EXPECT_EQ(rest.find("event.overflow"), std::string::npos);
  EXPECT_EQ(slow->read(64).data.substr(0, 20), "event.overflow 4000\n");
}
