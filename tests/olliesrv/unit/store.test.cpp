// Session persistence (spec §7.7): session.json round trip, atomic replacement, blocks.jsonl
// appends and crash recovery, skipped sessions, cleaned histories, file modes.
#include "olliesrv/store.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <algorithm>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

using namespace ollie;
using backend::Role;

namespace {

struct Tmp {
  std::string path;
  Tmp() {
    std::string t = (std::filesystem::temp_directory_path() / "ollie-store.XXXXXX").string();
    if (!mkdtemp(t.data())) throw std::runtime_error("mkdtemp");
    path = t;
  }
  ~Tmp() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void spit(const std::string& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << text;
}

unsigned mode_of(const std::string& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

HistoryMessage msg(Role r, std::string content) {
  HistoryMessage h;
  h.msg.role = r;
  h.msg.content = std::move(content);
  return h;
}

HistoryMessage assistant(std::string content, std::vector<std::string> call_ids) {
  auto h = msg(Role::assistant, std::move(content));
  for (auto& id : call_ids) h.msg.tool_calls.push_back({id, "shell", R"({"command":"ls"})"});
  return h;
}

HistoryMessage result(std::string call_id, std::string content = "ok") {
  auto h = msg(Role::tool, std::move(content));
  h.msg.tool_call_id = std::move(call_id);
  h.tool_name = "shell";
  return h;
}

SessionRecord full_session() {
  SessionRecord s;
  s.id = "3f0c2b9e-8c1d-4d5e-9a51-0b9f6d0e2a77";
  s.name = "work";
  s.cwd = "/home/me/src/proj";
  s.remote = "host";
  s.backend = "anthropic";
  s.model = "m1";
  s.env = {{"FOO", "bar"}, {"EMPTY", ""}};
  s.goal = "ship it";
  s.bypass = "mode ask\n";
  s.bypass_counter = 7;
  AgentRecord a;
  a.id = "11111111-2222-4333-8444-555555555555";
  a.name = "main";
  a.profile = "default";
  a.created = 1757000000;
  a.backend = "openai";
  a.model = "gpt";
  a.cwd = "/home/me/src/proj/sub";
  a.params = R"({"temperature":0.2,"maxTokens":100})";
  a.tools = {"file_read", "shell"};
  a.peers = {"99999999-2222-4333-8444-555555555555"};
  a.plan = "- [ ] step\n- [x] done\n";
  a.block_counter = 212;
  a.turn = true;
  a.feed = "feed value";
  a.usage = {1, 2, 3, 4, 5, true, 0.0123, 1.5};
  a.messages.push_back(msg(Role::user, "hello \"there\"\n"));
  auto asst = msg(Role::assistant, "calling");
  asst.msg.tool_calls.push_back({"call_1", "file_read", R"({"path":"a.txt","z":1,"a":[1,2]})"});
  asst.msg.tool_calls.push_back({"call_2", "shell", R"({"command":"ls)"});  // cut off: not JSON
  asst.msg.reasoning_items = {R"({"type":"thinking","thinking":"x","signature":"sig=="})", R"("opaque")"};
  asst.msg.reasoning_backend = "anthropic";
  a.messages.push_back(asst);
  auto r1 = result("call_1", "file text");
  r1.tool_name = "file_read";
  r1.tier = "cold";
  r1.collapsed = true;
  a.messages.push_back(r1);
  auto r2 = result("call_2", "error: bad arguments\n\n<system-user-interruption>\nx\n</system-user-interruption>");
  r2.tier = "warm";
  r2.failed = true;
  r2.inject = 58;
  a.messages.push_back(r2);
  a.messages.push_back(msg(Role::assistant, "done"));
  s.agents.push_back(a);
  AgentRecord b;
  b.id = "22222222-2222-4333-8444-555555555555";
  b.name = "helper";
  b.params = "{}";
  s.agents.push_back(b);
  return s;
}

void expect_same(const HistoryMessage& x, const HistoryMessage& y) {
  EXPECT_EQ(x.msg.role, y.msg.role);
  EXPECT_EQ(x.msg.content, y.msg.content);
  EXPECT_EQ(x.msg.tool_call_id, y.msg.tool_call_id);
  ASSERT_EQ(x.msg.tool_calls.size(), y.msg.tool_calls.size());
  for (std::size_t i = 0; i < x.msg.tool_calls.size(); i++) {
    EXPECT_EQ(x.msg.tool_calls[i].id, y.msg.tool_calls[i].id);
    EXPECT_EQ(x.msg.tool_calls[i].name, y.msg.tool_calls[i].name);
    EXPECT_EQ(x.msg.tool_calls[i].arguments, y.msg.tool_calls[i].arguments);
  }
  EXPECT_EQ(x.msg.reasoning_items, y.msg.reasoning_items);
  EXPECT_EQ(x.msg.reasoning_backend, y.msg.reasoning_backend);
  EXPECT_EQ(x.tool_name, y.tool_name);
  EXPECT_EQ(x.tier, y.tier);
  EXPECT_EQ(x.collapsed, y.collapsed);
  EXPECT_EQ(x.failed, y.failed);
  EXPECT_EQ(x.inject, y.inject);
}

void expect_same(const SessionRecord& x, const SessionRecord& y) {
  EXPECT_EQ(x.id, y.id);
  EXPECT_EQ(x.name, y.name);
  EXPECT_EQ(x.cwd, y.cwd);
  EXPECT_EQ(x.remote, y.remote);
  EXPECT_EQ(x.backend, y.backend);
  EXPECT_EQ(x.model, y.model);
  EXPECT_EQ(x.env, y.env);
  EXPECT_EQ(x.goal, y.goal);
  EXPECT_EQ(x.bypass, y.bypass);
  EXPECT_EQ(x.bypass_counter, y.bypass_counter);
  ASSERT_EQ(x.agents.size(), y.agents.size());
  for (std::size_t i = 0; i < x.agents.size(); i++) {
    const auto &a = x.agents[i], &b = y.agents[i];
    EXPECT_EQ(a.id, b.id);
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.profile, b.profile);
    EXPECT_EQ(a.created, b.created);
    EXPECT_EQ(a.backend, b.backend);
    EXPECT_EQ(a.model, b.model);
    EXPECT_EQ(a.cwd, b.cwd);
    EXPECT_EQ(a.params, b.params);
    EXPECT_EQ(a.tools, b.tools);
    EXPECT_EQ(a.peers, b.peers);
    EXPECT_EQ(a.plan, b.plan);
    EXPECT_EQ(a.block_counter, b.block_counter);
    EXPECT_EQ(a.turn, b.turn);
    EXPECT_EQ(a.feed, b.feed);
    EXPECT_EQ(a.usage.input, b.usage.input);
    EXPECT_EQ(a.usage.output, b.usage.output);
    EXPECT_EQ(a.usage.cached_input, b.usage.cached_input);
    EXPECT_EQ(a.usage.cache_creation, b.usage.cache_creation);
    EXPECT_EQ(a.usage.requests, b.usage.requests);
    EXPECT_EQ(a.usage.estimated, b.usage.estimated);
    EXPECT_DOUBLE_EQ(a.usage.cost_last, b.usage.cost_last);
    EXPECT_DOUBLE_EQ(a.usage.cost_session, b.usage.cost_session);
    ASSERT_EQ(a.messages.size(), b.messages.size());
    for (std::size_t j = 0; j < a.messages.size(); j++) expect_same(a.messages[j], b.messages[j]);
  }
}

std::string dir_of(const Tmp& t, const std::string& id) { return t.path + "/sessions/" + id; }

/// A session to save, its first agent's blocks file and two block lines: the start of the tests
/// of a blocks file's last line.
struct Blocks {
  Tmp t;
  Store st{t.path + "/sessions"};
  SessionRecord s = full_session();
  std::string aid = s.agents[0].id;
  std::string file = dir_of(t, s.id) + "/" + aid + ".blocks.jsonl";
  std::string l1 = R"({"role":"user","id":"0123abcd","content":"q"})";
  std::string l2 = R"({"role":"assistant","id":"0123abce","content":"a"})";
};

}  // namespace

TEST(StoreJson, RoundTripsEveryField) {
  auto s = full_session();
  auto text = to_json(s);
  auto back = parse_session(text);
  ASSERT_TRUE(back) << back.ename();
  expect_same(s, *back);
  EXPECT_EQ(to_json(*back), text) << "stable";
}

// What olliesrv writes it reads back: a total restored at the bound and grown past it is written
// at the bound (written as it was, the next start refused the whole session `out of range`).
TEST(StoreJson, CountsGrownPastTheBoundAreWrittenAtIt) {
  auto s = full_session();
  s.agents[0].block_counter = (std::uint64_t{1} << 53) + 25;
  s.agents[0].usage.input = (std::int64_t{1} << 53) + 1;
  s.agents[0].usage.cost_session = 2e12;
  auto back = parse_session(to_json(s));
  ASSERT_TRUE(back) << back.ename();
  EXPECT_EQ(back->agents[0].block_counter, std::uint64_t{1} << 53);
  EXPECT_EQ(back->agents[0].usage.input, std::int64_t{1} << 53);
  EXPECT_DOUBLE_EQ(back->agents[0].usage.cost_session, 1e12);
}

TEST(StoreJson, UsesTheSpecFieldNames) {
  auto j = nlohmann::json::parse(to_json(full_session()));
  EXPECT_EQ(j["bypassCounter"], 7);
  EXPECT_EQ(j["env"]["FOO"], "bar");
  const auto& a = j["agents"][0];
  EXPECT_EQ(a["blockCounter"], 212);
  EXPECT_EQ(a["turn"], true);  // an extension: only while a turn runs
  EXPECT_EQ(a["created"], 1757000000);
  EXPECT_EQ(a["params"]["temperature"], 0.2) << "params is an object";
  EXPECT_EQ(a["usage"]["cachedInput"], 3);
  EXPECT_EQ(a["usage"]["cacheCreation"], 4);
  EXPECT_EQ(a["usage"]["costLast"], 0.0123);
  EXPECT_EQ(a["usage"]["costSession"], 1.5);
  EXPECT_EQ(a["usage"]["estimated"], true);
  const auto& m = a["messages"];
  EXPECT_EQ(m[1]["tool_calls"][0]["arguments"]["path"], "a.txt") << "arguments stored as the object";
  EXPECT_EQ(m[1]["tool_calls"][1]["arguments"], R"({"command":"ls)") << "unparsable arguments as the string";
  EXPECT_EQ(m[1]["reasoning"][0]["signature"], "sig==");
  EXPECT_EQ(m[1]["reasoningBackend"], "anthropic");
  EXPECT_EQ(m[2]["tool_call_id"], "call_1");
  EXPECT_EQ(m[2]["name"], "file_read");
  EXPECT_EQ(m[2]["tier"], "cold");
  EXPECT_EQ(m[2]["collapsed"], true);
  EXPECT_FALSE(m[0].contains("tool_calls"));
  EXPECT_FALSE(m[4].contains("reasoning"));
  EXPECT_FALSE(m[3].contains("collapsed"));
  EXPECT_EQ(m[3]["error"], true);  // the call failed, and the end of its content is an inject
  EXPECT_EQ(m[3]["inject"], 58);
  EXPECT_FALSE(m[2].contains("error"));
  EXPECT_FALSE(m[2].contains("inject"));
}

TEST(StoreJson, ToleratesMissingOptionalFields) {
  auto s = parse_session(R"({"id":"x","agents":[{"id":"a","messages":[{"role":"user"}]}]})");
  ASSERT_TRUE(s) << s.ename();
  EXPECT_EQ(s->id, "x");
  ASSERT_EQ(s->agents.size(), 1u);
  EXPECT_EQ(s->agents[0].params, "{}");
  EXPECT_EQ(s->agents[0].block_counter, 0u);
  ASSERT_EQ(s->agents[0].messages.size(), 1u);
  EXPECT_EQ(s->agents[0].messages[0].msg.content, "");
  auto unknown = parse_session(R"({"id":"x","future":{"a":1},"agents":[]})");
  EXPECT_TRUE(unknown) << "unknown fields are ignored";
}

TEST(StoreJson, WrongTypesNameTheField) {
  auto e = [](const char* text) {
    auto r = parse_session(text);
    return r ? std::string("ok") : r.ename();
  };
  // Where, for a person editing it by hand; no byte of the file.
  EXPECT_EQ(e("{bad"), "session.json: parse error at line 1, column 2: invalid "
                       "literal; expected string literal");
  EXPECT_EQ(e("{\n  \"id\": \"x\",\n}").rfind("session.json: parse error at line 3, column 1: ", 0), 0u) << e("{\n  \"id\": \"x\",\n}");
  EXPECT_EQ(e("[]"), "session.json: session: expected an object");
  EXPECT_EQ(e(R"({"name":"x"})"), "session.json: id: missing");
  // Without its agents list, a restore would remove their blocks as no longer the session's.
  EXPECT_EQ(e(R"({"id":"x"})"), "session.json: agents: missing");
  EXPECT_EQ(e(R"({"id":"x","agents":[]})"), "ok");
  EXPECT_EQ(e(R"({"id":7})"), "session.json: id: expected a string");
  EXPECT_EQ(e(R"({"id":"x","bypassCounter":-1})"), "session.json: bypassCounter: expected a non-negative integer");
  EXPECT_EQ(e(R"({"id":"x","env":{"A":1}})"), "session.json: env.A: expected a string");
  EXPECT_EQ(e(R"({"id":"x","agents":[{"id":"a","blockCounter":"7"}]})"),
            "session.json: agents[0].blockCounter: expected an integer");
  EXPECT_EQ(e(R"({"id":"x","agents":[{"id":"a","usage":{"costLast":"1"}}]})"),
            "session.json: agents[0].usage.costLast: expected a number");
  // Totals the next turn's sums would overflow from, or print as nonsense, are not olliesrv's.
  EXPECT_EQ(e(R"({"id":"x","agents":[{"id":"a","usage":{"input":9223372036854775807}}]})"),
            "session.json: agents[0].usage.input: out of range");
  EXPECT_EQ(e(R"({"id":"x","agents":[{"id":"a","usage":{"requests":-1}}]})"),
            "session.json: agents[0].usage.requests: out of range");
  EXPECT_EQ(e(R"({"id":"x","agents":[{"id":"a","usage":{"costSession":1e300}}]})"),
            "session.json: agents[0].usage.costSession: out of range");
  EXPECT_EQ(e(R"({"id":"x","agents":[{"id":"a","usage":{"costLast":-2}}]})"),
            "session.json: agents[0].usage.costLast: out of range");
  EXPECT_EQ(e(R"({"id":"x","agents":[{"id":"a","blockCounter":18446744073709551615}]})"),
            "session.json: agents[0].blockCounter: out of range");
  EXPECT_EQ(e(R"({"id":"x","agents":[{"id":"a","usage":{"input":9007199254740992,"costSession":1000000000000}}]})"), "ok");
  EXPECT_EQ(e(R"({"id":"x","agents":[{"id":"a","messages":[{"role":"robot"}]}]})"),
            "session.json: agents[0].messages[0].role: unknown role");
  EXPECT_EQ(e(R"({"id":"x","agents":[{"id":"a","messages":[{"role":"assistant","tool_calls":[{"arguments":3}]}]}]})"),
            "session.json: agents[0].messages[0].tool_calls[0].arguments: expected an object or a string");
  EXPECT_EQ(e(R"({"id":"x","agents":[{"id":"a"},{"id":"a"}]})"), "session.json: agents[1].id: duplicate");
  EXPECT_EQ(e(R"({"id":"x","agents":[{"name":"a"}]})"), "session.json: agents[0].id: missing");
  EXPECT_EQ(e(R"({"id":"x","agents":[{"id":"a","tools":["a",1]}]})"), "session.json: agents[0].tools[1]: expected a string");
  // Arguments are dumped back to text, recursing on their depth: a planted file nested a million
  // deep is refused, not a stack overflow at every start; what the engine writes loads.
  const auto args = [](int depth) {
    return R"({"id":"x","agents":[{"id":"a","messages":[{"role":"assistant","tool_calls":[{"id":"c","name":"t","arguments":{"p":)" +
           std::string(depth, '[') + std::string(depth, ']') + "}}]}]}]}";
  };
  EXPECT_EQ(e(args(1'000'000).c_str()), "session.json: nested deeper than 512 levels");
  EXPECT_EQ(e(args(127).c_str()), "ok");
}

TEST(Store, SaveThenLoadRestoresTheSessionWithModes) {
  Tmp t;
  Store st(t.path + "/sessions");
  auto s = full_session();
  auto old = ::umask(0);  // a permissive umask must not widen the modes
  auto saved = st.save(s);
  auto appended = st.append_block(s.id, s.agents[0].id, R"({"role":"user","id":"0123abcd","content":"q"})");
  ::umask(old);
  ASSERT_TRUE(saved) << saved.ename();
  ASSERT_TRUE(appended) << appended.ename();
  EXPECT_EQ(mode_of(t.path + "/sessions"), 0700u);
  EXPECT_EQ(mode_of(dir_of(t, s.id)), 0700u);
  EXPECT_EQ(mode_of(dir_of(t, s.id) + "/session.json"), 0600u);
  EXPECT_EQ(mode_of(dir_of(t, s.id) + "/" + s.agents[0].id + ".blocks.jsonl"), 0600u);
  std::vector<std::string> skipped;
  auto all = st.load_all(&skipped);
  EXPECT_TRUE(skipped.empty());
  ASSERT_EQ(all.size(), 1u);
  expect_same(s, all[0].record);
  EXPECT_EQ(all[0].blocks[s.agents[0].id], std::vector<std::string>{R"({"role":"user","id":"0123abcd","content":"q"})"});
  EXPECT_TRUE(all[0].blocks[s.agents[1].id].empty());
}

TEST(Store, SaveReplacesAndACrashBeforeRenameLeavesTheOldFile) {
  Tmp t;
  Store st(t.path + "/sessions");
  auto s = full_session();
  ASSERT_TRUE(st.save(s));
  s.name = "renamed";
  ASSERT_TRUE(st.save(s));
  // A crash between write and rename: a temp file with the new (here: half-written) text.
  auto dir = dir_of(t, s.id);
  spit(dir + "/.session.json.tmp.12345.0", to_json(s).substr(0, 40));
  auto all = st.load_all();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].record.name, "renamed");
  std::size_t files = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir)) files++;
  EXPECT_EQ(files, 2u) << "save leaves no temp file behind (only the simulated one)";
}

TEST(StoreJson, IsThePrettyLayoutOfTheWholeRecord) {
  auto s = full_session();
  // Text that looks like the layout the messages are spliced into, in params and in a message.
  s.agents[1].params = R"({"messages":[],"x":{"messages":[]}})";
  s.agents[0].messages.push_back(msg(Role::user, "\n   \"messages\": []\n"));
  const std::string text = to_json(s);
  EXPECT_EQ(text, nlohmann::ordered_json::parse(text).dump(1) + "\n");
  auto back = parse_session(text);
  ASSERT_TRUE(back) << back.ename();
  expect_same(s, *back);
  EXPECT_EQ(back->agents[1].params, s.agents[1].params);
}

TEST(Store, EachSaveWritesTheMessagesAsTheyAreNow) {
  Tmp t;
  Store st(t.path + "/sessions");
  auto s = full_session();
  ASSERT_TRUE(st.save(s));
  auto& ms = s.agents[0].messages;
  ms[2].collapsed = false;  // changed in place (a collapse undone, a content edited)
  ms[2].msg.content = "file text, edited";
  ms[1].msg.tool_calls[0].arguments = R"({"path":"b.txt"})";
  ms.push_back(msg(Role::user, "more"));
  s.agents[1].messages.push_back(msg(Role::user, "helper's first"));
  ASSERT_TRUE(st.save(s));
  auto all = st.load_all();
  ASSERT_EQ(all.size(), 1u);
  expect_same(s, all[0].record);
  EXPECT_EQ(slurp(dir_of(t, s.id) + "/session.json"), to_json(s));
  ms.erase(ms.begin());  // a history cut at its front (compaction): every index moves
  ASSERT_TRUE(st.save(s));
  all = st.load_all();
  ASSERT_EQ(all.size(), 1u);
  expect_same(s, all[0].record);
}

TEST(Store, TornLastBlockLineIsCutOffInTheFileToo) {
  Blocks b;
  auto& [t, st, s, aid, file, l1, l2] = b;
  ASSERT_TRUE(st.save(s));
  ASSERT_TRUE(st.append_block(s.id, aid, l1));
  ASSERT_TRUE(st.append_block(s.id, aid, l2));
  {
    std::ofstream f(file, std::ios::app | std::ios::binary);
    f << R"({"role":"tool","id":"01)";  // kill -9 in the middle of a write
  }
  auto all = st.load_all();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].blocks[aid], (std::vector<std::string>{l1, l2}));
  // The file is cut once the session is restored (one restore skips keeps its files as they are).
  EXPECT_EQ(slurp(file), l1 + "\n" + l2 + "\n" + R"({"role":"tool","id":"01)");
  st.settle(all[0]);
  EXPECT_EQ(slurp(file), l1 + "\n" + l2 + "\n");
  // A last line that ended but is not JSON (a torn page) goes too; appends continue after it.
  {
    std::ofstream f(file, std::ios::app | std::ios::binary);
    f << std::string(10, '\0') << "\n";
  }
  all = st.load_all();
  EXPECT_EQ(all[0].blocks[aid].size(), 2u);
  st.settle(all[0]);
  ASSERT_TRUE(st.append_block(s.id, aid, l1));
  EXPECT_EQ(slurp(file), l1 + "\n" + l2 + "\n" + l1 + "\n");
  // Whole lines that are not JSON but hold no zeros are no crash's doing: skipped, never cut, at
  // any restart.
  const std::string bad = R"({"role":"user","id":"0badf011","content":"c1")";
  {
    std::ofstream f(file, std::ios::app | std::ios::binary);
    f << bad << "\n" << bad << "\n";
  }
  for (int restart = 0; restart < 3; restart++) {
    all = st.load_all();
    ASSERT_EQ(all.size(), 1u);
    EXPECT_TRUE(all[0].torn.empty());
    st.settle(all[0]);
  }
  EXPECT_EQ(slurp(file), l1 + "\n" + l2 + "\n" + l1 + "\n" + bad + "\n" + bad + "\n");
}

// A block's line whose newline alone never reached the disk is whole: it stays, and the next append
// starts a line of its own.
TEST(Store, ALastBlockLineMissingOnlyItsNewlineIsKept) {
  Blocks b;
  auto& [t, st, s, aid, file, l1, l2] = b;
  ASSERT_TRUE(st.save(s));
  ASSERT_TRUE(st.append_block(s.id, aid, l1));
  {
    std::ofstream f(file, std::ios::app | std::ios::binary);
    f << l2;  // kill -9 between the line and its newline
  }
  auto all = st.load_all();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].blocks[aid], (std::vector<std::string>{l1, l2}));
  EXPECT_TRUE(all[0].torn.empty());
  st.settle(all[0]);
  EXPECT_EQ(slurp(file), l1 + "\n" + l2);
  Store next(t.path + "/sessions");  // another run: the file opened again
  ASSERT_TRUE(next.append_block(s.id, aid, l1));
  EXPECT_EQ(slurp(file), l1 + "\n" + l2 + "\n" + l1 + "\n");
}

// An append that failed halfway (a full disk) leaves part of its line; the next append, by this
// run (the file held open) or by another (opened again), starts a line of its own, so the restore
// skips only the torn part, not the block written after it.
TEST(Store, AnAppendAfterAFailedOneIsNotGluedToItsTornPart) {
  Tmp t;
  auto s = full_session();
  const auto& aid = s.agents[0].id;
  const std::string l1 = R"({"role":"user","id":"0123abcd","content":"q"})";
  const std::string l2 = R"({"role":"assistant","id":"0123abce","content":"a"})";
  const std::string l3 = R"({"role":"user","id":"0123abcf","content":"again"})";
  const auto file = dir_of(t, s.id) + "/" + aid + ".blocks.jsonl";
  {
    Store st(t.path + "/sessions");
    ASSERT_TRUE(st.save(s));
    ASSERT_TRUE(st.append_block(s.id, aid, l1));
    // The disk full for all but 5 more bytes of the file (EFBIG past the limit, as ENOSPC would).
    struct rlimit old {};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
    auto* was = ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = old;
    small.rlim_cur = std::filesystem::file_size(file) + 5;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
    const bool failed = !st.append_block(s.id, aid, l2);
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
    ::signal(SIGXFSZ, was);
    ASSERT_TRUE(failed);
    ASSERT_EQ(slurp(file), l1 + "\n" + l2.substr(0, 5));
    ASSERT_TRUE(st.append_block(s.id, aid, l3));  // held open since the first append
    EXPECT_EQ(slurp(file), l1 + "\n" + l2.substr(0, 5) + "\n" + l3 + "\n");
  }
  {
    std::ofstream f(file, std::ios::app | std::ios::binary);
    f << l2.substr(0, 7);  // torn again, and this time another run appends next
  }
  Store again(t.path + "/sessions");
  ASSERT_TRUE(again.append_block(s.id, aid, l2));
  auto all = again.load_all();
  ASSERT_EQ(all.size(), 1u);
  // Each torn part a line of its own, skipped at the restore; every block whole on its line.
  EXPECT_EQ(all[0].blocks[aid], (std::vector<std::string>{l1, l2.substr(0, 5), l3, l2.substr(0, 7), l2}));
}

// A session.json no save writes (2 GB) is skipped from its size, not read whole at every start.
TEST(Store, ASessionJsonTooLargeIsSkippedUnread) {
  Tmp t;
  Store st(t.path + "/sessions");
  auto s = full_session();
  ASSERT_TRUE(st.save(s));
  std::filesystem::resize_file(dir_of(t, s.id) + "/session.json", std::uintmax_t{2} << 30);  // sparse
  std::vector<std::string> skipped;
  EXPECT_TRUE(st.load_all(&skipped).empty());
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0], s.id + ": session.json: too large (2147483648 bytes)");
}

// A save that would write more than a restore reads is refused, and the file before it stays:
// 45 MiB of control bytes in a plan are 270 MiB of JSON (`\u0001` each). The session had been
// saved whole and then dropped at the next start.
TEST(Store, ASaveLargerThanARestoreReadsIsRefusedAndTheFileBeforeItKept) {
  Tmp t;
  Store st(t.path + "/sessions");
  auto s = full_session();
  ASSERT_TRUE(st.save(s));
  const std::string before = slurp(dir_of(t, s.id) + "/session.json");
  s.agents[0].plan.assign(45u << 20, '\x01');
  auto r = st.save(s);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.ename().starts_with("session.json would be 28")) << r.ename();
  EXPECT_TRUE(r.ename().ends_with(" bytes, more than a restore reads (256 MiB)")) << r.ename();
  EXPECT_EQ(slurp(dir_of(t, s.id) + "/session.json"), before);
  std::vector<std::string> skipped;
  EXPECT_EQ(st.load_all(&skipped).size(), 1u);
  s.agents[0].plan.assign(4u << 20, '\x01');  // 24 MiB of JSON: saved, and restored
  ASSERT_TRUE(st.save(s));
  auto all = st.load_all(&skipped);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].record.agents[0].plan.size(), 4u << 20);
  EXPECT_TRUE(skipped.empty());
}

TEST(Store, ABlocksFileRemovedBetweenAppendsIsMadeAgainAndManyAgentsEachKeepTheirOwn) {
  Tmp t;
  Store st(t.path + "/sessions");
  auto s = full_session();
  const auto& aid = s.agents[0].id;
  std::string l1 = R"({"role":"user","id":"0123abcd","content":"q"})";
  std::string l2 = R"({"role":"assistant","id":"0123abce","content":"a"})";
  ASSERT_TRUE(st.append_block(s.id, aid, l1));
  auto file = dir_of(t, s.id) + "/" + aid + ".blocks.jsonl";
  ASSERT_EQ(slurp(file), l1 + "\n");
  // The file is held open between appends: removed meanwhile, the next line goes to a new one.
  std::filesystem::remove(file);
  ASSERT_TRUE(st.append_block(s.id, aid, l2));
  EXPECT_EQ(slurp(file), l2 + "\n");
  EXPECT_EQ(mode_of(file), 0600u);
  // More agents than files held open: each line still lands in its own agent's file.
  std::vector<std::string> ids;
  for (int i = 0; i < 40; i++) ids.push_back("agent-" + std::to_string(i));
  for (int round = 0; round < 2; round++)
    for (const auto& id : ids) ASSERT_TRUE(st.append_block(s.id, id, R"({"n":")" + id + "\"}"));
  for (const auto& id : ids) {
    const std::string line = R"({"n":")" + id + "\"}\n";
    EXPECT_EQ(slurp(dir_of(t, s.id) + "/" + id + ".blocks.jsonl"), line + line) << id;
  }
  // A removed session takes its open files along: a line after it makes the directory again.
  ASSERT_TRUE(st.remove_session(s.id));
  EXPECT_FALSE(std::filesystem::exists(dir_of(t, s.id)));
  ASSERT_TRUE(st.append_block(s.id, aid, l1));
  EXPECT_EQ(slurp(file), l1 + "\n");
}

TEST(Store, ASessionThatFailsIsSkippedAndLeftUntouched) {
  Tmp t;
  Store st(t.path + "/sessions");
  auto good = full_session();
  ASSERT_TRUE(st.save(good));
  // Bad JSON, with a torn blocks file that must not be cut.
  auto bad = dir_of(t, "bad-session");
  std::filesystem::create_directories(bad);
  spit(bad + "/session.json", "{\"id\":\"bad-session\",");
  spit(bad + "/a.blocks.jsonl", "{\"torn");
  // An id that differs from its directory.
  auto other = dir_of(t, "other");
  std::filesystem::create_directories(other);
  spit(other + "/session.json", R"({"id":"not-other","agents":[]})");
  // A directory without session.json, and a stray file.
  std::filesystem::create_directories(dir_of(t, "empty"));
  spit(t.path + "/sessions/stray.txt", "x");
  std::vector<std::string> skipped;
  auto all = st.load_all(&skipped);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].record.id, good.id);
  ASSERT_EQ(skipped.size(), 3u);
  EXPECT_EQ(skipped[0].rfind("bad-session: session.json: parse error at line 1, column ", 0), 0u) << skipped[0];
  EXPECT_EQ(skipped[1].rfind("empty: session.json: ", 0), 0u) << skipped[1];
  EXPECT_EQ(skipped[2], "other: session.json: id differs from the directory name");
  EXPECT_EQ(slurp(bad + "/session.json"), "{\"id\":\"bad-session\",");
  EXPECT_EQ(slurp(bad + "/a.blocks.jsonl"), "{\"torn");
}

// A FIFO planted as a session's session.json or an agent's blocks file would wait for a writer
// forever: each is skipped as not a regular file, and every other session still loads.
TEST(Store, AFifoInASessionDirectoryIsSkippedNotWaitedOn) {
  Tmp t;
  Store st(t.path + "/sessions");
  auto good = full_session();
  ASSERT_TRUE(st.save(good));
  auto piped = dir_of(t, "piped");
  std::filesystem::create_directories(piped);
  ASSERT_EQ(::mkfifo((piped + "/session.json").c_str(), 0600), 0);
  auto blocks = full_session();
  blocks.id = "b0000000-0000-4000-8000-000000000000";
  for (auto& a : blocks.agents) a.id[0] = 'c';
  ASSERT_TRUE(st.save(blocks));
  ASSERT_EQ(::mkfifo((dir_of(t, blocks.id) + "/" + blocks.agents[0].id + ".blocks.jsonl").c_str(), 0600), 0);
  std::vector<std::string> skipped;
  auto all = st.load_all(&skipped);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].record.id, good.id);
  ASSERT_EQ(skipped.size(), 2u);
  std::sort(skipped.begin(), skipped.end());
  EXPECT_EQ(skipped[0], blocks.id + ": " + blocks.agents[0].id + ".blocks.jsonl: not a regular file");
  EXPECT_EQ(skipped[1], "piped: session.json: not a regular file");
}

// A kill -9 during session/new, between the session directory's mkdir and its first save's
// rename, leaves a directory with only the save's temp file (or nothing): nobody was told the
// session exists, so it goes, rather than being reported unrestorable at every start. A
// directory with anything else in it is a session that failed to load, and stays untouched.
TEST(Store, ASessionNewCutShortIsRemovedNotReportedAtEveryStart) {
  Tmp t;
  Store st(t.path + "/sessions");
  auto good = full_session();
  ASSERT_TRUE(st.save(good));
  const std::string cut = "c0000000-0000-4000-8000-000000000000", empty = "e0000000-0000-4000-8000-000000000000",
                    kept = "d0000000-0000-4000-8000-000000000000";
  std::filesystem::create_directories(dir_of(t, cut));
  spit(dir_of(t, cut) + "/.session.json.tmp.123.0", "{\"id\":");
  std::filesystem::create_directories(dir_of(t, empty));
  std::filesystem::create_directories(dir_of(t, kept));
  spit(dir_of(t, kept) + "/.session.json.tmp.123.0", "{}");
  spit(dir_of(t, kept) + "/a.blocks.jsonl", "{}\n");
  std::vector<std::string> skipped;
  auto all = st.load_all(&skipped);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_FALSE(std::filesystem::exists(dir_of(t, cut)));
  EXPECT_FALSE(std::filesystem::exists(dir_of(t, empty)));
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0], kept + ": session.json: No such file or directory");
  EXPECT_TRUE(std::filesystem::exists(dir_of(t, kept) + "/a.blocks.jsonl"));
}

// A model whose cwd holds the data directory can put a FIFO where its blocks file was: the next
// block is not saved (an error, no wait for a reader that never comes, which held every thread
// of olliesrv behind the store's lock), and a later line goes on once the file is regular again.
TEST(Store, AFifoInPlaceOfABlocksFileFailsTheAppendAtOnce) {
  Tmp t;
  Store st(t.path + "/sessions");
  auto s = full_session();
  ASSERT_TRUE(st.save(s));
  const auto& aid = s.agents[0].id;
  const std::string file = dir_of(t, s.id) + "/" + aid + ".blocks.jsonl";
  ASSERT_TRUE(st.append_block(s.id, aid, R"({"n":1})"));
  std::filesystem::remove(file);
  ASSERT_EQ(::mkfifo(file.c_str(), 0600), 0);
  auto r = st.append_block(s.id, aid, R"({"n":2})");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.ename(), file + ": not a regular file");
  // With a reader waiting on it too.
  const int reader = ::open(file.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  r = st.append_block(s.id, aid, R"({"n":3})");
  ::close(reader);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.ename(), file + ": not a regular file");
  r = st.append_compaction(s.id, aid, {});
  ASSERT_TRUE(r);  // the compaction file is its own
  std::filesystem::remove(dir_of(t, s.id) + "/" + aid + ".compaction.jsonl");
  ASSERT_EQ(::mkfifo((dir_of(t, s.id) + "/" + aid + ".compaction.jsonl").c_str(), 0600), 0);
  EXPECT_FALSE(st.append_compaction(s.id, aid, {}));
  std::filesystem::remove(file);
  ASSERT_TRUE(st.append_block(s.id, aid, R"({"n":4})"));
  EXPECT_EQ(slurp(file), "{\"n\":4}\n");
}

// A restored session's directory is made 0700 again and loses the temp files of saves a kill -9
// cut short; a session directory that is a symbolic link is named as skipped, never followed.
TEST(Store, SettlingRemovesStaleTempFilesAndASymlinkedSessionIsNamed) {
  Tmp t;
  Store st(t.path + "/sessions");
  auto s = full_session();
  ASSERT_TRUE(st.save(s));
  const std::string dir = dir_of(t, s.id);
  spit(dir + "/.session.json.tmp.4242.0", "half a save");
  ::chmod(dir.c_str(), 0755);
  std::filesystem::create_directories(t.path + "/elsewhere");
  std::filesystem::create_directory_symlink(t.path + "/elsewhere", t.path + "/sessions/linked");
  std::filesystem::create_directories(t.path + "/sessions/linkedfile");
  std::filesystem::create_symlink(dir + "/session.json", t.path + "/sessions/linkedfile/session.json");
  std::vector<std::string> skipped;
  auto all = st.load_all(&skipped);
  ASSERT_EQ(all.size(), 1u);
  std::sort(skipped.begin(), skipped.end());
  EXPECT_EQ(skipped, (std::vector<std::string>{"linked: a symbolic link, not followed",
                                               "linkedfile: session.json: a symbolic link, not followed"}));
  st.settle(all[0]);
  EXPECT_FALSE(std::filesystem::exists(dir + "/.session.json.tmp.4242.0"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/session.json"));
  struct stat sb {};
  ASSERT_EQ(::stat(dir.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0700u);
}

TEST(Store, AFailingAgentLeavesTheOtherAgentsFilesUntouched) {
  Tmp t;
  Store st(t.path + "/sessions");
  auto s = full_session();
  s.agents[1].id = "../escape";
  auto dir = dir_of(t, s.id);
  std::filesystem::create_directories(dir);
  spit(dir + "/session.json", to_json(s));
  spit(dir + "/" + s.agents[0].id + ".blocks.jsonl", "{\"torn");
  std::vector<std::string> skipped;
  EXPECT_TRUE(st.load_all(&skipped).empty());
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0], s.id + ": invalid agent id: ../escape");
  EXPECT_EQ(slurp(dir + "/" + s.agents[0].id + ".blocks.jsonl"), "{\"torn");
}

TEST(Store, RestoredHistoriesLoseCallsWithoutResults) {
  Tmp t;
  Store st(t.path + "/sessions");
  SessionRecord s;
  s.id = "s1";
  AgentRecord a;
  a.id = "a1";
  a.messages = {
      msg(Role::user, "go"),
      assistant("", {"c1", "c2"}),       // c2 never got a result
      result("c1"),
      assistant("text kept", {"c3"}),    // interrupted: text stays, call goes
      assistant("", {"c4"}),             // nothing left: removed
      result("c9"),                      // a result without a call
      msg(Role::assistant, "final"),
  };
  s.agents.push_back(a);
  ASSERT_TRUE(st.save(s));
  auto all = st.load_all();
  ASSERT_EQ(all.size(), 1u);
  const auto& m = all[0].record.agents[0].messages;
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].msg.content, "go");
  ASSERT_EQ(m[1].msg.tool_calls.size(), 1u);
  EXPECT_EQ(m[1].msg.tool_calls[0].id, "c1");
  EXPECT_EQ(m[2].msg.tool_call_id, "c1");
  EXPECT_EQ(m[3].msg.content, "text kept");
  EXPECT_TRUE(m[3].msg.tool_calls.empty());
  EXPECT_EQ(m[4].msg.content, "final");
}

// Call ids repeat across rounds (gemini and ollama send none: each response counts call_0 again):
// a result answers only the round before it. A message whose calls all go keeps no reasoning.
TEST(Store, ARestoredResultAnswersOnlyTheRoundBeforeIt) {
  Tmp t;
  Store st(t.path + "/sessions");
  SessionRecord s;
  s.id = "s1";
  AgentRecord a;
  a.id = "a1";
  auto cut_off = assistant("looking", {"call_0"});  // the round killed before its result
  cut_off.msg.reasoning_items = {R"({"thoughtSignature":"sig"})"};
  cut_off.msg.reasoning_backend = "gemini";
  a.messages = {msg(Role::user, "go"), assistant("", {"call_0"}), result("call_0"), cut_off};
  s.agents.push_back(a);
  ASSERT_TRUE(st.save(s));
  auto all = st.load_all();
  ASSERT_EQ(all.size(), 1u);
  const auto& m = all[0].record.agents[0].messages;
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[1].msg.tool_calls.size(), 1u);
  EXPECT_EQ(m[2].msg.tool_call_id, "call_0");
  EXPECT_EQ(m[3].msg.content, "looking");
  EXPECT_TRUE(m[3].msg.tool_calls.empty());
  EXPECT_TRUE(m[3].msg.reasoning_items.empty());
  EXPECT_TRUE(m[3].msg.reasoning_backend.empty());
  // And a second result for one call is no result.
  std::vector<HistoryMessage> twice{assistant("", {"c1"}), result("c1", "one"), result("c1", "two")};
  drop_unanswered(twice);
  ASSERT_EQ(twice.size(), 2u);
  EXPECT_EQ(twice[1].msg.content, "one");
}

TEST(Store, AppendsCompactionsAndRemoves) {
  Tmp t;
  Store st(t.path + "/sessions");
  auto s = full_session();
  ASSERT_TRUE(st.save(s));
  const auto& aid = s.agents[0].id;
  ASSERT_TRUE(st.append_compaction(s.id, aid, s.agents[0].messages));
  auto file = dir_of(t, s.id) + "/" + aid + ".compaction.jsonl";
  auto text = slurp(file);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(text.find('\n'), text.size() - 1) << "one line";
  auto j = nlohmann::json::parse(text);
  EXPECT_TRUE(j["time"].is_number_integer());
  EXPECT_EQ(j["messages"].size(), s.agents[0].messages.size());
  EXPECT_EQ(mode_of(file), 0600u);
  ASSERT_TRUE(st.append_block(s.id, aid, "{}"));
  ASSERT_TRUE(st.mark_killed(s.id, aid));
  EXPECT_TRUE(std::filesystem::exists(dir_of(t, s.id) + "/" + aid + ".killed"));
  ASSERT_TRUE(st.remove_agent(s.id, aid));
  EXPECT_FALSE(std::filesystem::exists(dir_of(t, s.id) + "/" + aid + ".killed"));
  EXPECT_FALSE(std::filesystem::exists(file));
  EXPECT_FALSE(std::filesystem::exists(dir_of(t, s.id) + "/" + aid + ".blocks.jsonl"));
  ASSERT_TRUE(st.remove_session(s.id));
  EXPECT_FALSE(std::filesystem::exists(dir_of(t, s.id)));
  EXPECT_TRUE(st.load_all().empty());
  EXPECT_TRUE(std::filesystem::is_empty(t.path + "/sessions"));
}

// §7.7 and a kill -9 in the middle of a kill: a session's removal that a crash cut short leaves
// no directory the next start tries to restore, and that start removes the rest; an agent kill
// cut between the session's save and the agent's files leaves files the restore removes.
TEST(Store, KillsACrashCutShortLeaveNothingBehindAfterTheNextStart) {
  Tmp t;
  Store st(t.path + "/sessions");
  auto gone = full_session();
  ASSERT_TRUE(st.save(gone));
  ASSERT_TRUE(st.append_block(gone.id, gone.agents[0].id, "{}"));
  // What remove_session's first step leaves: the directory renamed out of the restore's sight.
  const std::string renamed = t.path + "/sessions/." + gone.id + ".killed";
  std::filesystem::rename(dir_of(t, gone.id), renamed);
  std::filesystem::remove(renamed + "/session.json");
  auto kept = full_session();
  kept.id = "5d0c1d7e-0000-4000-8000-000000000001";
  ASSERT_TRUE(st.save(kept));
  const std::string dir = dir_of(t, kept.id);
  ASSERT_TRUE(st.append_block(kept.id, kept.agents[0].id, "{}"));
  spit(dir + "/0ff1ce00-0000-4000-8000-000000000000.blocks.jsonl", "{}\n");  // an agent killed before
  spit(dir + "/0ff1ce00-0000-4000-8000-000000000000.compaction.jsonl", "{}\n");
  spit(dir + "/0ff1ce00-0000-4000-8000-000000000000.killed", "");  // its kill's mark (mark_killed)
  // A kill cut before its save: the agent stays, with its blocks; the mark goes.
  spit(dir + "/" + kept.agents[0].id + ".killed", "");
  // An agent a hand edit of session.json dropped, no kill under way: its work is kept.
  const std::string dropped = dir + "/0ff1ce00-0000-4000-8000-0000000000aa.blocks.jsonl";
  spit(dropped, "{\"role\":\"user\"}\n");
  // A directory of a mark's name is no mark (a tool can make one when the data root is in its cwd).
  std::filesystem::create_directories(dir + "/0ff1ce00-0000-4000-8000-0000000000aa.killed");
  // Names olliesrv never makes are someone's own files: a copy, a note, a directory.
  const std::string copy = dir + "/" + kept.agents[0].id + ".backup.blocks.jsonl", note = dir + "/notes.compaction.jsonl",
                    aside = t.path + "/sessions/.old.killed";
  spit(copy, "{}\n");
  spit(note, "{}\n");
  std::filesystem::create_directories(aside);
  std::vector<std::string> skipped;
  auto all = st.load_all(&skipped);
  EXPECT_TRUE(skipped.empty()) << skipped[0];
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].record.id, kept.id);
  EXPECT_FALSE(std::filesystem::exists(renamed));
  st.settle(all[0]);
  EXPECT_FALSE(std::filesystem::exists(dir + "/0ff1ce00-0000-4000-8000-000000000000.blocks.jsonl"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/0ff1ce00-0000-4000-8000-000000000000.compaction.jsonl"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/0ff1ce00-0000-4000-8000-000000000000.killed"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/" + kept.agents[0].id + ".killed"));
  EXPECT_EQ(slurp(dropped), "{\"role\":\"user\"}\n");
  EXPECT_TRUE(std::filesystem::is_directory(dir + "/0ff1ce00-0000-4000-8000-0000000000aa.killed"));
  EXPECT_EQ(slurp(dir + "/" + kept.agents[0].id + ".blocks.jsonl"), "{}\n");
  EXPECT_TRUE(std::filesystem::exists(dir + "/session.json"));
  EXPECT_TRUE(std::filesystem::exists(copy));
  EXPECT_TRUE(std::filesystem::exists(note));
  EXPECT_TRUE(std::filesystem::exists(aside));
}

TEST(Store, RefusesIdsThatAreNotOnePathComponent) {
  Tmp t;
  Store st(t.path + "/sessions");
  SessionRecord s;
  s.id = "../x";
  EXPECT_EQ(st.save(s).ename(), "invalid session id: ../x");
  EXPECT_FALSE(st.append_block("s", "a/b", "{}"));
  EXPECT_FALSE(st.append_block("s", "a", "two\nlines"));
  EXPECT_FALSE(st.remove_session(".."));
  EXPECT_FALSE(st.remove_agent("s", ""));
  EXPECT_TRUE(std::filesystem::exists(t.path));
}

TEST(Store, RestoresManySessions) {
  Tmp t;
  Store st(t.path + "/sessions");
  constexpr int N = 300;
  for (int i = 0; i < N; i++) {
    SessionRecord s;
    s.id = "session-" + std::to_string(i);
    AgentRecord a;
    a.id = "agent-" + std::to_string(i);
    a.messages = {msg(Role::user, "hi"), msg(Role::assistant, "hello")};
    s.agents.push_back(a);
    // Written directly: a thousand fsyncs would time the disk, not the restore.
    auto dir = dir_of(t, s.id);
    std::filesystem::create_directories(dir);
    spit(dir + "/session.json", to_json(s));
    spit(dir + "/" + a.id + ".blocks.jsonl", R"({"role":"user","id":"0123abcd","content":"hi"})" "\n");
  }
  auto t0 = std::chrono::steady_clock::now();
  auto all = st.load_all();
  auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("restored %d sessions in %.1f ms\n", N, ms);
  ASSERT_EQ(all.size(), static_cast<std::size_t>(N));
  for (const auto& l : all) {
    ASSERT_EQ(l.record.agents.size(), 1u);
    EXPECT_EQ(l.record.agents[0].messages.size(), 2u);
    EXPECT_EQ(l.blocks.at(l.record.agents[0].id).size(), 1u);
  }
}
