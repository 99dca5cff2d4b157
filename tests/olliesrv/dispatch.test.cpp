// The engine in depth (issue 11), end to end through the real olliesrv, toolsrv and tools with
// the fake provider: deduplication inside a batch (spec §8.3.2), the per-turn result cache and
// its staleness (§8.3.3), the error streak (§8.6) and the plan re-injection (§8.7).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "olliesrv/world.hpp"

using namespace convo;
using json = nlohmann::json;

namespace {

const std::string nudge =
    "[system: your last 5 tool rounds all failed. Step back and try a different approach, or ask the user for "
    "help. Update your plan to show where you are.]";

/// The body of the n-th chat request the fake provider received.
/// A tool call of a scripted response; `args` a JSON object, or a string sent as it is.
json call(const std::string& id, const std::string& name, json args) {
  return {{"id", id}, {"name", name}, {"arguments", std::move(args)}};
}

/// A scripted response with these calls.
json round(json calls) { return {{"tool_calls", std::move(calls)}}; }

/// A world whose tools include `probe` (read scope, meta-only): it notes every run in the cwd's
/// `.probe-runs`, appends its `append` argument to `path` when given, then prints `path`. An
/// agent `main` of session `work` has it loaded.
struct ProbeWorld {
  World w;
  std::string a;
  ProbeWorld() {
    const std::string cmd =
        "a=$(cat); p=$(printf '%s' \"$a\" | jq -r .path); x=$(printf '%s' \"$a\" | jq -j '.append // empty'); "
        "echo \"$p\" >> .probe-runs; if [ -n \"$x\" ]; then printf '%s' \"$x\" >> \"$p\"; fi; cat \"$p\"";
    json meta = {{"description", "Test probe: notes its run, maybe appends, prints the file."},
                 {"args",
                  {{"type", "object"},
                   {"properties", {{"path", {{"type", "string"}}}, {"append", {{"type", "string"}}}}},
                   {"required", json::array({"path"})}}},
                 {"scope", "read"},
                 {"cmd", cmd}};
    write_file(w.root + "/tools/probe.meta", meta.dump());
    w.restart_with({"OLLIE_TOOLS_PATH=" + w.root + "/tools:" + w.config + "/tools"});
    auto s = w.session("work");
    a = w.agent(s, "main");
    auto r = w.rdwr(a + "/ctl", "tool_load probe");
    if (!r) throw std::runtime_error("tool_load probe: " + r.ename());
  }
  /// How many times probe ran.
  std::size_t runs() {
    const std::string t = read_file(w.project + "/.probe-runs");
    return static_cast<std::size_t>(std::count(t.begin(), t.end(), '\n'));
  }
  /// Scripts `rounds` and a final answer, sends a prompt, waits (up to `limit`) for the turn to end.
  void turn(const std::vector<json>& rounds, std::chrono::milliseconds limit = 20s) {
    for (const auto& r : rounds) w.fake.push(r);
    w.fake.push({{"text", "done"}});
    const auto before = chat_requests(w);
    ASSERT_TRUE(w.write(a + "/prompt", "go"));
    ASSERT_TRUE(eventually([&] { return chat_requests(w) == before + rounds.size() + 1; }, limit));
    ASSERT_TRUE(w.wait_state(a, "idle"));
  }
};

}  // namespace

TEST(Dedupe, IdenticalReadsOfABatchRunOnceAndEachKeepsItsBlocks) {
  ProbeWorld p;
  write_file(p.w.project + "/a.txt", "alpha\n");
  // The same arguments in another key order and spacing are one call; a dispatch flag makes another.
  p.turn({round(json::array({call("c1", "probe", R"({"path": "a.txt", "append": ""})"),
                             call("c2", "probe", R"({"append":"","path":"a.txt"})"),
                             call("c3", "probe", {{"path", "a.txt"}, {"append", ""}, {"timeout", 20}})}))});
  EXPECT_EQ(p.runs(), 2u);
  std::vector<std::string> seq, results;
  for (auto& b : blocks_of(p.w, p.a)) {
    if (b["role"] == "call" || b["role"] == "tool") seq.push_back(b["role"].get<std::string>() + " " + b["name"].get<std::string>());
    if (b["role"] == "tool") results.push_back(b["content"]);
  }
  EXPECT_EQ(seq, (std::vector<std::string>{"call probe", "call probe", "call probe", "tool probe", "tool probe", "tool probe"}));
  EXPECT_EQ(results, (std::vector<std::string>{"alpha\n", "alpha\n", "alpha\n"}));
  // Each call has its own result in the model's history.
  std::vector<std::string> ids;
  const json body = request_body(p.w, 1);
  for (auto& m : body["messages"])
    if (m["role"] == "tool") ids.push_back(m["tool_call_id"]);
  EXPECT_EQ(ids, (std::vector<std::string>{"c1", "c2", "c3"}));
}

// §8.3.1, §8.2: a batch of 300 reads all run and each gets its own result; they go to toolsrv
// 64 at a time (all at once, past 255 calls they were refused `too many requests in flight`).
TEST(Dispatch, ABatchOfThreeHundredCallsAllRunWithABoundOnThoseInFlight) {
  ProbeWorld p;
  json calls = json::array();
  for (int i = 0; i < 300; i++) {
    write_file(p.w.project + "/f" + std::to_string(i), std::to_string(i) + "\n");
    calls.push_back(call("c" + std::to_string(i), "probe", {{"path", "f" + std::to_string(i)}}));
  }
  p.turn({round(calls)}, 120s);  // 300 sandboxed runs take 20 s under ASan on 2 busy cores
  EXPECT_EQ(p.runs(), 300u);
  std::vector<std::string> results;
  for (auto& b : blocks_of(p.w, p.a))
    if (b["role"] == "tool") results.push_back(b["content"]);
  ASSERT_EQ(results.size(), 300u);
  for (int i = 0; i < 300; i++) EXPECT_EQ(results[i], std::to_string(i) + "\n") << i;
}

TEST(ResultCache, AReadIsServedAgainUntilAWriteOnItsPathOrAGlobalCall) {
  ProbeWorld p;
  write_file(p.w.project + "/a.txt", "alpha\n");
  write_file(p.w.project + "/sub/b.txt", "bee\n");
  const json read_a = call("r", "probe", {{"path", "a.txt"}});
  auto read = [&](const std::string& id) {
    json c = read_a;
    c["id"] = id;
    return round(json::array({c}));
  };
  p.turn({read("r1"), read("r2"),  // the second is a hit
          round(json::array({call("w1", "file_write", {{"path", "sub/b.txt"}, {"content", "other\n"}})})),
          read("r3"),  // a write elsewhere leaves it
          // A write-scope call on a.txt drops it even when it changes nothing (old_string absent).
          round(json::array({call("e1", "file_edit", {{"path", "./a.txt"}, {"old_string", "zzz"}, {"new_string", "y"}})})),
          read("r4"), read("r5"),
          round(json::array({call("s1", "shell", {{"cmd", "true"}})})),  // global: drops everything
          read("r6")});
  EXPECT_EQ(read_file(p.w.project + "/a.txt"), "alpha\n");
  EXPECT_EQ(p.runs(), 3u);  // r1, r4, r6
  std::vector<std::string> results;
  for (auto& b : blocks_of(p.w, p.a))
    if (b["role"] == "tool" && b["name"] == "probe") results.push_back(b["content"]);
  EXPECT_EQ(results, std::vector<std::string>(6, "alpha\n"));  // a hit is reported like a run
  EXPECT_EQ(contents(p.w, p.a, "call", "probe").size(), 6u);
  // A new turn starts with an empty cache.
  p.turn({read("r7")});
  EXPECT_EQ(p.runs(), 4u);
}

// file_grep and file_glob without a `path` search the cwd: an edit or a new file below it makes
// their cached results stale. The second search answered from the cache before (the edit looked
// undone, and the model would redo it).
TEST(ResultCache, ASearchWithoutAPathIsNotServedAfterAWriteBelowTheCwd) {
  ProbeWorld p;
  write_file(p.w.project + "/a.txt", "foo\n");
  const json grep = call("g", "file_grep", {{"pattern", "foo"}});
  const json glob = call("l", "file_glob", {{"pattern", "**/*.txt"}});
  auto again = [](json c, const std::string& id) {
    c["id"] = id;
    return round(json::array({c}));
  };
  p.turn({again(grep, "g1"), again(glob, "l1"),
          round(json::array({call("e1", "file_edit", {{"path", "a.txt"}, {"old_string", "foo"}, {"new_string", "bar"}})})),
          again(grep, "g2"),
          round(json::array({call("w1", "file_write", {{"path", "sub/new.txt"}, {"content", "x"}})})),
          again(glob, "l2")});
  const auto greps = contents(p.w, p.a, "tool", "file_grep");
  ASSERT_EQ(greps.size(), 2u);
  EXPECT_EQ(greps[0], "a.txt:1:foo\n");
  EXPECT_EQ(greps[1].find("a.txt:1:foo"), std::string::npos) << greps[1];
  const auto globs = contents(p.w, p.a, "tool", "file_glob");
  ASSERT_EQ(globs.size(), 2u);
  EXPECT_EQ(globs[0].find("new.txt"), std::string::npos) << globs[0];
  EXPECT_NE(globs[1].find("new.txt"), std::string::npos) << globs[1];
}

// What changes files outside the turn's own calls drops its cache too: a `!` command run in the
// middle of the turn (a global-scope shell call, §3.4), and a background process, which writes
// while it runs and is seen once it ends. Both searches after them were answered from the cache.
TEST(ResultCache, ABangCommandOrABackgroundProcessMidTurnDropsIt) {
  World w;
  write_file(w.project + "/f.txt", "line1\n");
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  auto grep = [](const std::string& id) { return round(json::array({call(id, "file_grep", {{"pattern", "line"}})})); };
  w.fake.push(grep("g1"));
  json slow = grep("g2");
  slow["delay_ms"] = 300;  // between its frames: the model thinks; the user's `!` runs meanwhile
  w.fake.push(slow);
  w.fake.push(round(json::array(
      {call("b1", "shell", {{"cmd", "sleep 0.3; echo line3 >> f.txt"}, {"background", true}})})));
  json later = grep("g3");
  later["delay_ms"] = 300;  // between its frames: the background process has ended by then
  w.fake.push(later);
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "tool", "file_grep").size() == 1; }));
  ASSERT_TRUE(w.write(a + "/prompt", "!echo line2 >> f.txt"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "tool", "file_grep").size() == 3; }, 20s)) << *w.read(a + "/log") << w.read_state(a) << " answered " << w.fake.answered() << " requests " << w.fake.requests().size();
  const auto greps = contents(w, a, "tool", "file_grep");
  EXPECT_EQ(greps[0], "f.txt:1:line1\n");
  EXPECT_EQ(greps[1], "f.txt:1:line1\nf.txt:2:line2\n");
  EXPECT_EQ(greps[2], "f.txt:1:line1\nf.txt:2:line2\nf.txt:3:line3\n");
}

TEST(ResultCache, AFileChangedBehindTheAgentsBackIsReadAgain) {
  ProbeWorld p;
  write_file(p.w.project + "/a.txt", "alpha\n");
  // probe with `append` is another read-scope call: the cache does not know it writes.
  p.turn({round(json::array({call("r1", "probe", {{"path", "a.txt"}})})),
          round(json::array({call("x1", "probe", {{"path", "a.txt"}, {"append", "more"}})})),
          round(json::array({call("r2", "probe", {{"path", "a.txt"}})})),
          round(json::array({call("r3", "probe", {{"path", "a.txt"}})}))});
  EXPECT_EQ(p.runs(), 3u);  // r1, x1, r2; r3 is a hit
  const auto results = contents(p.w, p.a, "tool", "probe");
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[0], "alpha\n");
  EXPECT_EQ(results[2], "alpha\nmore");
  EXPECT_EQ(results[3], "alpha\nmore");
}

TEST(ResultCache, ASessionInvalidateMidTurnEmptiesIt) {
  ProbeWorld p;
  write_file(p.w.project + "/a.txt", "alpha\n");
  p.w.fake.push(round(json::array({call("r1", "probe", {{"path", "a.txt"}})})));
  json second = round(json::array({call("r2", "probe", {{"path", "a.txt"}})}));
  second["delay_ms"] = 1500;  // the window for `invalidate`, between the two reads
  p.w.fake.push(second);
  p.w.fake.push(round(json::array({call("r3", "probe", {{"path", "a.txt"}})})));
  p.w.fake.push({{"text", "done"}});
  const auto before = chat_requests(p.w);
  ASSERT_TRUE(p.w.write(p.a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return chat_requests(p.w) == before + 2; }));
  EXPECT_EQ(*p.w.rdwr("session/work/ctl", "invalidate"), "ok\n");
  ASSERT_TRUE(eventually([&] { return chat_requests(p.w) == before + 4; }));
  ASSERT_TRUE(p.w.wait_state(p.a, "idle"));
  EXPECT_EQ(p.runs(), 2u);  // r1, and r2 after the invalidate; r3 is a hit again
  EXPECT_EQ(contents(p.w, p.a, "tool", "probe"), std::vector<std::string>(3, "alpha\n"));
}

// §8.9: `stop` keeps the results already in, even one that came in behind a call still running
// in the same batch; only the cancelled call leaves the history.
// §8.1.3 step 1: a `.meta` changed while a call runs reaches the next request. After a round of
// write scope the list is read when the round is over; after one of read scope it was asked while
// the calls ran, and is asked again when the round took 50 ms or more, or when a tool was loaded
// meanwhile (Conversation.ToolLoadCallsBackIntoOlliesrvAsTheAgentItself).
void meta_changed_during_a_call(const std::string& scope) {
  ProbeWorld p;
  json gate = {{"description", "Test gate: waits for .go in the cwd."},
               {"args", {{"type", "object"}, {"properties", {{"path", {{"type", "string"}}}}}}},
               {"scope", scope},
               {"cmd", "touch .gate-started; while [ ! -e .go ]; do sleep 0.01; done; echo through"}};
  write_file(p.w.root + "/tools/gate.meta", gate.dump());
  ASSERT_TRUE(p.w.rdwr(p.a + "/ctl", "tool_load gate"));
  p.w.fake.push(round(json::array({call("g1", "gate", {{"path", "x.txt"}})})));
  p.w.fake.push({{"text", "done"}});
  const auto before = chat_requests(p.w);
  ASSERT_TRUE(p.w.write(p.a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return ::access((p.w.project + "/.gate-started").c_str(), F_OK) == 0; }));
  json probe = json::parse(read_file(p.w.root + "/tools/probe.meta"));
  probe["description"] = "Test probe, described again while the gate ran.";
  write_file(p.w.root + "/tools/probe.meta", probe.dump());
  std::this_thread::sleep_for(std::chrono::milliseconds(60));  // the call outlives a list read as it began
  write_file(p.w.project + "/.go", "");
  ASSERT_TRUE(eventually([&] { return chat_requests(p.w) == before + 2; }));
  ASSERT_TRUE(p.w.wait_state(p.a, "idle"));
  const json second = request_body(p.w, before + 1);
  std::string described;
  for (const auto& t : second["tools"])
    if (t["function"]["name"] == "probe") described = t["function"]["description"];
  EXPECT_EQ(described, "Test probe, described again while the gate ran.") << scope;
}

TEST(ToolList, AMetaChangedDuringAWriteScopeCallReachesTheNextRequest) { meta_changed_during_a_call("write"); }
TEST(ToolList, AMetaChangedDuringALongReadScopeCallReachesTheNextRequest) { meta_changed_during_a_call("read"); }

TEST(Stop, KeepsAResultThatCameInBehindARunningCall) {
  ProbeWorld p;
  write_file(p.w.project + "/a.txt", "alpha\n");
  ASSERT_EQ(::mkfifo((p.w.project + "/never").c_str(), 0600), 0);  // its reader waits for a writer
  p.w.fake.push(round(json::array({call("r1", "probe", {{"path", "never"}}), call("r2", "probe", {{"path", "a.txt"}})})));
  p.w.fake.push({{"text", "after"}});
  ASSERT_TRUE(p.w.write(p.a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return p.runs() == 2; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // r2 prints its file and exits
  EXPECT_EQ(*p.w.rdwr(p.a + "/ctl", "stop"), "stopped\n");
  ASSERT_TRUE(p.w.wait_state(p.a, "idle"));
  EXPECT_EQ(contents(p.w, p.a, "tool", "probe"), std::vector<std::string>{"alpha\n"});
  // The next request carries r2 and its result, and nothing of r1.
  ASSERT_TRUE(p.w.write(p.a + "/prompt", "next"));
  ASSERT_TRUE(eventually([&] { return chat_requests(p.w) == 2; }));
  const auto body = chat_bodies(p.w)[1].dump();
  EXPECT_NE(body.find("\"r2\""), std::string::npos) << body;
  EXPECT_EQ(body.find("\"r1\""), std::string::npos) << body;
}

// §8.2: a call whose streamed arguments were cut off at the output token limit gets an error result
// naming the limit the request sent: anthropic always sends one (8192 unless `maxTokens` is set).
TEST(StopReasons, ArgumentsCutOffAtTheLimitNameTheLimitSent) {
  World w;
  w.restart_with({"OLLIE_ANTHROPIC_URL=" + w.fake.url(), "OLLIE_ANTHROPIC_KEY=sk-test"});
  auto a = w.agent(w.session("work"), "main", "backend=anthropic model=fake-model");
  auto cut_off = [&](const std::string& id) {
    w.fake.push({{"tool_calls", json::array({call(id, "file_read", "{\"path\": \"/et")})}, {"stop", "length"}});
    w.fake.push({{"text", "ok"}});
    const auto before = contents(w, a, "tool").size();
    EXPECT_TRUE(w.write(a + "/prompt", "go"));
    EXPECT_TRUE(eventually([&] { return contents(w, a, "tool").size() == before + 1; })) << w.log_text();
    EXPECT_TRUE(w.wait_state(a, "idle"));
    return contents(w, a, "tool").back();
  };
  EXPECT_EQ(cut_off("c1"), "error: arguments cut off at the output token limit (maxTokens=8192)");
  ASSERT_TRUE(w.write(a + "/cfg", "maxTokens=100"));
  EXPECT_EQ(cut_off("c2"), "error: arguments cut off at the output token limit (maxTokens=100)");
  // Cut before any byte of its input: cut off too, not run with {} (file_write would have run).
  w.fake.push({{"tool_calls", json::array({call("c5", "file_write", "")})}, {"stop", "length"}});
  w.fake.push({{"text", "ok"}});
  const auto before = contents(w, a, "tool").size();
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "tool").size() == before + 1; })) << w.log_text();
  EXPECT_EQ(contents(w, a, "tool").back(), "error: arguments cut off at the output token limit (maxTokens=100)");
  ASSERT_TRUE(w.wait_state(a, "idle"));
  // Arguments that parse, but not as an object, were not cut off: they are invalid as at any stop.
  auto b = w.agent("session/work", "other");
  w.fake.push({{"tool_calls", json::array({call("c3", "file_read", "[1]")})}, {"stop", "length"}});
  w.fake.push({{"text", "ok"}});
  ASSERT_TRUE(w.write(b + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return contents(w, b, "tool").size() == 1; })) << w.log_text();
  EXPECT_EQ(contents(w, b, "tool").back(), "error: invalid arguments: not a JSON object");
  // openai: max_completion_tokens is the limit sent when it is set; a call cut before any byte of
  // its arguments was cut off too (it ran with {}).
  auto c = w.agent("session/work", "third", "backend=openai");
  ASSERT_TRUE(w.write(c + "/cfg", "maxCompletionTokens=50"));
  w.fake.push({{"tool_calls", json::array({call("c4", "file_read", "")})}, {"stop", "length"}});
  w.fake.push({{"text", "ok"}});
  ASSERT_TRUE(w.write(c + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return contents(w, c, "tool").size() == 1; })) << w.log_text();
  EXPECT_EQ(contents(w, c, "tool").back(), "error: arguments cut off at the output token limit (maxTokens=50)");
}

TEST(Safety, FiveFailedRoundsInARowNudgeAndTenAbortTheTurn) {
  World w;
  write_file(w.project + "/a.txt", "alpha\n");
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  auto failing = [](int n) { return round(json::array({call("f" + std::to_string(n), "file_read", {{"path", "missing" + std::to_string(n)}})})); };
  // Rounds 1-2 fail, 3 succeeds (the streak restarts), 4-13 fail: nudge after 8, abort after 13.
  w.fake.push(failing(1));
  w.fake.push(failing(2));
  w.fake.push(round(json::array({call("ok", "file_read", {{"path", "a.txt"}})})));
  for (int i = 4; i <= 13; i++) w.fake.push(failing(i));
  w.fake.push({{"text", "never asked for"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "error").size() == 1; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  EXPECT_EQ(chat_requests(w), 13u);
  EXPECT_EQ(contents(w, a, "error"), std::vector<std::string>{"10 consecutive failed tool rounds: turn aborted"});
  EXPECT_EQ(contents(w, a, "context", "nudge"), std::vector<std::string>{nudge});
  // The nudge follows round 8's result, in the blocks and in the 9th request.
  std::vector<std::string> seq;
  for (auto& b : blocks_of(w, a))
    if (b["role"] == "tool" || b["role"] == "context") seq.push_back(b["role"]);
  ASSERT_EQ(seq.size(), 14u);
  EXPECT_EQ(seq[8], "context");
  auto body = request_body(w, 8);
  ASSERT_TRUE(body.contains("messages"));
  EXPECT_EQ(body["messages"].back()["role"], "user");
  EXPECT_EQ(body["messages"].back()["content"], nudge);
  for (std::size_t i = 0; i < 8; i++) {
    const json earlier = request_body(w, i);
    for (auto& m : earlier["messages"]) EXPECT_NE(m.value("content", json()), nudge) << i;
  }
}

TEST(Plan, ANonBlankPlanIsReinjectedAfterTheTenthRound) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  ASSERT_TRUE(w.write(a + "/plan", "- [x] look\n- [ ] fix\n"));
  for (int i = 1; i <= 11; i++) {
    write_file(w.project + "/f" + std::to_string(i), "file " + std::to_string(i) + "\n");
    w.fake.push(round(json::array({call("c" + std::to_string(i), "file_read", {{"path", "f" + std::to_string(i)}})})));
  }
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 12; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  const std::string want =
      "[system: your current plan:\n\n- [x] look\n- [ ] fix\n\nKeep it current: tick finished steps and revise it if "
      "your approach changed. Continue.]";
  EXPECT_EQ(contents(w, a, "context", "plan"), std::vector<std::string>{want});
  std::vector<std::string> seq;
  for (auto& b : blocks_of(w, a))
    if (b["role"] == "tool" || b["role"] == "context") seq.push_back(b["role"]);
  ASSERT_EQ(seq.size(), 12u);
  EXPECT_EQ(seq[10], "context");  // after round 10's result
  EXPECT_EQ(request_body(w, 10)["messages"].back()["content"], want);
  EXPECT_NE(request_body(w, 9)["messages"].back()["content"], want);
}

TEST(Plan, ABlankPlanIsNotReinjected) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  ASSERT_TRUE(w.write(a + "/plan", " \n\n"));
  for (int i = 1; i <= 10; i++) {
    write_file(w.project + "/f" + std::to_string(i), "x\n");
    w.fake.push(round(json::array({call("c" + std::to_string(i), "file_read", {{"path", "f" + std::to_string(i)}})})));
  }
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 11; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  EXPECT_TRUE(contents(w, a, "context", "plan").empty());
}
