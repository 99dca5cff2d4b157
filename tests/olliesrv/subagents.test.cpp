// Sub-agents in a real conversation (spec §4.2, §8.10) with the bounds of doc/engine.md, and the
// goal workflow (§8.13): the parent calls the shipped subagent_spawn, which calls back through
// ollie-9p; the fake provider answers each agent its own (`when`), whatever order they ask in.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <future>
#include <thread>

#include "olliesrv/world.hpp"

using namespace convo;
using json = nlohmann::json;

namespace {

json spawn(const std::string& id, const std::string& prompt) {
  return {{"id", id}, {"name", "subagent_spawn"}, {"arguments", {{"prompt", prompt}}}};
}

json usage(int input, int output, double cost) { return {{"input", input}, {"output", output}, {"cost", cost}}; }

/// `key=value` of a stats text, as a number.
double stat(const std::string& stats, const std::string& key) {
  const auto at = stats.find(key + "=");
  return at == std::string::npos ? -1 : std::stod(stats.substr(at + key.size() + 1));
}

/// The sub-agents (group `subagent`) listed in agent/idx now: rows whose parent column is set.
int listed_subagents(World& w, const std::string& session, const std::string& parent_id) {
  auto idx = w.read(session + "/agent/idx");
  if (!idx) return 0;
  int n = 0;
  for (std::size_t pos = 0, nl; (nl = idx->find('\n', pos)) != std::string::npos; pos = nl + 1) {
    const std::string row = idx->substr(pos, nl - pos);
    if (row.size() >= parent_id.size() && row.compare(row.size() - parent_id.size(), parent_id.size(), parent_id) == 0) n++;
  }
  return n;
}

}  // namespace

TEST(Subagents, ParallelOnesEachCallToolsrvAndTheParentsStatsIncludeTheirCost) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  ASSERT_TRUE(w.rdwr(a + "/ctl", "tool_load subagent_spawn"));
  w.fake.push({{"when", "orchestrate"},
               {"tool_calls", json::array({spawn("p1", "task-1"), spawn("p2", "task-2"), spawn("p3", "task-3")})},
               {"usage", usage(100, 10, 0.25)}});
  for (int i = 1; i <= 3; i++) {
    const std::string n = std::to_string(i);
    // Its first request has its task; its second, its own shell output too.
    w.fake.push({{"when", "done-" + n},
                 {"text", "reply-" + n},
                 {"usage", usage(1000, 50, 1.0)}});
    w.fake.push({{"when", "task-" + n},
                 {"tool_calls", json::array({{{"id", "s" + n}, {"name", "shell"}, {"arguments", {{"cmd", "echo done-" + n}}}}})},
                 {"delay_ms", 300},
                 {"usage", usage(1000, 50, 1.0)}});
  }
  w.fake.push({{"when", "reply-3"}, {"text", "all three answered"}, {"usage", usage(100, 10, 0.25)}});
  const std::string parent_id = id_of(w, a);
  auto chat = w.open(a + "/chat");
  ASSERT_TRUE(w.write(a + "/prompt", "orchestrate three tasks\n"));
  int most = 0;
  eventually(
      [&] {
        most = std::max(most, listed_subagents(w, s, parent_id));
        return most == 3;
      },
      20s);
  auto text = World::read_until(chat, "all three answered");
  ASSERT_NE(text.find("all three answered"), std::string::npos) << w.log_text();
  EXPECT_EQ(most, 3) << "the three sub-agents of one batch run at once";
  // Each sub-agent's own answer, in call order, as its spawn's result.
  auto results = contents(w, a, "tool");
  ASSERT_EQ(results.size(), 3u);
  for (int i = 1; i <= 3; i++) EXPECT_EQ(results[i - 1], "reply-" + std::to_string(i) + "\n");
  // Each ran its own shell call (its second request carries that output), and is gone.
  for (int i = 1; i <= 3; i++) {
    bool seen = false;
    for (auto& r : w.fake.requests()) seen = seen || r.body.find("done-" + std::to_string(i) + "\\n") != std::string::npos;
    EXPECT_TRUE(seen) << "sub-agent " << i << " did not get its shell output";
  }
  EXPECT_EQ(listed_subagents(w, s, parent_id), 0);
  // §8.10.3: the parent's stats hold its own two requests and the six of its sub-agents.
  ASSERT_TRUE(w.wait_state(a, "idle"));
  auto stats = *w.read(a + "/stats");
  EXPECT_EQ(stat(stats, "input"), 2 * 100 + 6 * 1000) << stats;
  EXPECT_EQ(stat(stats, "output"), 2 * 10 + 6 * 50) << stats;
  EXPECT_EQ(stat(stats, "requests"), 8) << stats;
  EXPECT_NEAR(stat(stats, "costLast"), 0.5 + 6.0, 1e-9) << stats;
  EXPECT_NEAR(stat(stats, "costSession"), 6.5, 1e-9) << stats;
}

// §8.3.3 across agents: the parent's cached search goes stale when a sub-agent edits a file below
// it. The parent's second file_grep (no path: no stamp to check) was answered from its cache with
// the line the sub-agent had just changed.
TEST(Subagents, ASubAgentsEditIsSeenByTheParentsNextSearch) {
  World w;
  write_file(w.project + "/a.txt", "foo\n");
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  ASSERT_TRUE(w.rdwr(a + "/ctl", "tool_load subagent_spawn"));
  auto grep = [](const std::string& id) {
    return json::array({{{"id", id}, {"name", "file_grep"}, {"arguments", {{"pattern", "foo|bar"}}}}});
  };
  w.fake.push({{"when", "search-edit-search"}, {"tool_calls", grep("g1")}});
  w.fake.push({{"when", "a.txt:1:foo"}, {"tool_calls", json::array({spawn("p1", "task-edit")})}});
  w.fake.push({{"when", "task-edit"},
               {"tool_calls", json::array({{{"id", "e1"},
                                            {"name", "file_edit"},
                                            {"arguments", {{"path", "a.txt"}, {"old_string", "foo"}, {"new_string", "bar"}}}}})}});
  w.fake.push({{"when", "+bar"}, {"text", "sub-edited"}});
  w.fake.push({{"when", "sub-edited"}, {"tool_calls", grep("g2")}});
  w.fake.push({{"text", "all done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "search-edit-search\n"));
  ASSERT_TRUE(eventually([&] { return w.fake.answered() >= 6; }, 30s)) << w.log_text();
  ASSERT_TRUE(w.wait_state(a, "idle"));
  EXPECT_EQ(read_file(w.project + "/a.txt"), "bar\n");
  const auto results = contents(w, a, "tool", "file_grep");
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0], "a.txt:1:foo\n");
  EXPECT_EQ(results[1], "a.txt:1:bar\n");
}

TEST(Subagents, BeyondTheCapTheFourthWaitsInLineAndStillAnswers) {
  World w;
  write_file(w.config + "/backends.conf", "subagents = 3\n");
  ASSERT_TRUE(w.rdwr("ctl", "invalidate"));
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  ASSERT_TRUE(w.rdwr(a + "/ctl", "tool_load subagent_spawn"));
  w.fake.push({{"when", "fan out"},
               {"tool_calls", json::array({spawn("p1", "task-1"), spawn("p2", "task-2"), spawn("p3", "task-3"),
                                           spawn("p4", "task-4")})}});
  for (int i = 1; i <= 4; i++)
    w.fake.push({{"when", "task-" + std::to_string(i)}, {"text", "reply-" + std::to_string(i)}, {"delay_ms", 700}});
  w.fake.push({{"when", "reply-4"}, {"text", "four answers"}});
  const std::string parent_id = id_of(w, a);
  auto chat = w.open(a + "/chat");
  ASSERT_TRUE(w.write(a + "/prompt", "fan out four tasks\n"));
  // Sample the listing while they run: three at most, and the fourth after one of them ended.
  int most = 0, samples = 0;
  std::atomic<bool> done{false};
  std::thread watch([&] {
    while (!done) {
      most = std::max(most, listed_subagents(w, s, parent_id));
      samples++;
      std::this_thread::sleep_for(20ms);
    }
  });
  auto text = World::read_until(chat, "four answers", "", 60s);
  done = true;
  watch.join();
  ASSERT_NE(text.find("four answers"), std::string::npos) << w.log_text();
  EXPECT_EQ(most, 3) << samples << " samples";
  auto results = contents(w, a, "tool");
  ASSERT_EQ(results.size(), 4u);
  for (int i = 1; i <= 4; i++) EXPECT_EQ(results[i - 1], "reply-" + std::to_string(i) + "\n");
}

TEST(Subagents, TheDepthCapRefusesASubagentsSubagentAndNothingIsCreated) {
  World w;
  write_file(w.config + "/backends.conf", "subagent_depth = 1\n");
  ASSERT_TRUE(w.rdwr("ctl", "invalidate"));
  auto s = w.session("work");
  auto events = w.open("event");
  // The sub-agent loads subagent_spawn and tries to start one of its own; it is told why not.
  w.fake.push({{"when", "depth limit reached"}, {"text", "could not delegate"}});
  w.fake.push({{"when", "loaded: subagent_spawn"}, {"tool_calls", json::array({spawn("d2", "inner task")})}});
  w.fake.push({{"when", "outer task"},
               {"tool_calls", json::array({{{"id", "d1"}, {"name", "tool_load"}, {"arguments", {{"name", "subagent_spawn"}}}}})}});
  auto r = w.rdwr(s + "/agent/new", "name=outer prompt=outer task");
  ASSERT_TRUE(r) << r.ename() << w.log_text();
  EXPECT_EQ(*r, "could not delegate");
  std::string refused;
  for (auto& req : w.fake.requests())
    if (req.body.find("depth limit reached") != std::string::npos) refused = req.body;
  EXPECT_NE(refused.find("agent/new: sub-agent depth limit reached: 1"), std::string::npos) << refused;
  // One sub-agent was created and destroyed; the inner one never was.
  auto seen = World::read_until(events, ".kill session/work/agent/outer\n");
  std::size_t created = 0;
  for (auto at = seen.find(".new "); at != std::string::npos; at = seen.find(".new ", at + 1)) created++;
  EXPECT_EQ(created, 1u) << seen;
  EXPECT_NE(seen.find(".new session/work/agent/outer\n"), std::string::npos) << seen;
}

TEST(Subagents, ATurnTreeBudgetEndsTheSubagentWithAClearReply) {
  World w;
  write_file(w.config + "/backends.conf", "subagent_budget = 5000\n");
  ASSERT_TRUE(w.rdwr("ctl", "invalidate"));
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  ASSERT_TRUE(w.rdwr(a + "/ctl", "tool_load subagent_spawn"));
  // The parent's own request spends 6000 tokens: its sub-agent is past the budget before it asks.
  w.fake.push({{"when", "delegate"}, {"tool_calls", json::array({spawn("b1", "costly task")})}, {"usage", usage(5900, 100, 0)}});
  w.fake.push({{"when", "budget exhausted"}, {"text", "out of budget"}});
  auto chat = w.open(a + "/chat");
  ASSERT_TRUE(w.write(a + "/prompt", "delegate it\n"));
  auto text = World::read_until(chat, "out of budget");
  ASSERT_NE(text.find("out of budget"), std::string::npos) << w.log_text();
  auto results = contents(w, a, "tool");
  ASSERT_EQ(results.size(), 1u);
  EXPECT_NE(results[0].find("subagent failed: turn budget exhausted: 6000 tokens spent of 5000"), std::string::npos)
      << results[0];
  // No request of the sub-agent reached the provider.
  for (auto& r : w.fake.requests()) EXPECT_EQ(r.body.find("costly task\""), std::string::npos);
  // A new turn is a new tree: the hostowner's own sub-agent is not bound by the parent's spending.
  w.fake.push({{"when", "fresh"}, {"text", "fresh answer"}});
  auto fresh = w.rdwr(s + "/agent/new", "prompt=fresh task");
  ASSERT_TRUE(fresh) << fresh.ename();
  EXPECT_EQ(*fresh, "fresh answer");
}

TEST(Goal, CreatesTheConductorOnceAndSubmitsEveryGoalToIt) {
  World w;
  auto s = w.session("work");
  w.fake.push({{"when", "ship the release"}, {"text", "planning the release"}});
  auto st = w.write(s + "/goal", "ship the release");
  ASSERT_TRUE(st) << st.ename() << w.log_text();
  const std::string c = s + "/agent/conductor";
  ASSERT_TRUE(eventually([&] { return contents(w, c, "assistant").size() == 1; })) << w.log_text();
  auto cfg = w.read(c + "/cfg");
  ASSERT_TRUE(cfg);
  EXPECT_NE(cfg->find("\nagent=conductor\n"), std::string::npos) << *cfg;
  EXPECT_EQ(contents(w, c, "user", "goal"), std::vector<std::string>{"ship the release"});
  // A new goal: stored as written, submitted to the same agent.
  w.fake.push({{"when", "and write the notes"}, {"text", "notes too"}});
  ASSERT_TRUE(w.write(s + "/goal", "and write the notes"));
  ASSERT_TRUE(eventually([&] { return contents(w, c, "assistant").size() == 2; })) << w.log_text();
  EXPECT_EQ(contents(w, c, "user", "goal"), (std::vector<std::string>{"ship the release", "and write the notes"}));
  EXPECT_EQ(*w.read(s + "/goal"), "and write the notes");
  auto idx = *w.read(s + "/agent/idx");
  EXPECT_EQ(std::count(idx.begin(), idx.end(), '\n'), 1) << idx;
}

// §4.2 step 4: the reply is the final message of the prompt's own turn. A prompt that reaches the
// sub-agent while that turn runs is a later turn (its answer was the reply, and the request waited
// for it); the sub-agent's end ends it.
TEST(Subagents, TheReplyIsThePromptsOwnTurnNotOneQueuedAfterIt) {
  World w;
  auto s = w.session("work");
  w.fake.push({{"when", "slow task"}, {"text", "the task's answer"}, {"delay_ms", 100}, {"chunk", 4}});
  w.fake.push({{"when", "meanwhile"}, {"text", "a later turn's answer"}});
  auto reply = std::async(std::launch::async, [&] { return w.rdwr(s + "/agent/new", "name=helper prompt=slow task"); });
  ASSERT_TRUE(eventually([&] { return w.read_state(s + "/agent/helper") != ""; }));
  ASSERT_TRUE(w.write(s + "/agent/helper/prompt", "meanwhile"));
  auto r = reply.get();
  ASSERT_TRUE(r) << r.ename();
  EXPECT_EQ(*r, "the task's answer");
  EXPECT_TRUE(eventually([&] { return w.read_state(s + "/agent/helper") == ""; })) << "gone with its request";
}

// §8.13: concurrent goal writes share one conductor, each is submitted to it, and the goal file
// holds the last one submitted (three of four failed `agent already exists: conductor`, and the
// file kept one of those).
TEST(Goal, ConcurrentWritesShareOneConductorAndTheFileHoldsTheLastSubmitted) {
  World w;
  auto s = w.session("work");
  for (int i = 1; i <= 4; i++) w.fake.push({{"when", "goal " + std::to_string(i)}, {"text", "on it"}});
  std::vector<std::future<bool>> writes;
  for (int i = 1; i <= 4; i++)
    writes.push_back(std::async(std::launch::async, [&w, s, i] { return bool(w.write(s + "/goal", "goal " + std::to_string(i))); }));
  for (auto& f : writes) EXPECT_TRUE(f.get());
  const std::string c = s + "/agent/conductor";
  ASSERT_TRUE(eventually([&] { return contents(w, c, "user", "goal").size() == 4; })) << w.log_text();
  EXPECT_EQ(*w.read(s + "/goal"), contents(w, c, "user", "goal").back());
  auto idx = *w.read(s + "/agent/idx");
  EXPECT_EQ(std::count(idx.begin(), idx.end(), '\n'), 1) << idx;
}

// §8.13: a sub-agent named `conductor` is not the goal's agent (it is gone at its request's end,
// and the goal with it): the write is refused and nothing is stored.
TEST(Goal, ASubagentNamedConductorTakesNoGoal) {
  World w;
  auto s = w.session("work");
  w.fake.push({{"when", "sub work"}, {"text", "the sub-agent's answer"}, {"delay_ms", 100}, {"chunk", 4}});
  auto reply = std::async(std::launch::async, [&] { return w.rdwr(s + "/agent/new", "name=conductor prompt=sub work"); });
  ASSERT_TRUE(eventually([&] { return w.read_state(s + "/agent/conductor") != ""; }));
  auto st = w.write(s + "/goal", "the goal");
  ASSERT_FALSE(st);
  EXPECT_EQ(st.ename(), "conductor: not a persistent agent");
  EXPECT_EQ(*w.read(s + "/goal"), "");
  auto r = reply.get();
  ASSERT_TRUE(r) << r.ename();
  EXPECT_EQ(*r, "the sub-agent's answer");
}

TEST(Subagents, ARequestFromInsideTheCallersShellCallIsRefusedAtOnce) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  // shell is global: while it runs, its agent's sub-agent would wait for the lock it holds.
  const std::string cmd = "printf 'prompt=hi\\n' | ollie-9p rdwr \"session/$OLLIE_SESSION_ID/agent/new\" 2>&1; true";
  w.fake.push({{"when", "delegate from the shell"},
               {"tool_calls", json::array({{{"id", "g1"}, {"name", "shell"}, {"arguments", {{"cmd", cmd}}}}})}});
  w.fake.push({{"when", "global tool lock"}, {"text", "refused as expected"}});
  auto chat = w.open(a + "/chat");
  ASSERT_TRUE(w.write(a + "/prompt", "delegate from the shell\n"));
  auto text = World::read_until(chat, "refused as expected");
  ASSERT_NE(text.find("refused as expected"), std::string::npos) << w.log_text();
  auto results = contents(w, a, "tool");
  ASSERT_EQ(results.size(), 1u);
  EXPECT_NE(results[0].find("agent/new: caller holds the session's global tool lock"), std::string::npos) << results[0];
  // Nothing was created: no sub-agent asked the provider, none is listed.
  for (auto& r : w.fake.requests()) EXPECT_EQ(r.body.find("\"content\":\"hi\""), std::string::npos);
  auto idx = *w.read(s + "/agent/idx");
  EXPECT_EQ(std::count(idx.begin(), idx.end(), '\n'), 1) << idx;
}

// `!cmd` is a global-scope call too (§3.4): a sub-agent asked for from inside it is refused.
TEST(Subagents, ARequestFromInsideABangCommandIsRefusedAtOnce) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  ASSERT_TRUE(w.write(a + "/prompt",
                      "!printf 'prompt=hi\\n' | ollie-9p rdwr \"session/$OLLIE_SESSION_ID/agent/new\" 2>&1; true\n"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "exec").size() == 1; })) << w.log_text();
  const auto out = contents(w, a, "exec")[0];
  EXPECT_NE(out.find("agent/new: caller holds the session's global tool lock"), std::string::npos) << out;
  EXPECT_EQ(chat_requests(w), 0u) << "no sub-agent ran";
}
