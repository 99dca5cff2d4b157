// The event bus (spec §5): patterns, filters, per-subscription buffers, overflow, split lines;
// then every topic, filter and overflow through the real socket and ollie-9p.
#include <gtest/gtest.h>

#include <algorithm>

#include "olliesrv/event.hpp"
#include "olliesrv/world.hpp"

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
  // A pattern past 256 bytes or 8 segments (topics have 3) is valid (§5.2) and matches nothing:
  // it is not kept split (4 million segments pinned hundreds of MB per fid). A bad one is named
  // cut to 64 bytes.
  for (const std::string& never : {std::string("*.*.*.*.*.*.*.*.*"), std::string(300, 'x'), std::string("agent.") + std::string(300, 'x')}) {
    auto p = Pattern::parse(never);
    ASSERT_TRUE(p) << p.ename();
    EXPECT_FALSE(p->matches("agent." + std::string(300, 'x'))) << never;
    EXPECT_FALSE(p->matches("a.b.c.d.e.f.g.h.i")) << never;
  }
  std::string huge;
  for (int i = 0; i < 1000000; i++) huge += "a.";
  EXPECT_TRUE(Pattern::parse(huge + "a"));
  EXPECT_EQ(Pattern::parse(huge + "a*").ename(), "bad pattern: " + huge.substr(0, 64) + "…");
  EXPECT_TRUE(Pattern::parse(std::string(256, 'x'))->matches(std::string(256, 'x')));
}

TEST(Bus, SubscriptionSeesOnlyLaterEvents) {
  Bus bus;
  bus.publish("session.0.new", "session/early");
  auto s = *bus.subscribe("glenda", true);
  bus.publish("session.1.new", "session/a");
  bus.publish("agent.2.state", "idle");
  bus.publish("bare.topic");
  EXPECT_EQ(s->read(4096).data, "session.1.new session/a\nagent.2.state idle\nbare.topic\n");
  EXPECT_EQ(s->read(4096).data, "");
}

// Every open event fid costs each publish a match of its filter and keeps up to 1000 events:
// an agent holds 64 at most (one holding 32,000 slowed every state change of the server to most
// of a second); the hostowner is not counted.
TEST(Bus, AnAgentHoldsSixtyFourSubscriptionsAtMost) {
  Bus bus;
  std::vector<std::shared_ptr<ollie::Subscription>> held;
  for (std::size_t i = 0; i < Bus::MAX_PER_PRINCIPAL; i++) {
    auto s = bus.subscribe("agent-a", false);
    ASSERT_TRUE(s) << i << ": " << s.ename();
    held.push_back(*s);
  }
  EXPECT_EQ(bus.subscribe("agent-a", false).ename(), "too many event fids (limit 64)");
  EXPECT_TRUE(bus.subscribe("agent-b", false));  // another principal has its own
  held.pop_back();                                // a clunked fid gives its place back
  EXPECT_TRUE(bus.subscribe("agent-a", false));
  std::vector<std::shared_ptr<ollie::Subscription>> hers;
  for (int i = 0; i < 100; i++) hers.push_back(*bus.subscribe("glenda", true));
}

TEST(Bus, FilterAppliesToWhatIsBufferedAndWhatComes) {
  Bus bus;
  auto s = *bus.subscribe("glenda", true);
  bus.publish("session.1.new", "session/a");
  bus.publish("agent.2.state", "idle");
  ASSERT_TRUE(s->request("agent.*.state\nsession.9.*"));
  bus.publish("agent.3.state", "thinking");
  bus.publish("session.9.kill", "session/z");
  bus.publish("session.1.kill", "session/a");
  EXPECT_EQ(s->read(4096).data, "agent.2.state idle\nagent.3.state thinking\nsession.9.kill session/z\n");
}

// A filter written in pieces (a line per write, or a pattern cut by a write) selects what the whole
// selects, from the open on: the events before the first write and between the writes included.
TEST(Bus, AFilterWrittenInPiecesSelectsWhatTheWholeSelects) {
  Bus bus;
  auto s = *bus.subscribe("glenda", true);
  bus.publish("agent.1.new", "session/s/agent/a");
  ASSERT_TRUE(s->request("session.*\n"));
  bus.publish("agent.2.new", "session/s/agent/b");
  ASSERT_TRUE(s->request("session.*\nagent.*\n"));
  bus.publish("other.3.x");
  EXPECT_EQ(s->read(4096).data, "agent.1.new session/s/agent/a\nagent.2.new session/s/agent/b\n");
  auto t = *bus.subscribe("glenda", true);
  bus.publish("session.4.new", "session/x");
  ASSERT_TRUE(t->request("sess"));
  bus.publish("session.5.new", "session/y");
  ASSERT_TRUE(t->request("session.*"));
  EXPECT_EQ(t->read(4096).data, "session.4.new session/x\nsession.5.new session/y\n");
}

TEST(Bus, BadFilterIsRefused) {
  Bus bus;
  auto s = *bus.subscribe("glenda", true);
  EXPECT_EQ(s->request("ok.* bad*").ename(), "bad pattern: bad*");
  std::string many;
  for (std::size_t i = 0; i <= ollie::Subscription::MAX_PATTERNS; i++) many += "t." + std::to_string(i) + " ";
  EXPECT_EQ(s->request(many).ename(), "too many patterns (limit 256)");
  EXPECT_EQ(s->request(std::string(64 * 1024 + 1, ' ')).ename(), "filter too long (limit 64 KiB)");
}

TEST(Bus, ReadsReturnWholeLinesThatFitAndSplitOnlyLongOnes) {
  Bus bus;
  auto s = *bus.subscribe("glenda", true);
  bus.publish("a.1.x", "12345");  // 12 bytes with its newline
  bus.publish("b.2.y", "67890");
  EXPECT_EQ(s->read(20).data, "a.1.x 12345\n");
  EXPECT_EQ(s->read(5).data, "b.2.y");
  EXPECT_EQ(s->read(5).data, " 6789");
  EXPECT_EQ(s->read(100).data, "0\n");
  // The rest of a split line, then whole lines in the room left (§5.3).
  bus.publish("c.3.z", "abcde");
  bus.publish("d.4.w", "fghij");
  EXPECT_EQ(s->read(3).data, "c.3");
  EXPECT_EQ(s->read(100).data, ".z abcde\nd.4.w fghij\n");
}

TEST(Bus, OverflowDropsTheOldestAndSaysHowMany) {
  Bus bus;
  auto s = *bus.subscribe("glenda", true);
  ASSERT_TRUE(s->request("keep.*"));
  for (int i = 0; i < 1005; i++) bus.publish("keep." + std::to_string(i) + ".x");
  auto first = s->read(64).data;
  EXPECT_EQ(first.substr(0, first.find('\n') + 1), "event.overflow 5\n");  // whatever the filter
  EXPECT_NE(first.find("keep.5.x\n"), std::string::npos);
}

// An overflow while a line is half read: the line is finished first, then the overflow line says
// exactly how many were dropped, and the buffer stays within its bound.
TEST(Bus, AnOverflowDuringASplitLineFollowsThatLineWithItsCount) {
  Bus bus;
  auto s = *bus.subscribe("glenda", true);
  bus.publish("long.1.x", std::string(100, 'p'));
  EXPECT_EQ(s->read(10).data, "long.1.x p");
  for (int i = 0; i < 1003; i++) bus.publish("t." + std::to_string(i) + ".x");  // 3 dropped
  EXPECT_EQ(s->read(100).data, std::string(99, 'p') + "\n");  // no room left for the overflow line
  bus.publish("t.late.x");  // the buffer is full: one more dropped, counted
  auto next = s->read(64).data;
  EXPECT_EQ(next.substr(0, next.find('\n') + 1), "event.overflow 4\n") << next;
  std::string all = next + s->read(1 << 20).data;
  EXPECT_EQ(std::count(all.begin(), all.end(), '\n'), 1001) << "the overflow line and the 1000 kept";
  EXPECT_NE(all.find("t.late.x\n"), std::string::npos);
}

TEST(Bus, SlowReaderNeverSlowsThePublisherOrOtherReaders) {
  Bus bus;
  auto slow = *bus.subscribe("glenda", true);
  auto fast = *bus.subscribe("glenda", true);
  for (int i = 0; i < 5000; i++) {
    bus.publish("t." + std::to_string(i) + ".x");
    if (i % 100 == 0) (void)fast->read(1 << 20);
  }
  auto rest = fast->read(1 << 20).data;
  EXPECT_EQ(rest.find("event.overflow"), std::string::npos);
  EXPECT_EQ(slow->read(64).data.substr(0, 20), "event.overflow 4000\n");
}

// ---- through the real socket (spec §5.1-§5.3) ---------------------------------------------------

namespace {

using convo::World;

/// Reads whole lines from an event fid until `n` lines arrived.
std::vector<std::string> next_lines(p9::CFid& f, std::size_t n, std::string& pending) {
  std::vector<std::string> out;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (out.size() < n && std::chrono::steady_clock::now() < end) {
    auto nl = pending.find('\n');
    if (nl != std::string::npos) {
      out.push_back(pending.substr(0, nl));
      pending.erase(0, nl + 1);
      continue;
    }
    auto r = f.read(8192);
    if (!r || r->empty()) break;
    pending += *r;
  }
  return out;
}

}  // namespace

TEST(EventBus, EveryTopicWithItsPayload) {
  World w;
  auto ev = w.open("event");
  std::string pending;
  auto s = w.session("work");
  const std::string sid = id_of(w, s);
  EXPECT_EQ(next_lines(ev, 1, pending), std::vector<std::string>{"session." + sid + ".new session/work"});
  auto a = w.agent(s, "main");
  const std::string aid = id_of(w, a);
  EXPECT_EQ(next_lines(ev, 1, pending), std::vector<std::string>{"agent." + aid + ".new session/work/agent/main"});
  w.fake.push({{"text", "hello"}});
  ASSERT_TRUE(w.write(a + "/prompt", "hi"));
  auto states = next_lines(ev, 2, pending);
  EXPECT_EQ(states, (std::vector<std::string>{"agent." + aid + ".state thinking", "agent." + aid + ".state idle"}));
  ASSERT_TRUE(w.write(a + "/name", "lead"));
  EXPECT_EQ(next_lines(ev, 1, pending),
            std::vector<std::string>{"agent." + aid + ".rename session/work/agent/main session/work/agent/lead"});
  EXPECT_EQ(*w.rdwr(s + "/agent/lead/ctl", "name boss"), "boss\n");
  EXPECT_EQ(next_lines(ev, 1, pending),
            std::vector<std::string>{"agent." + aid + ".rename session/work/agent/lead session/work/agent/boss"});
  auto b = w.agent(s, "other");
  const std::string bid = id_of(w, b);
  EXPECT_EQ(next_lines(ev, 1, pending), std::vector<std::string>{"agent." + bid + ".new session/work/agent/other"});
  EXPECT_EQ(*w.rdwr(b + "/ctl", "kill"), "killed\n");
  EXPECT_EQ(next_lines(ev, 1, pending), std::vector<std::string>{"agent." + bid + ".kill session/work/agent/other"});
  ASSERT_TRUE(w.write(s + "/name", "play"));
  // Renaming a session publishes only its own rename.
  EXPECT_EQ(next_lines(ev, 1, pending), std::vector<std::string>{"session." + sid + ".rename session/work session/play"});
  EXPECT_EQ(*w.rdwr("session/play/ctl", "kill"), "killed\n");
  EXPECT_EQ(next_lines(ev, 2, pending), (std::vector<std::string>{"agent." + aid + ".kill session/play/agent/boss",
                                                                  "session." + sid + ".kill session/play"}));
}

// An agent killed mid-turn: its kill is the last event about it, not followed by the `idle` its
// unwinding turn reaches.
TEST(EventBus, NothingOfAKilledAgentFollowsItsKill) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  const std::string aid = id_of(w, a);
  auto f = w.walk("event");
  ASSERT_TRUE(f && f->open(p9::ORDWR));
  ASSERT_TRUE(f->write("agent." + aid + ".* session.*.new"));
  w.fake.push({{"text", std::string(400, 'x')}, {"delay_ms", 50}, {"chunk", 4}});
  ASSERT_TRUE(w.write(a + "/prompt", "hi"));
  std::string pending;
  EXPECT_EQ(next_lines(*f, 1, pending), std::vector<std::string>{"agent." + aid + ".state thinking"});
  EXPECT_EQ(*w.rdwr(a + "/ctl", "kill"), "killed\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the turn has unwound
  auto later = w.session("later");
  EXPECT_EQ(next_lines(*f, 2, pending),
            (std::vector<std::string>{"agent." + aid + ".kill session/work/agent/main", "session." + id_of(w, later) + ".new session/later"}));
}

TEST(EventBus, FiltersSelectTopicsAndOverflowIsAlwaysDelivered) {
  World w;
  auto s = w.session("work");
  // Patterns before the first read, blanks or newlines between them.
  auto f = w.walk("event");
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->open(p9::ORDWR));
  ASSERT_TRUE(f->write("agent.*.new\n session.*.kill"));
  auto a = w.agent(s, "main");
  const std::string aid = id_of(w, a);
  ASSERT_TRUE(w.write(s + "/name", "play"));  // not selected
  auto other = w.session("other");
  const std::string oid = id_of(w, other);
  EXPECT_EQ(*w.rdwr(other + "/ctl", "kill"), "killed\n");
  std::string pending;
  // Paths are the names at the moment of the event: the agent was made before the rename.
  EXPECT_EQ(next_lines(*f, 2, pending), (std::vector<std::string>{"agent." + aid + ".new session/work/agent/main",
                                                                  "session." + oid + ".kill session/other"}));
  // After the first read the filter is fixed.
  EXPECT_EQ(f->write("*").ename(), "filter already set");

  // A last `*` matches one or more segments: everything about one agent.
  auto g = w.walk("event");
  ASSERT_TRUE(g && g->open(p9::ORDWR));
  ASSERT_TRUE(g->write("agent." + aid + ".*"));
  ASSERT_TRUE(w.write("session/play/agent/main/name", "lead"));
  ASSERT_TRUE(w.agent("session/play", "unrelated").size());
  EXPECT_EQ(*w.rdwr("session/play/agent/lead/ctl", "kill"), "killed\n");
  std::string gp;
  EXPECT_EQ(next_lines(*g, 2, gp),
            (std::vector<std::string>{"agent." + aid + ".rename session/play/agent/main session/play/agent/lead",
                                      "agent." + aid + ".kill session/play/agent/lead"}));

  // 1000 undelivered events per fid: the oldest are dropped and counted, whatever the filter.
  auto h = w.walk("event");
  ASSERT_TRUE(h && h->open(p9::ORDWR));
  ASSERT_TRUE(h->write("session.*.rename"));
  for (int i = 0; i < 1005; i++) ASSERT_TRUE(w.write("session/" + std::string(i % 2 ? "b" : "play") + "/name", i % 2 ? "play" : "b"));
  std::string hp;
  auto first = next_lines(*h, 2, hp);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0], "event.overflow 5");
  EXPECT_EQ(first[1], "session." + id_of(w, "session/b") + ".rename session/b session/play");  // the 6th
}

// A filter takes effect as it is written: the events published before the first read that it
// does not select never fill the fid's buffer (1001 renames pushed out the one event asked for,
// and the read began with a false overflow).
TEST(EventBus, AFilterWrittenBeforeTheFirstReadSelectsFromTheStart) {
  World w;
  auto s = w.session("work");
  ASSERT_FALSE(w.agent(s, "a").empty());
  auto f = w.walk("event");
  ASSERT_TRUE(f && f->open(p9::ORDWR));
  ASSERT_TRUE(f->write("session.*.new"));
  auto fresh = w.session("fresh");
  for (int i = 0; i < 1001; i++) ASSERT_TRUE(w.write(s + "/agent/" + (i % 2 ? "b" : "a") + "/name", i % 2 ? "a" : "b"));
  std::string pending;
  EXPECT_EQ(next_lines(*f, 1, pending), (std::vector<std::string>{"session." + id_of(w, fresh) + ".new session/fresh"}));
}

// Through the socket, as a shell on a v9fs mount writes a filter a line at a time: the agent
// made before the second line still reaches the reader (the first line's filter dropped it).
TEST(EventBus, AFilterWrittenALineAtATimeKeepsWhatItsLastLineSelects) {
  World w;
  auto s = w.session("work");
  auto f = w.walk("event");
  ASSERT_TRUE(f && f->open(p9::ORDWR));
  const auto a = w.agent(s, "a");
  ASSERT_FALSE(a.empty());
  ASSERT_TRUE(f->write("session.*\n"));
  ASSERT_TRUE(f->write("agent.*.new\n"));
  std::string pending;
  EXPECT_EQ(next_lines(*f, 1, pending), (std::vector<std::string>{"agent." + id_of(w, a) + ".new " + a}));
}

TEST(EventBus, BadPatternIsTheErrorOfTheFirstRead) {
  World w;
  int made = 0;
  for (const std::string bad : {"a*", "agent..state", ".agent", "agent.", "*x.y"}) {
    auto f = w.walk("event");
    ASSERT_TRUE(f && f->open(p9::ORDWR));
    ASSERT_TRUE(f->write("session.* " + bad));
    EXPECT_EQ(f->read(100).ename(), "bad pattern: " + bad);
    // Not the stream unfiltered after it: every read of that fid says so.
    w.session("s" + std::to_string(made++));
    EXPECT_EQ(f->read(100).ename(), "bad pattern: " + bad);
  }
  // ollie-9p rdwr writes the filter, then reads: the error is printed, exit 1.
  auto r = testing_support::run({testing_support::built("bin/ollie-9p"), "-a", "unix!" + w.sock, "rdwr", "event"}, "ok.* a*b\n");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("bad pattern: a*b"), std::string::npos) << r.err;
}

TEST(EventBus, OllieRdwrFiltersAndReadStreamsEverything) {
  World w;
  auto s = w.session("work");
  const std::string sid = id_of(w, s);
  testing_support::Child filtered({testing_support::built("bin/ollie-9p"), "-a", "unix!" + w.sock, "rdwr", "event"});
  filtered.write_stdin("session.*.rename\n");
  filtered.close_stdin();
  testing_support::Child all({testing_support::built("bin/ollie-9p"), "-a", "unix!" + w.sock, "read", "event"});
  // Renames until both have subscribed (a subscription starts at open).
  std::string name = "work";
  int n = 0;
  auto rename = [&] {
    const std::string next = "n" + std::to_string(++n);
    EXPECT_TRUE(w.write("session/" + name + "/name", next));
    const std::string line = "session." + sid + ".rename session/" + name + " session/" + next + "\n";
    name = next;
    return line;
  };
  ASSERT_TRUE(convo::eventually([&] {
    rename();
    return filtered.read_until(".rename ", 100).find(".rename ") != std::string::npos &&
           all.read_until(".rename ", 100).find(".rename ") != std::string::npos;
  }));
  auto a = w.agent("session/" + name, "main");
  const std::string made = "agent." + id_of(w, a) + ".new session/" + name + "/agent/main\n";
  EXPECT_NE(all.read_until(made).find(made), std::string::npos);
  const std::string last = rename();  // published after the agent's creation
  EXPECT_NE(filtered.read_until(last).find(last), std::string::npos);
  EXPECT_EQ(filtered.read_until(last).find(made), std::string::npos);
  EXPECT_NE(all.read_until(last).find(last), std::string::npos);
}
