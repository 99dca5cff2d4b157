// The first real conversation, end to end (issue 8): the real olliesrv, its real toolsrv running
// the shipped tools under Landlock, the fake provider over real HTTP, read through chat,
// chat.raw, log, log.raw and block.
#include <gtest/gtest.h>

#include <sys/inotify.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <regex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "olliesrv/world.hpp"

using namespace convo;
using json = nlohmann::json;

namespace {

std::vector<std::string> roles(const std::vector<json>& blocks) {
  std::vector<std::string> out;
  for (const auto& b : blocks) out.push_back(b["role"]);
  return out;
}

/// The body of the n-th chat request the fake provider received.
/// A response that calls shell once with `cmd`.
json shell_round(const std::string& id, const std::string& cmd) {
  return {{"tool_calls", json::array({{{"id", id}, {"name", "shell"}, {"arguments", {{"cmd", cmd}}}}})}};
}

}  // namespace

TEST(Conversation, APromptIsAnsweredIntoChatLogAndBlocks) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  const auto fresh = w.read(a + "/stats");  // §8.1.1: the system prompt is rendered at creation
  auto chat = w.open(a + "/chat");
  auto raw = w.open(a + "/chat.raw");
  w.fake.push({{"text", "Hello there, how can I help?"}, {"usage", {{"input", 120}, {"output", 9}}}});
  ASSERT_TRUE(w.write(a + "/prompt", "hi\n"));
  auto text = World::read_until(chat, "how can I help?");
  EXPECT_NE(text.find("user: hi\n\nHello there, how can I help?"), std::string::npos) << text;
  ASSERT_TRUE(w.wait_state(a, "idle"));
  auto log = w.read(a + "/log");
  ASSERT_TRUE(log);
  EXPECT_NE(log->find("user: hi\n\nHello there, how can I help?\n\n"), std::string::npos) << *log;
  auto lr = w.read(a + "/log.raw");
  ASSERT_TRUE(lr);
  auto blocks = blocks_of(*lr);
  ASSERT_GE(blocks.size(), 2u) << *lr;
  EXPECT_EQ(roles(blocks).back(), "assistant");
  EXPECT_EQ(blocks.back()["content"], "Hello there, how can I help?");
  EXPECT_EQ(blocks.back()["id"].get<std::string>().size(), 8u);
  // chat.raw replays the same finalized blocks.
  auto rawtext = World::read_until(raw, "how can I help?\"}");
  EXPECT_NE(rawtext.find("\"role\":\"user\""), std::string::npos) << rawtext;
  // block reads a block by its id.
  auto one = w.rdwr(a + "/block", blocks.back()["id"].get<std::string>());
  ASSERT_TRUE(one) << one.ename();
  EXPECT_EQ(json::parse(*one), blocks.back());
  auto missing = w.rdwr(a + "/block", "00000000");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.ename(), "block not found: 00000000");
  EXPECT_EQ(w.rdwr(a + "/block", "xyz").ename(), "invalid block id: xyz");
  auto stats = w.read(a + "/stats");
  ASSERT_TRUE(stats);
  EXPECT_NE(stats->find("input=120\noutput=9\n"), std::string::npos) << *stats;
  EXPECT_NE(stats->find("requests=1\n"), std::string::npos) << *stats;
  EXPECT_NE(stats->find("contextLength=65536\n"), std::string::npos) << *stats;
  // §8.5.1 as of now: what the request sent (system prompt and prompt) and the answer, bytes / 4.
  {
    const auto sent = request_body(w, 0);
    std::size_t bytes = std::string("Hello there, how can I help?").size();
    for (auto& m : sent["messages"]) bytes += m["content"].get<std::string>().size();
    EXPECT_NE(stats->find("contextTokens=" + std::to_string(bytes / 4) + "\n"), std::string::npos) << *stats;
    ASSERT_EQ(*w.rdwr(a + "/ctl", "clear"), "cleared\n");  // the system prompt stays
    const auto system = sent["messages"][0]["content"].get<std::string>().size();
    auto now = w.read(a + "/stats");
    EXPECT_NE(now->find("contextTokens=" + std::to_string(system / 4) + "\n"), std::string::npos) << *now;
    ASSERT_TRUE(fresh);
    EXPECT_NE(fresh->find("contextTokens=" + std::to_string(system / 4) + "\n"), std::string::npos) << *fresh;
  }
  // The request carried the system prompt and the tools of the default profile.
  auto body = request_body(w, 0);
  ASSERT_TRUE(body.is_object());
  EXPECT_EQ(body["messages"][0]["role"], "system");
  EXPECT_NE(body["messages"][0]["content"].get<std::string>().find("# Environment"), std::string::npos);
  bool has_read = false;
  for (auto& t : body["tools"]) has_read = has_read || t["function"]["name"] == "file_read";
  EXPECT_TRUE(has_read) << body["tools"].dump();
  // Every schema carries §6.8's four dispatch flags with its table's types, bare: the system
  // prompt says once what they do (a description in each schema repeated it per tool).
  const json flags = {{"timeout", {{"type", "integer"}, {"minimum", 0}}},
                      {"background", {{"type", "boolean"}}},
                      {"bypass", {{"type", "boolean"}}},
                      {"sandbox", {{"type", "string"}}}};
  for (auto& t : body["tools"])
    for (auto& [flag, schema] : flags.items())
      EXPECT_EQ(t["function"]["parameters"]["properties"][flag], schema) << t["function"]["name"];
  const auto system = body["messages"][0]["content"].get<std::string>();
  for (const char* said : {"`timeout`", "`bypass: true`", "`background: true`"})
    EXPECT_NE(system.find(said), std::string::npos) << said;
}

// §3.1: a model's window is asked of its provider once, not once per agent (a fan-out of
// sub-agents paid a `GET /models` each), until root `invalidate`.
TEST(Conversation, AModelsWindowIsAskedOnceForAllItsAgents) {
  World w;
  auto s = w.session("work");
  auto model_lists = [&] {
    std::size_t n = 0;
    for (const auto& r : w.fake.requests()) n += r.path.ends_with("/models") ? 1 : 0;
    return n;
  };
  const auto first = w.agent(s, "first");
  EXPECT_NE(w.read(first + "/stats")->find("contextLength=65536\n"), std::string::npos);
  const std::size_t asked = model_lists();
  EXPECT_GE(asked, 1u);
  for (const char* name : {"second", "third"}) {
    const auto a = w.agent(s, name);
    EXPECT_NE(w.read(a + "/stats")->find("contextLength=65536\n"), std::string::npos) << *w.read(a + "/stats");
  }
  EXPECT_EQ(model_lists(), asked);
  ASSERT_TRUE(w.rdwr("ctl", "invalidate"));
  EXPECT_NE(w.read(first + "/stats")->find("contextLength=65536\n"), std::string::npos);
  EXPECT_GT(model_lists(), asked);
}

// §2.8.2, §8.5.1: contextLength is the current model's window before any request: known without
// asking (anthropic: 200000), or asked of the provider at creation (openai-style: /v1/models).
TEST(Conversation, StatsShowAKnownContextLengthBeforeTheFirstRequest) {
  World w;
  w.restart_with({"OLLIE_ANTHROPIC_URL=" + w.fake.url(), "OLLIE_ANTHROPIC_KEY=sk-test"});
  auto s = w.session("work");
  auto open = w.agent(s, "main");
  auto claude = w.agent(s, "claude", "backend=anthropic model=fake-model");
  EXPECT_NE(w.read(open + "/stats")->find("contextLength=65536\ncontextPercent="), std::string::npos)
      << *w.read(open + "/stats");
  EXPECT_NE(w.read(claude + "/stats")->find("contextLength=200000\ncontextPercent="), std::string::npos)
      << *w.read(claude + "/stats");
  ASSERT_TRUE(w.write(open + "/cfg", "backend=anthropic model=fake-model")) << w.log_text();
  EXPECT_NE(w.read(open + "/stats")->find("contextLength=200000\n"), std::string::npos) << *w.read(open + "/stats");
  ASSERT_TRUE(w.rdwr("ctl", "invalidate"));
  EXPECT_NE(w.read(claude + "/stats")->find("contextLength=200000\n"), std::string::npos) << *w.read(claude + "/stats");
  // A switch to a model whose window must be asked asks at once, as agent/new does.
  ASSERT_TRUE(w.write(claude + "/cfg", "backend=openai model=fake-model")) << w.log_text();
  EXPECT_NE(w.read(claude + "/stats")->find("contextLength=65536\n"), std::string::npos) << *w.read(claude + "/stats");
  EXPECT_EQ(chat_requests(w), 0u);
  // A restored agent's window is asked at its first read of stats, not shown as unknown.
  w.stop_server(SIGKILL);
  w.start();
  EXPECT_NE(w.read(claude + "/stats")->find("contextLength=65536\n"), std::string::npos) << *w.read(claude + "/stats");
  EXPECT_EQ(chat_requests(w), 0u);
}

// A models endpoint that never finishes (up to the 60 s fetch deadline) holds neither agent/new nor
// a read of stats: each waits 2 s for the one ask, then shows the unknown 128000 (§1.7: a Read
// does not block on a provider).
TEST(Conversation, AStalledWindowAskHoldsNeitherANewAgentNorStats) {
  World w(json{{"route_faults", {{"models", "stall"}}}});
  auto s = w.session("work");
  const auto start = std::chrono::steady_clock::now();
  auto a = w.agent(s, "main");
  auto stats = w.read(a + "/stats");
  ASSERT_TRUE(stats);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));  // not the 60 s deadline, twice
  EXPECT_NE(stats->find("contextLength=128000\n"), std::string::npos) << *stats;
  std::size_t asked = 0;
  for (auto& r : w.fake.requests()) asked += r.path.ends_with("/models");
  EXPECT_EQ(asked, 1u);  // the read waited for the ask agent/new started
}

// Nor does it hold a turn: each request, a retry's among them, waits its 2 s for the ask at most,
// so the waits stay the ones §8.2's `retry` blocks announce (here shortened to milliseconds).
TEST(Conversation, AStalledWindowAskHoldsNoRequestAndNoRetry) {
  World w(json{{"route_faults", {{"models", "stall"}}}});
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  for (int i = 0; i < 2; i++) w.fake.push({{"fault", "server_error"}});
  w.fake.push({{"text", "done"}});
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 1; }, 40s)) << w.log_text();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));  // not the 60 s ask, per request
  EXPECT_EQ(contents(w, a, "retry").size(), 2u);
}

// §1.4: SIGTERM ends olliesrv at once even while model lists trickle in (a byte every 100 ms, for
// a minute) on both threads of its blocking pool, an agent's window ask and a read of `models`:
// the fetches end first, or the shutdown's own work would wait behind them.
TEST(Conversation, ShutdownIsNotHeldByModelListsTricklingIn) {
  World w(json{{"route_faults", {{"models", "stall"}}}});
  auto s = w.session("work");
  w.agent(s, "main");
  testing_support::Child reader({testing_support::built("bin/ollie-9p"), "-a", "unix!" + w.sock, "read", "models"}, w.env());
  ASSERT_TRUE(eventually([&] {
    std::size_t asked = 0;
    for (auto& r : w.fake.requests()) asked += r.path.ends_with("/models");
    return asked >= 2;
  }));
  const auto start = std::chrono::steady_clock::now();
  w.stop_server(SIGTERM);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  ASSERT_TRUE(reader.wait());
  EXPECT_NE(w.log_text().find("shutting down"), std::string::npos) << w.log_text();
}

// A provider whose model list stalls, asked for the windows of many models (a list each, up to
// 60 s), holds no save: the asks wait among themselves, and another session is made at once.
TEST(Conversation, ModelListsThatStallHoldNoSave) {
  World w(json{{"route_faults", {{"models", "stall"}}}});
  auto s = w.session("work");
  std::vector<std::unique_ptr<testing_support::Child>> asking;
  for (int i = 0; i < 4; i++) {
    asking.push_back(std::make_unique<testing_support::Child>(
        std::vector<std::string>{testing_support::built("bin/ollie-9p"), "-a", "unix!" + w.sock, "rdwr", s + "/agent/new"},
        w.env()));
    asking.back()->write_stdin("name=a" + std::to_string(i) + " model=m" + std::to_string(i) + "\n");
    asking.back()->close_stdin();
  }
  ASSERT_TRUE(eventually([&] {
    std::size_t asked = 0;
    for (auto& r : w.fake.requests()) asked += r.path.ends_with("/models");
    return asked >= 2;
  }));
  for (auto& a : asking) ASSERT_TRUE(a->wait());  // each waits its 2 s for its window, no more
  const auto start = std::chrono::steady_clock::now();
  w.session("other");
  ASSERT_TRUE(w.rdwr(s + "/agent/a0/ctl", "name b0"));  // a verb that saves
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// §8.5.1: a window the provider cannot tell is unknown (128000), cached like a known one: a models
// endpoint that fails (here a 12 MiB list, refused) is asked once, not before every request (a
// stalled one cost 60 s each time); `invalidate` asks again.
TEST(Conversation, AWindowTheProviderCannotTellIsAskedOnce) {
  World w(json{{"route_faults", {{"models", "oversized"}}}});
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  auto asked = [&] {
    std::size_t n = 0;
    for (auto& r : w.fake.requests()) n += r.path.ends_with("/models");
    return n;
  };
  EXPECT_EQ(asked(), 1u);
  EXPECT_NE(w.read(a + "/stats")->find("contextLength=128000\n"), std::string::npos) << *w.read(a + "/stats");
  auto answered = [&](std::size_t n) { return eventually([&] { return contents(w, a, "assistant").size() == n; }); };
  for (std::size_t i = 1; i <= 2; ++i) {
    w.fake.push({{"text", "ok"}});
    ASSERT_TRUE(w.write(a + "/prompt", "hi\n"));
    ASSERT_TRUE(answered(i));
  }
  EXPECT_EQ(chat_requests(w), 2u);
  EXPECT_EQ(asked(), 1u);
  ASSERT_TRUE(w.rdwr("ctl", "invalidate"));
  w.fake.push({{"text", "ok"}});
  ASSERT_TRUE(w.write(a + "/prompt", "again\n"));
  ASSERT_TRUE(answered(3));
  EXPECT_EQ(asked(), 2u);
}

// An agent restored while its backend's key is missing: its prompt's error says what to set,
// and once the key is there (here in backends.conf) the next prompt is answered, no restart.
TEST(Conversation, ARestoredAgentWithoutItsKeySaysWhatToSet) {
  World w;
  w.restart_with({"OLLIE_ANTHROPIC_URL=" + w.fake.url(), "OLLIE_ANTHROPIC_KEY=sk-test"});
  auto a = w.agent(w.session("work"), "claude", "backend=anthropic model=fake-model");
  w.restart_with({"OLLIE_ANTHROPIC_URL=" + w.fake.url(), "OTHER_ANTHROPIC_KEY=sk-test"});
  auto chat = w.open(a + "/chat");
  ASSERT_TRUE(w.write(a + "/prompt", "hello\n"));
  const auto said = World::read_until(chat, "missing key: set OLLIE_ANTHROPIC_KEY");
  EXPECT_NE(said.find("error: anthropic: missing key: set OLLIE_ANTHROPIC_KEY"), std::string::npos) << said;
  EXPECT_EQ(said.find("anthropic: anthropic:"), std::string::npos) << said;
  write_file(w.config + "/backends.conf", "[anthropic]\nkey_env = OTHER_ANTHROPIC_KEY\n");
  ASSERT_TRUE(w.rdwr("ctl", "invalidate"));
  w.fake.push({{"text", "hi there"}});
  ASSERT_TRUE(w.write(a + "/prompt", "again\n"));
  EXPECT_NE(World::read_until(chat, "hi there").find("hi there"), std::string::npos);
}

// statewait without a change for 5 s answers the current state (the heartbeat), never nothing:
// a client looping on `read statewait` always has a state to show.
TEST(Conversation, StatewaitHeartbeatIsTheCurrentState) {
  World w;
  auto a = w.agent(w.session("work"), "main");
  auto f = w.open(a + "/statewait");
  auto r = f.read(64);
  ASSERT_TRUE(r) << r.ename();
  EXPECT_EQ(*r, "idle\n");
  EXPECT_EQ(w.log_text().find("no tools in"), std::string::npos) << "tools are installed: " << w.log_text();
}

TEST(Conversation, AToolRoundRunsTheShippedToolUnderToolsrv) {
  World w;
  write_file(w.project + "/notes.txt", "alpha\nbeta\n");
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"text", "Let me look."},
               {"tool_calls", json::array({{{"id", "call_1"}, {"name", "file_read"}, {"arguments", {{"path", "notes.txt"}}}}})}});
  w.fake.push({{"text", "It says alpha and beta."}});
  auto chat = w.open(a + "/chat");
  ASSERT_TRUE(w.write(a + "/prompt", "what is in notes.txt?"));
  auto text = World::read_until(chat, "alpha and beta.");
  EXPECT_NE(text.find("→ file_read {\"path\":\"notes.txt\"}"), std::string::npos) << text;
  ASSERT_TRUE(w.wait_state(a, "idle"));
  auto blocks = blocks_of(*w.read(a + "/log.raw"));
  auto r = roles(blocks);
  std::vector<std::string> tail(r.end() - 5, r.end());
  EXPECT_EQ(tail, (std::vector<std::string>{"user", "assistant", "call", "tool", "assistant"}));
  const auto& tool = blocks[blocks.size() - 2];
  EXPECT_EQ(tool["name"], "file_read");
  EXPECT_NE(tool["content"].get<std::string>().find("alpha"), std::string::npos) << tool.dump();
  // The second request carried the result as a tool message for call_1.
  auto body = request_body(w, 1);
  bool found = false;
  for (auto& m : body["messages"])
    if (m["role"] == "tool" && m["tool_call_id"] == "call_1") found = m["content"].get<std::string>().find("beta") != std::string::npos;
  EXPECT_TRUE(found) << body.dump();
  // session.json (§7.7): the call's message without `reasoning`/`reasoningBackend`, none having come.
  ASSERT_TRUE(w.rdwr(s + "/ctl", "save"));
  const auto saved = json::parse(read_file(w.data + "/sessions/" + id_of(w, s) + "/session.json"));
  const auto& msgs = saved["agents"][0]["messages"];
  ASSERT_EQ(msgs.size(), 4u) << msgs.dump();
  EXPECT_EQ(msgs[1]["tool_calls"][0]["id"], "call_1");
  EXPECT_FALSE(msgs[1].contains("reasoning")) << msgs[1].dump();
  EXPECT_FALSE(msgs[1].contains("reasoningBackend")) << msgs[1].dump();
}

// §1.5: an agent's secret is never persisted nor served. A tool that prints its environment
// shows it OLLIE_AUTH: its result used to keep it, in log.raw (which every agent may read), the
// blocks file and session.json, and another agent could attach as this one with it.
TEST(Conversation, AToolPrintingItsEnvironmentDoesNotLeakTheAgentsSecret) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"tool_calls", json::array({{{"id", "e1"}, {"name", "shell"}, {"arguments", {{"cmd", "env; env >&2"}}}}})}});
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "show the environment"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 2; })) << w.log_text();
  ASSERT_TRUE(w.wait_state(a, "idle"));
  const auto tool = contents(w, a, "tool");
  ASSERT_EQ(tool.size(), 1u);
  EXPECT_NE(tool[0].find("OLLIE_AUTH=[redacted]"), std::string::npos) << tool[0];
  EXPECT_NE(tool[0].find("OLLIE_UNAME="), std::string::npos) << tool[0];
  ASSERT_TRUE(w.rdwr(s + "/ctl", "save"));
  const std::regex secret("OLLIE_AUTH=[0-9a-f]{64}");
  const std::string dir = w.data + "/sessions/" + id_of(w, s);
  for (const auto& e : std::filesystem::directory_iterator(dir))
    EXPECT_FALSE(std::regex_search(read_file(e.path().string()), secret)) << e.path();
  EXPECT_FALSE(std::regex_search(*w.read(a + "/log.raw"), secret));
  EXPECT_FALSE(std::regex_search(request_body(w, 1).dump(), secret));
}

TEST(Conversation, UnknownToolsAndBadArgumentsBecomeErrorResults) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main", "agent=observer");
  w.fake.push({{"tool_calls", json::array({{{"id", "c1"}, {"name", "shell"}, {"arguments", {{"cmd", "ls"}}}},
                                            {{"id", "c2"}, {"name", "file_read"}, {"arguments", "not json"}},
                                            {{"id", "c3"}, {"name", "file_read"}, {"arguments", {{"path", "x"}, {"timeout", "x"}}}},
                                            // §6.8 `integer ≥ 0`: JSON Schema's integers, any size (a year at most is kept)
                                            {{"id", "c4"}, {"name", "file_read"}, {"arguments", {{"path", "y"}, {"timeout", 1000.0}}}},
                                            {{"id", "c5"}, {"name", "file_read"}, {"arguments", {{"path", "z"}, {"timeout", 99999999999}}}},
                                            {{"id", "c6"}, {"name", "file_read"}, {"arguments", {{"path", "x"}, {"timeout", 1.5}}}},
                                            {{"id", "c7"}, {"name", "file_read"}, {"arguments", {{"path", "x"}, {"timeout", -1}}}}})}});
  w.fake.push({{"text", "ok"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 2; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  std::vector<std::string> results;
  for (auto& b : blocks_of(*w.read(a + "/log.raw")))
    if (b["role"] == "tool") results.push_back(b["content"]);
  ASSERT_EQ(results.size(), 7u);
  EXPECT_EQ(results[0], "error: unknown tool: shell; it exists but is not loaded: call tool_load with shell first");
  EXPECT_EQ(results[1], "error: invalid arguments: not JSON");
  EXPECT_EQ(results[2], "error: invalid timeout: x");
  EXPECT_EQ(results[3], "error: exit status 1\nfile not found: y\n");  // it ran
  EXPECT_EQ(results[4], "error: exit status 1\nfile not found: z\n");
  EXPECT_EQ(results[5], "error: invalid timeout: 1.5");
  EXPECT_EQ(results[6], "error: invalid timeout: -1");
}

// Arguments nested a million deep (the model's text, or a hostile provider's) are refused by the
// engine, which dumps what it parses: the call gets its error, which says why, and olliesrv lives on.
TEST(Conversation, ArgumentsNestedAMillionDeepAreAnErrorResult) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  // 30,000 deep fits the backend's bounds on a call (60 KB): kept in the history as it came, its
  // save dumped it, one stack frame a level, and took olliesrv down.
  for (int depth : {1'000'000, 30'000}) {
    const std::string deep = std::string(static_cast<std::size_t>(depth), '[') + std::string(static_cast<std::size_t>(depth), ']');
    w.fake.push({{"tool_calls", json::array({{{"id", "c" + std::to_string(depth)}, {"name", "file_read"}, {"arguments", "{\"path\": " + deep + "}"}}})}, {"chunk", 4 << 20}});
  }
  w.fake.push({{"text", "ok"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 3; })) << w.log_text();
  ASSERT_TRUE(w.wait_state(a, "idle"));
  EXPECT_EQ(contents(w, a, "tool"), (std::vector<std::string>(2, "error: invalid arguments: nested deeper than 128 levels")));
  EXPECT_TRUE(w.read("session/idx"));
  ASSERT_TRUE(w.rdwr(s + "/ctl", "save"));
  w.stop_server(SIGKILL);
  w.start();
  EXPECT_EQ(w.read_state(a), "idle") << w.log_text();
}

// A tool name is the model's text: control characters in it are escaped in the state, so it can
// neither split a `statewait` or `agent/idx` line nor forge an `event` line (§5.1, §2.8.1).
TEST(Conversation, AToolNameCannotForgeAnEventLine) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  const std::string aid = id_of(w, a);
  auto events = w.open("event");
  // In one batch with a call that runs (an unknown tool's call counts as a read): a batch none
  // of whose calls runs says no `calling:` state.
  w.fake.push({{"tool_calls", json::array({{{"id", "c0"}, {"name", "file_read"}, {"arguments", {{"path", "none.txt"}}}},
                                           {{"id", "c1"}, {"name", "x\nsession.forged.kill session/x\ty"}, {"arguments", "{}"}}})}});
  w.fake.push({{"text", "sorry"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  auto seen = World::read_until(events, "agent." + aid + ".state idle\n");
  EXPECT_EQ(seen.find("\nsession.forged"), std::string::npos) << seen;
  EXPECT_NE(seen.find("agent." + aid + ".state calling: file_read, x\\nsession.forged.kill session/x\\ty\n"), std::string::npos)
      << seen;
  const auto results = contents(w, a, "tool");
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[1].rfind("error: unknown tool: x\\nsession.forged.kill session/x\\ty", 0), 0u) << results[1];
  // Nor write to the terminal of whoever reads chat.
  w.fake.push({{"tool_calls", json::array({{{"id", "c2"}, {"name", "#(touch x)\x1b[31m"}, {"arguments", "{}"}}})}});
  w.fake.push({{"text", "sorry"}});
  ASSERT_TRUE(w.write(a + "/prompt", "again"));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  const std::string chat = *w.read(a + "/log");
  EXPECT_EQ(chat.find('\x1b'), std::string::npos) << chat;
  EXPECT_NE(chat.find("error: unknown tool: #(touch x)\\x1b[31m"), std::string::npos) << chat;
  // Nor make a line of megabytes, that every reader of `event` would hold (§5.3): the names are
  // cut, and so is their list.
  json calls = json::array({{{"id", "c3"}, {"name", "file_read"}, {"arguments", {{"path", "none.txt"}}}}});
  for (int i = 0; i < 40; i++) calls.push_back({{"id", "d" + std::to_string(i)}, {"name", std::string(200000, 'a' + i % 26) + std::to_string(i)}, {"arguments", "{}"}});
  w.fake.push({{"tool_calls", calls}});
  w.fake.push({{"text", "sorry"}});
  ASSERT_TRUE(w.write(a + "/prompt", "once more"));
  seen = World::read_until(events, ", ...\n");
  const auto at = seen.find("agent." + aid + ".state calling: file_read, aaaa");
  ASSERT_NE(at, std::string::npos) << seen.substr(0, 300);
  const auto line = seen.substr(at, seen.find('\n', at) - at);
  EXPECT_LT(line.size(), 700u) << line;
  EXPECT_EQ(line.substr(line.size() - 5), ", ...") << line;
}

// §8.3.4: a result decided without running anything quotes the model (an unknown tool's name), and
// is cut to its first and last 4096 bytes like any other.
TEST(Conversation, AResultDecidedWithoutRunningIsCutLikeAnyOther) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  const std::string name = "t" + std::string(20000, 'x') + "_end";
  w.fake.push({{"tool_calls", json::array({{{"id", "c1"}, {"name", name}, {"arguments", "{}"}}})}});
  w.fake.push({{"text", "sorry"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  const auto results = contents(w, a, "tool");
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].rfind("error: unknown tool: txxx", 0), 0u) << results[0].substr(0, 100);
  EXPECT_NE(results[0].find(" bytes omitted …]"), std::string::npos);
  EXPECT_LT(results[0].size(), 8192u + 64u);
}

// §8.3.4: a call that cannot start is `error: <reason>`, in the background as in the foreground
// (toolsrv's Rerror for the background one is `start failed: <reason>`, §6.5.1).
TEST(Conversation, ACallThatCannotStartIsTheSameErrorInTheBackground) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  write_file(w.config + "/sandbox.yaml", "general: {best_effort: maybe}\n");
  w.fake.push({{"tool_calls", json::array({{{"id", "f1"}, {"name", "shell"}, {"arguments", {{"cmd", "true"}}}},
                                           {{"id", "b1"}, {"name", "shell"}, {"arguments", {{"cmd", "true"}, {"background", true}}}}})}});
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 1; })) << w.log_text();
  const std::string why = "error: sandbox.yaml: line 1: general.best_effort: expected true or false";
  EXPECT_EQ(contents(w, a, "tool"), (std::vector<std::string>{why, why}));
}

// §7.3.3: an unapproved project override is ignored, and the agent gets, once per hash, the
// `info` block that says how to approve it.
TEST(Conversation, AnIgnoredProjectOverrideIsNotedOncePerHash) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  write_file(w.project + "/.ollie-sandbox.yaml", "ro: [\"/opt\"]\n");
  auto sum = testing_support::run({"sha256sum", w.project + "/.ollie-sandbox.yaml"}, "");
  ASSERT_EQ(sum.status, 0);
  const std::string hex = sum.out.substr(0, 64);
  for (int i = 1; i <= 2; i++) w.fake.push(shell_round("c" + std::to_string(i), "true"));
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 1; })) << w.log_text();
  ASSERT_TRUE(w.wait_state(a, "idle"));
  EXPECT_EQ(contents(w, a, "info"),
            (std::vector<std::string>{"project sandbox override " + w.project + "/.ollie-sandbox.yaml ignored: not approved (sha256 " +
                                      hex + "); add \"sandbox " + hex + " " + w.project + "\" to bypass/policy to approve"}));
  // After the first round's tool block, not among a batch's tool blocks.
  auto r = roles(blocks_of(*w.read(a + "/log.raw")));
  auto tool = std::find(r.begin(), r.end(), "tool");
  ASSERT_NE(tool, r.end());
  EXPECT_EQ(*(tool + 1), "info");
}

// A cwd that holds the config root (a session in $HOME) lets the tools rewrite sandbox.yaml, the
// bypass policy and the profiles: the agent is told once. (Here the config's tools/ is a link in
// that cwd, so its tools do not run sandboxed at all, and say so.)
TEST(Conversation, ACwdHoldingTheConfigRootIsWarnedOnce) {
  World w;
  ASSERT_TRUE(w.rdwr("session/new", "name=home cwd=" + w.home));
  auto a = w.agent("session/home", "main");
  for (int i = 1; i <= 2; i++) w.fake.push(shell_round("c" + std::to_string(i), "true"));
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 1; })) << w.log_text();
  ASSERT_TRUE(w.wait_state(a, "idle"));
  EXPECT_EQ(contents(w, a, "info"),
            (std::vector<std::string>{"warning: the working directory " + w.home + " holds the config root " + w.config +
                                          ": tools can rewrite sandbox.yaml, bypass.policy and the agent profiles, and so widen "
                                          "their own sandbox",
                                      "warning: the working directory " + w.home + " holds the data root " + w.data +
                                          ": tools can rewrite the saved sessions, and links they plant there redirect what "
                                          "olliesrv writes"}));
  const auto results = contents(w, a, "tool");
  ASSERT_EQ(results.size(), 2u);
  EXPECT_NE(results[0].find("a link the sandbox can write is on the way: shell cannot run sandboxed"), std::string::npos)
      << results[0];
  // A session below it is not warned.
  auto s2 = w.session("work");
  auto b = w.agent(s2, "main");
  w.fake.push(shell_round("c3", "true"));
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(b + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return contents(w, b, "assistant").size() == 1; })) << w.log_text();
  EXPECT_TRUE(contents(w, b, "info").empty());
}

TEST(Conversation, RetriesFollowTheTableWithRetryBlocks) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"fault", "rate_limit"}});
  w.fake.push({{"fault", "server_error"}});
  w.fake.push({{"fault", "drop"}, {"text", "partial text that drops"}, {"drop_after", 2}});
  w.fake.push({{"text", "finally"}});
  ASSERT_TRUE(w.write(a + "/prompt", "hi"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 4; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  std::vector<std::string> retries;
  std::string last;
  for (auto& b : blocks_of(*w.read(a + "/log.raw"))) {
    if (b["role"] == "retry") retries.push_back(b["content"]);
    if (b["role"] == "assistant") last = b["content"];
  }
  ASSERT_EQ(retries.size(), 3u);
  EXPECT_EQ(retries[0], "retrying in 5s (attempt 1/3): rate limited");
  EXPECT_EQ(retries[1].rfind("retrying in 10s (attempt 2/3): server error: 5", 0), 0u) << retries[1];
  EXPECT_EQ(retries[1].find("server error", 40), std::string::npos) << retries[1];
  EXPECT_EQ(retries[2], "retrying in 8s (attempt 3/3): stream dropped");
  EXPECT_EQ(last, "finally");
  // §8.14: every request counts; the dropped one had output, so its tokens are estimated.
  auto stats = *w.read(a + "/stats");
  EXPECT_NE(stats.find("requests=4\n"), std::string::npos) << stats;
  EXPECT_NE(stats.find("estimated=true\n"), std::string::npos) << stats;
}

TEST(Conversation, AnAuthenticationFailureIsNotRetried) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"fault", "auth"}});
  ASSERT_TRUE(w.write(a + "/prompt", "hi"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 1; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  std::this_thread::sleep_for(50ms);  // a retry (5 ms units) would have been sent by now
  EXPECT_EQ(chat_requests(w), 1u);
  auto blocks = blocks_of(*w.read(a + "/log.raw"));
  EXPECT_EQ(blocks.back()["role"], "error");
}

TEST(Conversation, StopEndsAStreamingTurnAndTheHistoryStaysValid) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"text", std::string(2000, 'x')}, {"delay_ms", 20}, {"chunk", 4}});
  w.fake.push({{"text", "next answer"}});
  auto chat = w.open(a + "/chat");
  ASSERT_TRUE(w.write(a + "/prompt", "write a lot"));
  World::read_until(chat, "xxxx");
  auto r = w.rdwr(a + "/ctl", "stop");
  ASSERT_TRUE(r) << r.ename();
  EXPECT_EQ(*r, "stopped\n");
  ASSERT_TRUE(w.wait_state(a, "idle", 2s));
  auto blocks = blocks_of(*w.read(a + "/log.raw"));
  EXPECT_EQ(blocks.back()["role"], "info");
  EXPECT_EQ(blocks.back()["content"], "interrupted");
  // §8.14: the interrupted request cost tokens: counted, estimated (no usage came).
  const auto stats = *w.read(a + "/stats");
  EXPECT_NE(stats.find("requests=1\n"), std::string::npos) << stats;
  EXPECT_NE(stats.find("estimated=true\n"), std::string::npos) << stats;
  EXPECT_EQ(stats.find("output=0\n"), std::string::npos) << stats;
  ASSERT_TRUE(eventually([&] {
    for (auto& q : w.fake.requests())
      if (q.client_closed) return true;
    return false;
  }));
  // The next prompt works: the interrupted text is in the history as an assistant message.
  ASSERT_TRUE(w.write(a + "/prompt", "again"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 2; }));
  auto body = request_body(w, 1);
  auto& msgs = body["messages"];
  EXPECT_EQ(msgs[msgs.size() - 2]["role"], "assistant");
  EXPECT_EQ(msgs.back()["content"], "again");
  ASSERT_TRUE(w.wait_state(a, "idle"));
  auto idle = w.rdwr(a + "/ctl", "stop");
  ASSERT_TRUE(idle);
  EXPECT_EQ(*idle, "idle\n");
}

TEST(Conversation, StopKillsARunningToolAndDropsTheUnansweredCall) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"tool_calls", json::array({{{"id", "c1"}, {"name", "shell"},
                                             {"arguments", {{"cmd", "echo started; sleep 30"}}}}})}});
  w.fake.push({{"text", "fine"}});
  ASSERT_TRUE(w.write(a + "/prompt", "sleep"));
  ASSERT_TRUE(w.wait_state(a, "calling: shell"));
  ASSERT_TRUE(eventually([&] { return testing_support::run({"pgrep", "-f", "sleep 30"}).status == 0; }));
  ASSERT_TRUE(w.rdwr(a + "/ctl", "stop"));
  ASSERT_TRUE(w.wait_state(a, "idle", 2s));
  EXPECT_TRUE(eventually([&] { return testing_support::run({"pgrep", "-f", "echo started; sleep 30"}).status != 0; }, 5s));
  ASSERT_TRUE(w.write(a + "/prompt", "and now?"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 2; }));
  auto body = request_body(w, 1);
  for (auto& m : body["messages"]) {
    EXPECT_NE(m["role"], "tool") << body.dump();
    EXPECT_FALSE(m.contains("tool_calls")) << body.dump();
  }
}

TEST(Conversation, PromptsWrittenDuringATurnQueueAndRunInOrder) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"text", "first answer"}, {"delay_ms", 20}});
  w.fake.push({{"text", "second answer"}});
  w.fake.push({{"text", "third answer"}});
  ASSERT_TRUE(w.write(a + "/prompt", "one"));
  ASSERT_TRUE(w.write(a + "/prompt", "two"));
  ASSERT_TRUE(w.write(a + "/prompt", "three"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 3; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  std::vector<std::string> seq;
  for (auto& b : blocks_of(*w.read(a + "/log.raw")))
    if (b["role"] == "user" || b["role"] == "assistant") seq.push_back(b["content"]);
  EXPECT_EQ(seq, (std::vector<std::string>{"one", "first answer", "two", "second answer", "three", "third answer"}));
}

TEST(Conversation, APromptWrittenIn4KiBPiecesIsOnePrompt) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"text", "got it"}});
  std::string big;
  for (int i = 0; i < 3000; i++) big += "line " + std::to_string(i) + "\n";
  auto r = testing_support::run({testing_support::built("bin/ollie-9p"), "-a", "unix!" + w.sock, "write", a + "/prompt"}, big,
                                w.env());
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 1; }));
  auto body = request_body(w, 0);
  EXPECT_EQ(body["messages"].back()["content"].get<std::string>().size(), big.size() - 1);  // trailing newline trimmed
}

// Bytes of a prompt that are not UTF-8 are U+FFFD in its block (JSON), and so in chat and log too,
// live and after a restart: the transcript is its blocks (§1.2, §2.8.7).
TEST(Conversation, APromptThatIsNotUtf8IsShownAsItsBlockHoldsIt) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"text", "ok"}});
  ASSERT_TRUE(w.write(a + "/prompt", "bytes \xff\xfe here"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 1; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  const std::string replaced = "bytes \xEF\xBF\xBD\xEF\xBF\xBD here";
  EXPECT_EQ(contents(w, a, "user"), std::vector<std::string>{replaced});
  const auto log = w.read(a + "/log");
  ASSERT_TRUE(log);
  EXPECT_NE(log->find("user: " + replaced + "\n"), std::string::npos) << *log;
  EXPECT_EQ(log->find('\xff'), std::string::npos) << *log;
  w.stop_server(SIGTERM);  // (a kill -9 right after `idle` can come before the turn's end is saved)
  w.kill_toolsrvs();
  w.start();
  const auto after = w.read(a + "/log");
  ASSERT_TRUE(after);
  EXPECT_EQ(*after, *log);
}

// A prompt past the 16 MiB a fid holds is refused, and none of it is submitted, also when the
// client clunks the fid after the refusal (as close(2) on a v9fs mount does): the pieces taken
// before it are not a prompt (spec §1.7: a half-written request never takes effect).
TEST(Conversation, APromptPastTheWriteCapIsRefusedAndNothingOfItRuns) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  auto f = w.walk(a + "/prompt");
  ASSERT_TRUE(f) << f.ename();
  ASSERT_TRUE(f->open(p9::OWRITE));
  auto w1 = f->write(std::string(16u << 20, 'x'));
  ASSERT_TRUE(w1) << w1.ename();
  auto w2 = f->write("and more");
  ASSERT_FALSE(w2);
  EXPECT_EQ(w2.ename(), "write too large");
  auto c = f->clunk();
  ASSERT_FALSE(c);
  EXPECT_EQ(c.ename(), "write too large");
  w.fake.push({{"text", "small answer"}});
  ASSERT_TRUE(w.write(a + "/prompt", "small"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 1; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  EXPECT_EQ(request_body(w, 0)["messages"].back()["content"], "small");
  std::vector<std::string> users;
  for (auto& b : blocks_of(*w.read(a + "/log.raw")))
    if (b["role"] == "user") users.push_back(b["content"]);
  EXPECT_EQ(users, std::vector<std::string>{"small"});
}

// `ollie-9p read -l statewait` prints each state change as it happens, one line each.
TEST(Conversation, ReadDashLFollowsStatewait) {
  World w;
  auto a = w.agent(w.session("work"), "main");
  testing_support::Child states({testing_support::built("bin/ollie-9p"), "-a", "unix!" + w.sock, "read", "-l", a + "/statewait"},
                                w.env());
  // The reader's fid opens at an unknown moment: prompt until a turn's states reach it.
  std::string out;
  for (int i = 0; i < 20 && out.find("thinking\nidle\n") == std::string::npos; i++) {
    w.fake.push({{"text", "ok"}});
    ASSERT_TRUE(w.write(a + "/prompt", "hi\n"));
    ASSERT_TRUE(w.wait_state(a, "idle"));
    out = states.read_until("thinking\nidle\n", 500);
  }
  EXPECT_NE(out.find("thinking\nidle\n"), std::string::npos) << out;
}

// `read -l feed`: feed's heartbeat (5 s without a change) is 0 bytes, "nothing yet", not the
// end: a value written after it is printed too (the reader exited at the first heartbeat).
TEST(Conversation, ReadDashLFollowsFeedPastItsHeartbeat) {
  World w;
  auto a = w.agent(w.session("work"), "main");
  testing_support::Child feed({testing_support::built("bin/ollie-9p"), "-a", "unix!" + w.sock, "read", "-l", a + "/feed"},
                              w.env());
  // The reader's fid opens at an unknown moment: write until it prints a value.
  std::string out;
  for (int i = 0; i < 20 && out.empty(); i++) {
    ASSERT_TRUE(w.write(a + "/feed", "v" + std::to_string(i) + "\n"));
    out = feed.read_until("\n", 500);
  }
  ASSERT_FALSE(out.empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(6500));  // past a heartbeat of nothing
  ASSERT_TRUE(w.write(a + "/feed", "later\n"));
  EXPECT_EQ(feed.read_until("later\n", 10000), out + "later\n");
}

TEST(Conversation, SessionAndAgentErrorsAreTheSpecsStrings) {
  World w;
  EXPECT_EQ(w.rdwr("session/new", "name=x").ename(), "cwd is required");
  EXPECT_EQ(w.rdwr("session/new", "cwd=relative").ename(), "cwd must be absolute: relative");
  EXPECT_EQ(w.rdwr("session/new", "cwd=/nonexistent/dir").ename(), "cwd: /nonexistent/dir: not a directory");
  EXPECT_EQ(w.rdwr("session/new", "cwd=" + w.project + " name=new").ename(), "invalid name: new");
  EXPECT_EQ(w.rdwr("session/new", "cwd=" + w.project + " bogus=1").ename(), "unknown key: bogus");
  auto s = w.session("work");
  EXPECT_EQ(w.rdwr("session/new", "cwd=" + w.project + " name=work").ename(), "session already exists: work");
  EXPECT_EQ(w.rdwr(s + "/agent/new", "agent=nosuch").ename(), "unknown agent profile: nosuch");
  w.agent(s, "main");
  EXPECT_EQ(w.rdwr(s + "/agent/new", "name=main").ename(), "agent already exists: main");
  EXPECT_EQ(w.rdwr(s + "/agent/main/ctl", "bogus").ename(), "unknown command: bogus");
  // Reached by id as well as by name.
  auto id = w.read(s + "/id");
  ASSERT_TRUE(id);
  std::string sid = id->substr(0, id->size() - 1);
  EXPECT_TRUE(w.read("session/" + sid + "/agent/main/stats"));
  auto idx = w.read("session/idx");
  EXPECT_NE(idx->find("work\t" + sid + "\t" + w.project + "\t-\t-\t-\t1\n"), std::string::npos) << *idx;
}

// §1.5: Qid.path is derived from the immutable ids and the file name, so a restart (which walks
// the sessions in whatever order) gives every file the path it had.
TEST(Conversation, QidPathsSurviveARestart) {
  World w;
  auto a = w.agent(w.session("work"), "main");
  auto b = w.agent(w.session("play"), "main");
  ASSERT_TRUE(w.rdwr("session/work/ctl", "save"));
  ASSERT_TRUE(w.rdwr("session/play/ctl", "save"));
  auto path = [&](const std::string& file) {
    auto f = w.walk(file);
    if (!f) return std::uint64_t{0};
    auto d = f->stat();
    return d ? d->qid.path : std::uint64_t{0};
  };
  const std::vector<std::string> files = {"session/work", "session/work/id", a, a + "/stats", b + "/stats"};
  std::vector<std::uint64_t> before;
  for (const auto& f : files) before.push_back(path(f));
  EXPECT_NE(before[3], before[4]) << "two agents' stats are two files";
  w.stop_server(SIGKILL);
  w.kill_toolsrvs();
  w.start();
  EXPECT_NE(path(b + "/stats"), 0u);  // the other session walked first this time
  for (std::size_t i = 0; i < files.size(); i++) EXPECT_EQ(path(files[i]), before[i]) << files[i];
  // A new session of an old name is another object: other paths.
  ASSERT_TRUE(w.rdwr("session/play/ctl", "kill"));
  auto again = w.agent(w.session("play"), "main");
  EXPECT_NE(path(again + "/stats"), before[4]);
}

// §3.2, §3.3: kill deletes what was persisted, and a turn cut short by it writes nothing after:
// its half-streamed answer is not a block of anybody's (it made the directory again before).
// Its readers see it interrupted first (§8.9), as after a stop: the block in flight finalized
// (chat.raw's partials replaced, §2.8.8), then `interrupted`, then EOF.
TEST(Conversation, AKillMidStreamLeavesNoFilesBehind) {
  World w;
  for (const bool whole_session : {false, true}) {
    auto s = w.session(whole_session ? "doomed" : "work");
    auto a = w.agent(s, "main");
    const std::string dir = w.data + "/sessions/" + id_of(w, s);
    const std::string blocks = dir + "/" + id_of(w, a) + ".blocks.jsonl";
    w.fake.push({{"text", std::string(400, 'x')}, {"delay_ms", 50}, {"chunk", 4}});
    ASSERT_TRUE(w.write(a + "/prompt", "hi"));
    ASSERT_TRUE(eventually([&] { return std::filesystem::exists(blocks); }));  // the user block
    ASSERT_TRUE(eventually([&] {
      auto text = w.read(a + "/log");  // the answer streams into it
      return text && text->find("xxxx") != std::string::npos;
    }));
    auto chat = w.open(a + "/chat");
    auto raw = w.open(a + "/chat.raw");
    EXPECT_EQ(*w.rdwr((whole_session ? s : a) + "/ctl", "kill"), "killed\n");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the turn has unwound
    EXPECT_FALSE(std::filesystem::exists(blocks)) << read_file(blocks);
    EXPECT_EQ(std::filesystem::exists(dir), !whole_session);
    const std::string shown = World::read_until(chat, "\x01(to EOF)");
    EXPECT_TRUE(shown.find("xxxx") != std::string::npos && shown.ends_with("x\n\n:: interrupted\n\n")) << shown;
    std::vector<json> lines;
    std::istringstream in(World::read_until(raw, "\x01(to EOF)"));
    for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
    ASSERT_GE(lines.size(), 3u);
    const json& answer = lines[lines.size() - 2];
    EXPECT_EQ(answer["role"], "assistant");
    EXPECT_FALSE(answer.contains("partial")) << answer;
    EXPECT_TRUE(answer["content"].get<std::string>().starts_with("xxxx")) << answer;
    EXPECT_EQ(lines.back()["role"], "info");
    EXPECT_EQ(lines.back()["content"], "interrupted");
  }
}

TEST(Conversation, AKilledAgentAnswersItsOpenFidsAsTheSpecSays) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  auto chat = w.open(a + "/chat");
  auto stats_fid = w.open(a + "/stats");
  auto dir = w.open(a);  // a listing read in pieces: the first piece before the kill
  auto first = dir.read(100);
  ASSERT_TRUE(first) << first.ename();
  ASSERT_FALSE(first->empty());
  auto r = w.rdwr(a + "/ctl", "kill");
  ASSERT_TRUE(r) << r.ename();
  EXPECT_EQ(*r, "killed\n");
  // The chat stream ends; other reads say the agent is gone.
  auto rest = World::read_until(chat, "\x01");
  (void)rest;
  auto again = stats_fid.read(100);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.ename(), "agent killed");
  EXPECT_EQ(stats_fid.wstat(p9::Dir::null()).ename(), "agent killed");  // a sync (null wstat) too
  auto more = dir.read(100);  // the rest of the listing is not served from what was taken
  ASSERT_FALSE(more);
  EXPECT_EQ(more.ename(), "agent killed");
  EXPECT_FALSE(w.read(a + "/stats"));
}

TEST(Conversation, ToolsrvStartsAtTheFirstNeedAndEachSessionHasItsOwn) {
  World w;
  EXPECT_TRUE(w.toolsrvs().empty());
  auto s1 = w.session("one");
  auto s2 = w.session("two");
  EXPECT_EQ(w.toolsrvs().size(), 2u);
  auto a1 = w.agent(s1, "main");
  auto a2 = w.agent(s2, "main");
  w.fake.push({{"text", "a"}});
  w.fake.push({{"text", "b"}});
  ASSERT_TRUE(w.write(a1 + "/prompt", "x"));
  ASSERT_TRUE(w.write(a2 + "/prompt", "y"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 2; }));
  ASSERT_TRUE(w.wait_state(a1, "idle"));
  ASSERT_TRUE(w.wait_state(a2, "idle"));
}

// olliesrv runs itself again with glibc's huge-page tunable for its own heap (main.cpp); toolsrv,
// and through it every program a bypass call runs, gets the environment the user gave olliesrv.
TEST(Conversation, ToolsrvGetsTheUsersEnvironmentNotOlliesrvsHeapTuning) {
  World w;
  const auto tunables = [&] {
    std::vector<std::string> found;
    const auto pids = w.toolsrvs();
    if (pids.size() != 1) return std::vector<std::string>{"toolsrvs: " + std::to_string(pids.size())};
    const std::string env = read_file("/proc/" + std::to_string(pids.front()) + "/environ");
    for (std::size_t at = 0; at < env.size();) {
      const auto end = std::min(env.find('\0', at), env.size());
      const auto kv = env.substr(at, end - at);
      if (kv.find("TUNABLES") != std::string::npos) found.push_back(kv);
      at = end + 1;
    }
    return found;
  };
  (void)w.session("plain");
  EXPECT_EQ(tunables(), std::vector<std::string>{});
  w.kill_toolsrvs();
  w.restart_with({"GLIBC_TUNABLES=glibc.malloc.arena_max=2"});
  (void)w.session("tuned");
  EXPECT_EQ(tunables(), std::vector<std::string>{"GLIBC_TUNABLES=glibc.malloc.arena_max=2"});
}

// The issue: an idle session holds no toolsrv process. A local session's toolsrv stops once it
// has not been needed for a while (30 s; 300 ms here) and nothing holds it (a turn, a call, a
// background process); the next need starts a new one, synced: the agent's tools work on.
TEST(Conversation, AnIdleSessionsToolsrvStopsAndTheNextNeedStartsItAgain) {
  World w;
  w.restart_with({"OLLIE_TEST_TOOLSRV_IDLE_MS=300"});
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  // A `!` command of the idle agent holds it while the command runs.
  const std::string marker = w.project + "/slept";
  ASSERT_TRUE(w.write(a + "/prompt", "!sleep 1.5; touch " + marker));
  ASSERT_TRUE(eventually([&] { return std::filesystem::exists(marker); }, 10s)) << w.log_text();
  ASSERT_TRUE(eventually([&] { return w.toolsrvs().empty(); }, 10s)) << w.log_text();
  EXPECT_NE(w.log_text().find("toolsrv stopped: not needed for 300 ms"), std::string::npos);
  // Nor does olliesrv keep its pidfd: one per session that ever ran a toolsrv was held.
  EXPECT_TRUE(eventually([&] { return w.pidfds() == 0; }, 5s)) << w.pidfds();
  write_file(w.project + "/notes.txt", "alpha\n");
  w.fake.push({{"tool_calls", json::array({{{"id", "r1"}, {"name", "file_read"}, {"arguments", {{"path", "notes.txt"}}}}})}});
  w.fake.push({{"text", "read it"}});
  ASSERT_TRUE(w.write(a + "/prompt", "read notes.txt"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 2; })) << w.log_text();
  ASSERT_TRUE(w.wait_state(a, "idle"));
  const auto tool = contents(w, a, "tool");
  ASSERT_EQ(tool.size(), 1u);
  EXPECT_NE(tool[0].find("alpha"), std::string::npos) << tool[0];
}

TEST(Conversation, ALostToolsrvFailsTheCallInFlightAndTheNextCallStartsANewOne) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"tool_calls", json::array({{{"id", "c1"}, {"name", "shell"}, {"arguments", {{"cmd", "sleep 30"}}}}})}});
  w.fake.push({{"tool_calls", json::array({{{"id", "c2"}, {"name", "shell"}, {"arguments", {{"cmd", "echo back"}}}}})}});
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(w.wait_state(a, "calling: shell"));
  auto before = w.toolsrvs();
  ASSERT_EQ(before.size(), 1u);
  ::kill(before[0], SIGKILL);
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 3; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  std::vector<std::string> results;
  for (auto& b : blocks_of(*w.read(a + "/log.raw")))
    if (b["role"] == "tool") results.push_back(b["content"]);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].rfind("error: tool server lost: ", 0), 0u) << results[0];
  EXPECT_NE(results[1].find("back"), std::string::npos) << results[1];
  auto after = w.toolsrvs();
  ASSERT_EQ(after.size(), 1u);
  EXPECT_NE(after[0], before[0]);
}

// §6.1, §6.3: a toolsrv start syncs every agent's agentcwd. When an agent's directory is gone,
// toolsrv refuses it; the agent's calls must then fail, not run in the session's wider cwd, and
// run in its own cwd again once the directory is back.
TEST(Conversation, AnAgentWhoseCwdIsGoneAtAToolsrvStartRunsNothingInTheSessionsCwd) {
  World w;
  auto s = w.session("work");
  const std::string box = w.project + "/box";
  std::filesystem::create_directories(box);
  auto a = w.agent(s, "boxed", "cwd=" + box);
  std::filesystem::remove(box);
  w.kill_toolsrvs();
  w.fake.push(shell_round("c1", "touch escaped; pwd"));
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 2; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  EXPECT_FALSE(std::filesystem::exists(w.project + "/escaped")) << "the call ran in the session's cwd";
  auto results = contents(w, a, "tool");
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].rfind("error: ", 0), 0u) << results[0];
  EXPECT_NE(results[0].find(box), std::string::npos) << results[0];
  std::filesystem::create_directories(box);
  w.fake.push(shell_round("c2", "pwd"));
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "again"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 4; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  results = contents(w, a, "tool");
  ASSERT_EQ(results.size(), 2u);
  EXPECT_NE(results[1].find(box + "\n"), std::string::npos) << results[1];
}

// §2.5, §6.6: OLLIE_ADDR and the other variables olliesrv sets for every tool are its own. A
// session.json that carries them (or a name toolsrv refuses) is restored without those entries:
// a tool still dials the real olliesrv, and the session's own variables come back.
TEST(Conversation, ARestoredSessionDropsReservedEnvEntries) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  ASSERT_TRUE(w.write(s + "/env", "FOO=bar"));
  const std::string id = id_of(w, s);
  w.stop_server(SIGTERM);
  const std::string file = w.data + "/sessions/" + id + "/session.json";
  auto j = json::parse(read_file(file));
  j["env"]["OLLIE_ADDR"] = "unix!/tmp/not-olliesrv";
  j["env"]["BAD NAME"] = "x";
  write_file(file, j.dump());
  w.start();
  EXPECT_EQ(*w.read(s + "/env"), "FOO=bar\nOLLIE_ADDR=unix!" + w.sock + "\nOLLIE_SESSION_ID=" + id + "\n");
  w.fake.push(shell_round("c1", "echo \"addr=$OLLIE_ADDR foo=$FOO\""));
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 2; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  const auto results = contents(w, a, "tool");
  ASSERT_EQ(results.size(), 1u);
  EXPECT_NE(results[0].find("addr=unix!" + w.sock + " foo=bar"), std::string::npos) << results[0];
}

// §7.5: a stored tool that can no longer be loaded when toolsrv starts (its file gone) is an
// `info` warning to the agent, not a failure, and the agent no longer lists or saves it.
TEST(Conversation, AStoredToolThatNoLongerLoadsIsAnInfoWarningAndForgotten) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  const std::string id = id_of(w, s);
  w.stop_server(SIGTERM);
  w.kill_toolsrvs();
  const std::string file = w.data + "/sessions/" + id + "/session.json";
  auto j = json::parse(read_file(file));
  j["agents"][0]["tools"].push_back("ghost_tool");
  write_file(file, j.dump());
  w.start();
  w.fake.push({{"text", "hi"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 1; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  const auto notes = contents(w, a, "info");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "tool ghost_tool not loaded again: unknown tool: ghost_tool");
  ASSERT_TRUE(w.rdwr(s + "/ctl", "save"));
  const auto saved = json::parse(read_file(file));
  EXPECT_EQ(saved["agents"][0]["tools"].dump().find("ghost_tool"), std::string::npos) << saved["agents"][0]["tools"];
  EXPECT_NE(saved["agents"][0]["tools"].dump().find("shell"), std::string::npos) << saved["agents"][0]["tools"];
}

// §2.8.2: the totals survive restarts, a kill -9 in the middle of a turn included: a response's
// usage is kept before its tool round runs, and the restore ends the cut turn (§8.14): its cost
// becomes costLast and joins costSession, once, however often the restore is cut off itself.
// Many session/new at once each start their toolsrv, and none of them is lost: a wake-up of a
// toolsrv's exit watch that came from another descriptor (epoll keeps the registration of one
// closed while a forked child still held it) killed a toolsrv just started, now and then
// (`session/new: toolsrv killed by signal 9`, about 1 in 80 on this machine).
TEST(Conversation, ManySessionNewAtOnceAllStartTheirToolsrv) {
  World w;
  std::vector<std::string> failed;
  for (int round = 0; round < 4; round++) {
    std::vector<std::future<testing_support::Ran>> news;
    for (int i = 0; i < 12; i++) {
      const std::string req = "name=u" + std::to_string(round) + "-" + std::to_string(i) + " cwd=" + w.project + "\n";
      news.push_back(std::async(std::launch::async, [&w, req] {
        return testing_support::run({testing_support::built("bin/ollie-9p"), "-a", "unix!" + w.sock, "rdwr", "session/new"}, req);
      }));
    }
    for (auto& f : news)
      if (auto r = f.get(); r.status != 0) failed.push_back(r.err);
  }
  EXPECT_TRUE(failed.empty()) << failed.size() << " failed, the first: " << failed.front();
  EXPECT_EQ(w.log_text().find("killed by signal"), std::string::npos) << w.log_text();
}

TEST(Conversation, KillNineMidRoundKeepsTheResponsesUsageAndCost) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  auto round = shell_round("c1", "sleep 30");
  round["usage"] = {{"input", 1000}, {"output", 20}, {"cost", 0.5}};
  w.fake.push(round);
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(w.wait_state(a, "calling: shell"));
  auto stats = w.read(a + "/stats");
  ASSERT_TRUE(stats);
  EXPECT_NE(stats->find("input=1000\noutput=20\n"), std::string::npos) << *stats;
  EXPECT_NE(stats->find("costLast=0.0000\ncostSession=0.0000\n"), std::string::npos) << *stats;  // at the turn's end
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // past the spaced save's 20 ms
  w.stop_server(SIGKILL);
  w.kill_toolsrvs();
  w.start();
  stats = w.read(a + "/stats");
  ASSERT_TRUE(stats) << w.log_text();
  EXPECT_NE(stats->find("input=1000\noutput=20\n"), std::string::npos) << *stats;
  EXPECT_NE(stats->find("costLast=0.5000\ncostSession=0.5000\n"), std::string::npos) << *stats;
  // A start killed before its first save (the saved file put back as it was) adds it once more
  // to the saved totals only: 0.5 again, not 1.0.
  const std::string file = w.data + "/sessions/" + id_of(w, s) + "/session.json";
  ASSERT_TRUE(eventually([&] { return read_file(file).find("turnCost") == std::string::npos; }));
  w.stop_server(SIGKILL);
  auto saved = json::parse(read_file(file));
  saved["agents"][0]["turn"] = true;
  saved["agents"][0]["turnCost"] = 0.5;
  saved["agents"][0]["usage"]["costSession"] = 0;
  write_file(file, saved.dump());
  w.start();
  stats = w.read(a + "/stats");
  ASSERT_TRUE(stats) << w.log_text();
  EXPECT_NE(stats->find("costLast=0.5000\ncostSession=0.5000\n"), std::string::npos) << *stats;
}

TEST(Conversation, KillNineLosesNoFinalizedBlockAndRestoreStartsNoToolsrv) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"text", "remember me"}});
  ASSERT_TRUE(w.write(a + "/prompt", "first"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 1; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  w.fake.push({{"text", std::string(4000, 'y')}, {"delay_ms", 20}});
  auto chat = w.open(a + "/chat");
  ASSERT_TRUE(w.write(a + "/prompt", "second"));
  World::read_until(chat, "yyyy");
  auto before = blocks_of(*w.read(a + "/log.raw"));
  w.stop_server(SIGKILL);
  w.kill_toolsrvs();
  w.start();
  EXPECT_TRUE(w.toolsrvs().empty());
  auto after = w.read(a + "/log.raw");
  ASSERT_TRUE(after) << after.ename() << w.log_text();
  auto restored = blocks_of(*after);
  ASSERT_GE(restored.size(), before.size());
  for (std::size_t i = 0; i < before.size(); i++) EXPECT_EQ(restored[i], before[i]);
  EXPECT_EQ(w.read_state(a), "idle");
  // The turn the kill cut off says so, once.
  const std::string cut = "interrupted: olliesrv stopped during the turn";
  auto cuts = [&] {
    auto notes = contents(w, a, "info");
    return std::count(notes.begin(), notes.end(), cut);
  };
  EXPECT_EQ(cuts(), 1) << *after;
  EXPECT_EQ(restored.back()["content"], cut);
  // A start that died between the note and the save that takes the mark off (the mark put back
  // by hand): the note is there already, and is not given twice.
  const std::string sid = id_of(w, s);
  w.stop_server(SIGKILL);
  const std::string file = w.data + "/sessions/" + sid + "/session.json";
  auto saved = json::parse(read_file(file));
  saved["agents"][0]["turn"] = true;
  write_file(file, saved.dump());
  w.kill_toolsrvs();
  w.start();
  EXPECT_EQ(cuts(), 1) << *w.read(a + "/log.raw");
  // The restored agent talks again, with the first exchange in its history.
  w.fake.push({{"text", "still here"}});
  ASSERT_TRUE(w.write(a + "/prompt", "third"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 3; }));
  auto body = request_body(w, 2);
  EXPECT_NE(body.dump().find("remember me"), std::string::npos);
  // A restart with no turn running (the mark was taken off) adds nothing.
  ASSERT_TRUE(w.wait_state(a, "idle"));
  w.stop_server(SIGKILL);
  w.kill_toolsrvs();
  w.start();
  EXPECT_EQ(cuts(), 1) << *w.read(a + "/log.raw");
}

// §8.1.2's queue is bounded in prompts (256) and in bytes (64 MiB): a peer or a tool sending
// prompts of 16 MiB to a busy agent cannot make olliesrv hold gigabytes.
TEST(Conversation, TheQueueIsBoundedInPromptsAndInBytes) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"text", "slow answer, slowly given"}, {"delay_ms", 2000}});
  ASSERT_TRUE(w.write(a + "/prompt", "first"));
  ASSERT_TRUE(w.wait_state(a, "thinking"));  // and for seconds: a frame every 2 s
  const std::string big(15 << 20, 'x');
  for (int i = 0; i < 4; i++) ASSERT_TRUE(w.write(a + "/fifo", big)) << i;
  EXPECT_EQ(w.write(a + "/fifo", big).ename(), "prompt queue full");
  for (int i = 4; i < 256; i++) ASSERT_TRUE(w.write(a + "/fifo", "small " + std::to_string(i))) << i;
  EXPECT_EQ(w.write(a + "/fifo", "one more").ename(), "prompt queue full");
  // A feed value the full queue refused is not the current one: written again once there is
  // room, it is submitted (§8.12), not taken for no change.
  EXPECT_EQ(w.write(a + "/feed", "FEED-V1").ename(), "prompt queue full");
  ASSERT_TRUE(w.read(a + "/fifo"));  // pops one
  ASSERT_TRUE(w.write(a + "/feed", "FEED-V1"));
  EXPECT_EQ(w.write(a + "/fifo", "one more").ename(), "prompt queue full");  // the feed took the room
  EXPECT_NE(w.read_state(a), "idle");  // all of it while the first turn ran
  ASSERT_TRUE(w.rdwr(a + "/ctl", "kill"));  // the queue goes with it
}

// A turn that ended by itself says `idle` once session.json holds its answer: a kill -9 the
// moment after loses nothing of the history and adds no "interrupted" note. A long history makes
// the save slow enough that an `idle` said before it was always caught by the kill.
TEST(Conversation, AKillNineRightAfterIdleKeepsTheAnswerInTheHistory) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"text", "the answer is 42"}});
  auto states = w.open(a + "/statewait");
  ASSERT_TRUE(w.write(a + "/prompt", "q " + std::string(4 << 20, 'x')));
  for (int i = 0; i < 20; i++)  // a BlockOnce read at offset 0 per change (a heartbeat every 5 s)
    if (auto st = states.pread(0, 64); !st || *st == "idle\n") break;
  w.stop_server(SIGKILL);
  w.kill_toolsrvs();
  w.start();
  const auto notes = contents(w, a, "info");
  EXPECT_EQ(std::count(notes.begin(), notes.end(), "interrupted: olliesrv stopped during the turn"), 0);
  w.fake.push({{"text", "yes"}});
  ASSERT_TRUE(w.write(a + "/prompt", "and again?"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 2; }));
  EXPECT_NE(request_body(w, 1).dump().find("the answer is 42"), std::string::npos);
}

// §7.7: a change is answered once it is saved. When the save fails (a full disk), agent/new is
// refused and undone: the next start would otherwise find the agent's files and not the agent,
// and remove them.
TEST(Conversation, AnAgentTheDiskDidNotTakeIsRefused) {
  World w;
  auto s = w.session("work");
  w.agent(s, "main");
  const std::string dir = w.data + "/sessions/" + id_of(w, s);
  std::filesystem::rename(dir, dir + ".aside");
  write_file(dir, "");  // the session's directory is a file now: every save fails
  auto made = w.rdwr(s + "/agent/new", "name=late");
  ASSERT_FALSE(made);
  EXPECT_EQ(made.ename().rfind("save: ", 0), 0u) << made.ename();
  EXPECT_EQ(w.read(s + "/agent/idx")->find("late"), std::string::npos) << *w.read(s + "/agent/idx");
  EXPECT_EQ(w.rdwr(s + "/ctl", "save").ename().rfind("save: ", 0), 0u);  // §3.2's own wording
  // A change that stays made says so: an error alone tells a client nothing changed.
  auto set = w.rdwr(s + "/agent/main/ctl", "model m2");
  ASSERT_FALSE(set);
  EXPECT_TRUE(set.ename().starts_with("save: ") && set.ename().ends_with(" (the change is made, not saved)")) << set.ename();
  EXPECT_EQ(*w.rdwr(s + "/agent/main/ctl", "model"), "m2\n");
  auto env = w.write(s + "/env", "K=v");
  ASSERT_FALSE(env);
  EXPECT_TRUE(env.ename().ends_with(" (the change is made, not saved)")) << env.ename();
  std::filesystem::remove(dir);
  std::filesystem::rename(dir + ".aside", dir);
  ASSERT_TRUE(w.rdwr(s + "/agent/new", "name=late"));
}

// §7.7, §4.2: a write that changes what is persisted is answered once session.json holds the
// change, so kill -9 right after the reply keeps it. The writes used to be answered first and
// saved just after: a new agent, with the blocks of the prompt written to it, or a rename was
// lost in about a third of such kills, and a wstat rename (its save was 20 ms behind) in all.
TEST(Conversation, KillNineRightAfterAReplyKeepsWhatItAcknowledged) {
  World w;
  for (int i = 0; i < 3; i++) {
    const std::string n = std::to_string(i);
    auto s = w.session("s" + n);
    auto a = w.agent(s, "a");
    w.fake.push({{"text", "answer " + n}, {"delay_ms", 5000}});
    ASSERT_TRUE(w.write(a + "/prompt", "question " + n));
    ASSERT_TRUE(w.write(a + "/plan", "plan " + n));
    ASSERT_TRUE(w.write(s + "/env", "K" + n + "=v"));
    ASSERT_TRUE(w.write(a + "/name", "b" + n));
    auto dir = w.walk(s);  // a wstat rename (the Rwstat, too, waits for the save)
    ASSERT_TRUE(dir);
    p9::Dir renamed = p9::Dir::null();
    renamed.name = "t" + n;
    ASSERT_TRUE(dir->wstat(renamed));
    w.stop_server(SIGKILL);
    w.kill_toolsrvs();
    w.start();
    const std::string t = "session/t" + n, b = t + "/agent/b" + n;
    auto plan = w.read(b + "/plan");
    ASSERT_TRUE(plan) << plan.ename() << w.log_text();
    EXPECT_EQ(*plan, "plan " + n);
    EXPECT_NE(w.read(t + "/env")->find("K" + n + "=v\n"), std::string::npos);
    EXPECT_NE(w.read(b + "/log.raw")->find("question " + n), std::string::npos);
  }
}

// §7.7: session.json is written after every tool round, but a round's write starts no sooner
// than save_spacing (20 ms) after the last one began; the turn's end writes at once. Counted with
// inotify: the temporary files created during a turn of 60 instant rounds (each has its own
// name; the renames onto session.json would be merged into one event while unread).
TEST(Conversation, InstantToolRoundsShareSessionWritesAndTheTurnEndWritesAll) {
  World w;
  write_file(w.project + "/notes.txt", "alpha\nbeta\n");
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  const std::string dir = w.data + "/sessions/" + id_of(w, s);
  ASSERT_TRUE(w.rdwr(s + "/ctl", "save"));  // the directory exists
  const int rounds = 60;
  for (int i = 0; i < rounds; i++)
    w.fake.push({{"tool_calls", json::array({{{"id", "c" + std::to_string(i)},
                                              {"name", "file_read"},
                                              {"arguments", {{"path", "notes.txt"}, {"limit", i + 1}}}}})}});
  w.fake.push({{"text", "all done"}});
  const int in = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  ASSERT_GE(in, 0);
  ASSERT_GE(::inotify_add_watch(in, dir.c_str(), IN_CREATE), 0);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // The turn's end wrote every round, without a `ctl save`.
  ASSERT_TRUE(eventually([&] {
    auto j = json::parse(read_file(dir + "/session.json"), nullptr, false);
    if (j.is_discarded() || j["agents"][0]["messages"].empty()) return false;
    const auto& m = j["agents"][0]["messages"];
    int results = 0;
    for (const auto& x : m) results += x["role"] == "tool";
    return results == rounds && m.back()["content"] == "all done";
  }));
  int writes = 0;
  alignas(inotify_event) char buf[4096];
  for (ssize_t n; (n = ::read(in, buf, sizeof buf)) > 0;)
    for (char* p = buf; p < buf + n; p += sizeof(inotify_event) + reinterpret_cast<inotify_event*>(p)->len)
      writes += std::string_view(reinterpret_cast<inotify_event*>(p)->name).starts_with(".session.json.tmp.");
  ::close(in);
  EXPECT_GE(writes, 1);
  // One write per 20 ms of turn, plus the moments that write at once (the turn's start and end).
  EXPECT_LE(writes, static_cast<int>(ms / 20) + 4) << "a turn of " << ms << " ms";
}

/// Session `work` (agent `main`) in `<project>/gone`, saved, then olliesrv killed and started
/// again with that directory removed: its toolsrv cannot start. Returns the directory.
namespace {

std::string restore_without_cwd(World& w) {
  const std::string dir = w.project + "/gone";
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(w.rdwr("session/new", "name=work cwd=" + dir));
  w.agent("session/work", "main");
  EXPECT_TRUE(w.rdwr("session/work/ctl", "save"));  // the agent's creation may not be saved yet
  w.stop_server(SIGKILL);
  w.kill_toolsrvs();
  std::filesystem::remove_all(dir);
  w.start();
  return dir;
}

}  // namespace

// §6.1, §8.1.4: a profile switch while toolsrv cannot start unloads the old profile's tools for
// good: the next start syncs what the agent has now, not what it had.
TEST(Conversation, AProfileSwitchWhileToolsrvCannotStartDoesNotBringTheOldToolsBack) {
  World w;
  const std::string dir = restore_without_cwd(w);
  const std::string a = "session/work/agent/main";
  ASSERT_TRUE(w.write(a + "/cfg", "agent=observer")) << w.log_text();
  std::filesystem::create_directories(dir);
  w.fake.push({{"text", "looking"}});
  ASSERT_TRUE(w.write(a + "/prompt", "what can you do"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 1; })) << w.log_text();
  const auto body = chat_bodies(w).back();
  std::vector<std::string> names;
  for (const auto& t : body.value("tools", json::array())) names.push_back(t["function"]["name"]);
  for (const char* gone : {"shell", "file_write", "file_edit"})
    EXPECT_EQ(std::find(names.begin(), names.end(), gone), names.end()) << gone << " came back: " << body.value("tools", json::array()).dump();
}

// §7.7, §6.1: a restored session whose toolsrv cannot start is still restored, and a call its
// model makes gets `tool server unavailable`, not `unknown tool` (no tool list came this round).
TEST(Conversation, ARestoredSessionWhoseToolsrvCannotStartAnswersCallsUnavailable) {
  World w;
  const std::string dir = restore_without_cwd(w);
  const std::string a = "session/work/agent/main";
  w.fake.push({{"tool_calls", json::array({{{"id", "c1"}, {"name", "shell"}, {"arguments", {{"cmd", "ls"}}}}})}});
  w.fake.push({{"text", "no tools today"}});
  ASSERT_TRUE(w.write(a + "/prompt", "list the files"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 1; })) << w.log_text();
  ASSERT_TRUE(w.wait_state(a, "idle"));
  const auto results = contents(w, a, "tool", "shell");
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].rfind("error: tool server unavailable: ", 0), 0u) << results[0];
  const auto errors = contents(w, a, "error");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].rfind("tool server unavailable: ", 0), 0u) << errors[0];
  // Every other need says so the same way: a `!` command, the agent's cwd set through ctl.
  ASSERT_TRUE(w.write(a + "/prompt", "!ls"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "error").size() == 2; })) << w.log_text();
  EXPECT_EQ(contents(w, a, "error")[1].rfind("!: tool server unavailable: ", 0), 0u) << contents(w, a, "error")[1];
  auto cwd = w.rdwr(a + "/ctl", "cwd " + w.project);
  EXPECT_EQ(cwd.ename().rfind("tool server unavailable: ", 0), 0u) << cwd.ename();
  // §7.6: the platform is toolsrv's to say; without it the prompt says `unknown`, and renders
  // again once toolsrv answers, not with a platform made up.
  auto system = [&](std::size_t i) { return chat_bodies(w).at(i)["messages"][0]["content"].get<std::string>(); };
  EXPECT_NE(system(0).find("- Platform: unknown\n"), std::string::npos) << system(0);
  std::filesystem::create_directories(dir);
  w.fake.push({{"text", "back"}});
  ASSERT_TRUE(w.write(a + "/prompt", "again"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 2; })) << w.log_text();
  const auto later = system(chat_bodies(w).size() - 1);
  EXPECT_EQ(later.find("- Platform: unknown\n"), std::string::npos) << later;
  EXPECT_NE(later.find("- Platform: linux/"), std::string::npos) << later;
}

// §6.1, §7.5: an agent created while toolsrv cannot start gets its profile's autoLoad tools at
// toolsrv's next start, as a restored agent does, and keeps them across a restart.
TEST(Conversation, AnAgentMadeWhileToolsrvCannotStartGetsItsToolsAtTheNextStart) {
  World w;
  const std::string dir = restore_without_cwd(w);
  auto a = w.agent("session/work", "late");
  const auto notes = contents(w, a, "info");
  ASSERT_FALSE(notes.empty());
  EXPECT_EQ(notes[0].rfind("autoLoad ", 0), 0u) << notes[0];
  EXPECT_NE(notes[0].find(": tool server unavailable: "), std::string::npos) << notes[0];
  std::filesystem::create_directories(dir);
  w.fake.push(shell_round("c1", "echo from-late"));
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 2; })) << w.log_text();
  ASSERT_TRUE(w.wait_state(a, "idle"));
  const auto results = contents(w, a, "tool", "shell");
  ASSERT_EQ(results.size(), 1u);
  EXPECT_NE(results[0].find("from-late"), std::string::npos) << results[0];
  w.stop_server(SIGTERM);
  w.start();
  const auto tools = w.rdwr(a + "/ctl", "tools");
  ASSERT_TRUE(tools) << tools.ename();
  EXPECT_NE(tools->find("shell"), std::string::npos) << *tools;
}

// §1.4, §8.9: SIGTERM interrupts every turn before the saves: after a restart the history holds
// the interrupted answer's text, and the stats its request.
TEST(Conversation, SigtermSavesWhatTheInterruptKept) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"text", "partial " + std::string(2000, 'z')}, {"delay_ms", 20}, {"chunk", 8}});
  auto chat = w.open(a + "/chat");
  ASSERT_TRUE(w.write(a + "/prompt", "write a lot"));
  World::read_until(chat, "zzzz");
  w.stop_server(SIGTERM);
  w.kill_toolsrvs();
  w.start();
  const auto stats = *w.read(a + "/stats");
  EXPECT_NE(stats.find("requests=1\n"), std::string::npos) << stats;
  w.fake.push({{"text", "ok"}});
  ASSERT_TRUE(w.write(a + "/prompt", "again"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 2; }));
  auto body = request_body(w, 1);
  auto& msgs = body["messages"];
  ASSERT_GE(msgs.size(), 3u) << body.dump();
  EXPECT_EQ(msgs[msgs.size() - 2]["role"], "assistant") << body.dump();
  EXPECT_EQ(msgs[msgs.size() - 2]["content"].get<std::string>().rfind("partial zz", 0), 0u) << body.dump();
}

TEST(Conversation, SigtermWithARunningToolsrvIsNotHeldByItsGrace) {
  World w;
  auto s = w.session("work");  // session/new checks the cwd through toolsrv: it runs now
  w.agent(s, "main");
  w.stop_server(SIGTERM);
  // toolsrv left on SIGTERM at once: its 5 s SIGKILL timer must not keep olliesrv running.
  EXPECT_EQ(w.log_text().find("still busy"), std::string::npos) << w.log_text();
}

TEST(Conversation, ACorruptSessionFileIsSkippedAndLeftUntouched) {
  World w;
  w.session("good");
  // One that parses but cannot be restored whole: two agents under one name. Restoring it without
  // one of them would drop that agent's history at the next save.
  auto twins = w.session("twins");
  w.agent(twins, "one");
  w.agent(twins, "two");
  const std::string twins_file = w.data + "/sessions/" + id_of(w, twins) + "/session.json";
  w.stop_server(SIGTERM);
  auto j = json::parse(read_file(twins_file));
  for (auto& a : j["agents"]) a["name"] = "one";
  const std::string twins_text = j.dump(1);
  write_file(twins_file, twins_text);
  // Its torn blocks line stays too: only a session that is restored has its files changed.
  const std::string twins_blocks =
      twins_file.substr(0, twins_file.size() - 12) + j["agents"][0]["id"].get<std::string>() + ".blocks.jsonl";
  write_file(twins_blocks, read_file(twins_blocks) + "{\"role\":\"to");
  const std::string bad = w.data + "/sessions/0badbad0-0000-4000-8000-000000000000";
  write_file(bad + "/session.json", "{\"id\": 12, broken");
  ::chmod(bad.c_str(), 0700);
  // Names session/new and agent/new would refuse (§2.4): one with a newline would add a line to
  // session/idx, `new` would hide the agent's own agent/new.
  auto named = [&](const std::string& sname, const std::string& aname) {
    auto sp = w.session(sname);
    w.agent(sp, aname);
    return w.data + "/sessions/" + id_of(w, sp) + "/session.json";
  };
  w.start();  // to make two more sessions, then rename them on disk
  const std::string bad_session = named("badsession", "main"), bad_agent = named("badagent", "main");
  // A cwd with a newline would split its session/idx record; an agent id another session's agent
  // has (a session directory copied to fork it) would own that agent's files as its uname.
  const std::string bad_cwd = named("badcwd", "main"), copied = named("original", "main");
  // A profile name agent/new would refuse: agent/idx would show it, a TAB splitting its record.
  const std::string bad_profile = named("badprofile", "main");
  w.stop_server(SIGTERM);
  for (const auto& [file, key] : {std::pair{bad_session, "session"}, std::pair{bad_agent, "agent"}, std::pair{bad_cwd, "cwd"},
                                  std::pair{bad_profile, "profile"}}) {
    auto k = json::parse(read_file(file));
    if (std::string(key) == "session") k["name"] = "bad\nname";
    else if (std::string(key) == "cwd") k["cwd"] = w.project + "\nX\tY";
    else if (std::string(key) == "profile") k["agents"][0]["profile"] = "../x\ty";
    else k["agents"][0]["name"] = "new";
    write_file(file, k.dump(1));
  }
  auto copy = json::parse(read_file(copied));
  copy["id"] = "ffffffff-0000-4000-8000-000000000000";  // sorts after the original: restored last
  copy["name"] = "copy";
  const std::string copy_dir = w.data + "/sessions/ffffffff-0000-4000-8000-000000000000";
  write_file(copy_dir + "/session.json", copy.dump(1));
  ::chmod(copy_dir.c_str(), 0700);
  const std::string bad_session_text = read_file(bad_session), bad_agent_text = read_file(bad_agent);
  w.start();
  auto idx = w.read("session/idx");
  ASSERT_TRUE(idx);
  EXPECT_NE(idx->find("good\t"), std::string::npos) << *idx;
  EXPECT_EQ(idx->find("0badbad0"), std::string::npos) << *idx;
  EXPECT_EQ(idx->find("twins"), std::string::npos) << *idx;
  EXPECT_EQ(read_file(bad + "/session.json"), "{\"id\": 12, broken");
  EXPECT_EQ(read_file(twins_file), twins_text);
  EXPECT_TRUE(read_file(twins_blocks).ends_with("{\"role\":\"to")) << read_file(twins_blocks);
  EXPECT_NE(w.log_text().find("agent already exists: one"), std::string::npos) << w.log_text();
  EXPECT_EQ(idx->find("badagent"), std::string::npos) << *idx;  // neither renamed session is served
  EXPECT_EQ(idx->find("bad\nname"), std::string::npos) << *idx;
  EXPECT_NE(w.log_text().find(": invalid session name: bad\\nname"), std::string::npos) << w.log_text();
  EXPECT_NE(w.log_text().find(": invalid agent name: new"), std::string::npos) << w.log_text();
  EXPECT_EQ(read_file(bad_session), bad_session_text);
  EXPECT_EQ(read_file(bad_agent), bad_agent_text);
  EXPECT_EQ(idx->find("badcwd"), std::string::npos) << *idx;
  EXPECT_NE(w.log_text().find(": cwd: invalid character: "), std::string::npos) << w.log_text();
  EXPECT_EQ(idx->find("badprofile"), std::string::npos) << *idx;
  EXPECT_NE(w.log_text().find(": invalid profile: ../x\\ty"), std::string::npos) << w.log_text();
  EXPECT_NE(idx->find("original\t"), std::string::npos) << *idx;
  EXPECT_EQ(idx->find("copy\t"), std::string::npos) << *idx;
  EXPECT_NE(w.log_text().find("ffffffff-0000-4000-8000-000000000000: agent " + copy["agents"][0]["id"].get<std::string>() +
                              ": id taken by another session"),
            std::string::npos)
      << w.log_text();
}

// Two sessions of one name on disk: a rename's new name was given to a new session before the
// rename was saved, and a kill -9 fell between. Both are served: the later by id under its default
// name (the first 8 digits of its id), saved so; it had been skipped, its history out of reach.
TEST(Conversation, TwoSessionsOfOneNameAreBothRestored) {
  World w;
  auto first = w.session("work");
  auto a = w.agent(first, "main");
  w.fake.push({{"text", "kept"}});
  ASSERT_TRUE(w.write(a + "/prompt", "hi"));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  auto second = w.session("other");
  w.agent(second, "main");
  std::vector<std::string> ids{id_of(w, first), id_of(w, second)};
  w.stop_server(SIGTERM);
  const std::string other_file = w.data + "/sessions/" + ids[1] + "/session.json";
  auto j = json::parse(read_file(other_file));
  j["name"] = "work";
  write_file(other_file, j.dump(1));
  w.start();
  std::sort(ids.begin(), ids.end());
  auto idx = w.read("session/idx");
  ASSERT_TRUE(idx);
  EXPECT_NE(idx->find("work\t" + ids[0] + "\t"), std::string::npos) << *idx;
  const std::string renamed = ids[1].substr(0, 8);
  EXPECT_NE(idx->find(renamed + "\t" + ids[1] + "\t"), std::string::npos) << *idx;
  EXPECT_EQ(json::parse(read_file(w.data + "/sessions/" + ids[1] + "/session.json"))["name"], renamed);
  EXPECT_NE(w.log_text().find("restore: session " + ids[1] + ": its name work is another session's: it is " + renamed + " now"),
            std::string::npos)
      << w.log_text();
  auto log = w.read("session/" + ids[0] + "/agent/main/log");
  auto log2 = w.read("session/" + ids[1] + "/agent/main/log");
  ASSERT_TRUE(log && log2);
  EXPECT_NE((*log + *log2).find("kept"), std::string::npos) << *log << *log2;
}

// §8.2: the calls of a response the provider stopped (a content filter) do not run: each gets
// `error: stopped: <reason>`, the turn ends with the `error` block, and no state says `calling:`
// for them (it did, then `idle`).
TEST(Conversation, TheCallsOfAStoppedResponseDoNotRunAndNoStateSaysSo) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  const std::string aid = id_of(w, a);
  auto ev = w.walk("event");
  ASSERT_TRUE(ev && ev->open(p9::ORDWR));
  ASSERT_TRUE(ev->write("agent." + aid + ".state"));
  w.fake.push({{"tool_calls", json::array({{{"id", "c1"}, {"name", "shell"}, {"arguments", {{"cmd", "touch ran"}}}}})},
               {"stop", "filter"}});
  ASSERT_TRUE(w.write(a + "/prompt", "hi"));
  EXPECT_EQ(World::read_until(*ev, " idle\n"), "agent." + aid + ".state thinking\nagent." + aid + ".state idle\n");
  EXPECT_FALSE(std::filesystem::exists(w.project + "/ran"));
  std::vector<std::string> seen;
  for (auto& b : blocks_of(*w.read(a + "/log.raw")))
    if (b["role"] == "tool" || b["role"] == "error") seen.push_back(b["role"].get<std::string>() + ": " + b["content"].get<std::string>());
  EXPECT_EQ(seen, (std::vector<std::string>{"tool: error: stopped: content_filter", "error: stopped: content_filter"}));
}

// §8.5.1: a restored agent's context estimate still counts its system prompt, which is rendered
// again only at its first use (§7.7): stats said `contextTokens=2` after a restart (the status
// lines of o and ellie showed ctx 0%) until the next turn.
TEST(Conversation, ARestoredAgentsContextEstimateCountsItsSystemPrompt) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"text", "hi"}});
  ASSERT_TRUE(w.write(a + "/prompt", "hello"));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  const auto tokens = [&] {
    const std::string st = *w.read(a + "/stats");
    const auto at = st.find("contextTokens=");
    return std::stol(st.substr(at + 14));
  };
  const long before = tokens();
  ASSERT_GT(before, 1000);  // the default profile's system prompt and tools: thousands of bytes
  w.stop_server(SIGTERM);
  w.start();
  EXPECT_EQ(tokens(), before);
}

TEST(Conversation, ToolLoadCallsBackIntoOlliesrvAsTheAgentItself) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"tool_calls", json::array({{{"id", "c1"}, {"name", "tool_load"}, {"arguments", {{"name", "web_fetch"}}}}})}});
  w.fake.push({{"text", "loaded"}});
  ASSERT_TRUE(w.write(a + "/prompt", "load web_fetch"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 2; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  std::string result;
  for (auto& b : blocks_of(*w.read(a + "/log.raw")))
    if (b["role"] == "tool") result = b["content"];
  EXPECT_NE(result.find("web_fetch"), std::string::npos) << result;
  EXPECT_EQ(result.find("error"), std::string::npos) << result;
  bool offered = false;
  auto second = request_body(w, 1);
  for (auto& t : second["tools"]) offered = offered || t["function"]["name"] == "web_fetch";
  EXPECT_TRUE(offered);
  auto tools = w.rdwr(a + "/ctl", "tools");
  ASSERT_TRUE(tools);
  EXPECT_NE(tools->find("web_fetch\t"), std::string::npos) << *tools;
}

TEST(Conversation, AToolCannotAttachAsTheHostownerOrAnotherAgent) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  auto b = w.agent(s, "other");
  auto other_id = w.read(b + "/id");
  ASSERT_TRUE(other_id);
  std::string oid = other_id->substr(0, other_id->size() - 1);
  // A shell tool of agent main tries to use agent other's ctl with its own secret, and the
  // hostowner's name.
  const std::string cmd = "ollie-9p -a \"$OLLIE_ADDR\" read session/work/agent/other/stats 2>&1; OLLIE_UNAME=" + oid +
                          " ollie-9p read session/work/agent/other/stats 2>&1; env -u OLLIE_UNAME -u OLLIE_AUTH ollie-9p read session/idx 2>&1; true";
  w.fake.push({{"tool_calls", json::array({{{"id", "c1"}, {"name", "shell"}, {"arguments", {{"cmd", cmd}}}}})}});
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "try"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 2; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  std::string result;
  for (auto& bl : blocks_of(*w.read(a + "/log.raw")))
    if (bl["role"] == "tool") result = bl["content"];
  // As itself it reads another agent's stats (0444); as the other agent its secret fails; as the
  // hostowner it is refused for running with no_new_privs.
  EXPECT_NE(result.find("input="), std::string::npos) << result;
  EXPECT_NE(result.find("authentication failed"), std::string::npos) << result;
  EXPECT_NE(result.find("sandboxed clients attach as their agent"), std::string::npos) << result;
}

TEST(Conversation, AReadOfAPathWrittenInTheSameResponseRunsAfterTheWrite) {
  World w;
  write_file(w.project + "/a.txt", "old\n");
  write_file(w.project + "/b.txt", "bee\n");
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"tool_calls", json::array({{{"id", "w1"}, {"name", "file_write"}, {"arguments", {{"path", "a.txt"}, {"content", "new\n"}}}},
                                            {{"id", "r1"}, {"name", "file_read"}, {"arguments", {{"path", "./a.txt"}}}},
                                            {{"id", "r2"}, {"name", "file_read"}, {"arguments", {{"path", "b.txt"}}}}})}});
  w.fake.push({{"text", "ok"}});
  ASSERT_TRUE(w.write(a + "/prompt", "edit and read"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 2; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  std::vector<std::string> seq, results;
  for (auto& b : blocks_of(*w.read(a + "/log.raw"))) {
    if (b["role"] == "call" || b["role"] == "tool") seq.push_back(b["role"].get<std::string>() + " " + b["name"].get<std::string>());
    if (b["role"] == "tool") results.push_back(b["content"]);
  }
  // Batches: the write alone, then both reads (./a.txt is the written path, cleaned).
  EXPECT_EQ(seq, (std::vector<std::string>{"call file_write", "tool file_write", "call file_read", "call file_read",
                                           "tool file_read", "tool file_read"}));
  ASSERT_EQ(results.size(), 3u);
  EXPECT_NE(results[1].find("new"), std::string::npos) << results[1];
  EXPECT_NE(results[2].find("bee"), std::string::npos) << results[2];
  // The results reach the model in call order, each with its call's id.
  auto body = request_body(w, 1);
  std::vector<std::string> ids;
  for (auto& m : body["messages"])
    if (m["role"] == "tool") ids.push_back(m["tool_call_id"]);
  EXPECT_EQ(ids, (std::vector<std::string>{"w1", "r1", "r2"}));
}

// §8.1.3: each call has its result. A provider that gives one id to two calls of a response would
// get one result for two calls back, in this request and after a restart (§7.7 drops what looks
// unanswered): the repeat gets an id of its own.
TEST(Conversation, AnIdRepeatedInOneResponseIsMadeDistinct) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"tool_calls", json::array({{{"id", "dup"}, {"name", "shell"}, {"arguments", {{"cmd", "echo one"}}}},
                                           {{"id", "dup"}, {"name", "shell"}, {"arguments", {{"cmd", "echo two"}}}}})}});
  w.fake.push({{"text", "ok"}});
  w.fake.push({{"text", "again"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 2; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  auto pairs = [&](std::size_t n) {
    std::vector<std::string> calls, results;
    const auto body = request_body(w, n);
    for (auto& m : body["messages"]) {
      for (auto& c : m.value("tool_calls", json::array())) calls.push_back(c["id"]);
      if (m["role"] == "tool") results.push_back(m["tool_call_id"]);
    }
    return std::make_pair(calls, results);
  };
  auto [calls, results] = pairs(1);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0], "dup");
  EXPECT_NE(calls[1], "dup");
  EXPECT_EQ(results, calls);
  w.stop_server(SIGTERM);
  w.start();
  ASSERT_TRUE(w.write(a + "/prompt", "next"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 3; }));
  EXPECT_EQ(pairs(2), std::make_pair(calls, results));
}

// §3.2, §6.1: a session `kill` stops its toolsrv with SIGTERM, so toolsrv kills every process
// group it started, a background call's children too. The call a second agent was running fails
// as the connection closes; that must not turn the stop into a SIGKILL, which toolsrv cannot
// clean up after.
TEST(Conversation, ASessionKillEndsEveryProcessGroupItsToolsStarted) {
  World w;
  auto s = w.session("work");
  auto bg = w.agent(s, "bg");
  auto fg = w.agent(s, "fg");
  w.fake.push({{"tool_calls", json::array({{{"id", "b1"}, {"name", "shell"},
                                            {"arguments", {{"cmd", "sleep 100 & echo $! > child.pid; sleep 101"}, {"background", true}}}}})}});
  w.fake.push({{"text", "started"}});
  ASSERT_TRUE(w.write(bg + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return read_file(w.project + "/child.pid").ends_with("\n"); })) << w.log_text();
  ASSERT_TRUE(w.wait_state(bg, "idle"));
  const pid_t child = std::stoi(read_file(w.project + "/child.pid"));
  w.fake.push({{"tool_calls", json::array({{{"id", "f1"}, {"name", "shell"}, {"arguments", {{"cmd", "touch fg.ran; sleep 102"}}}}})}});
  ASSERT_TRUE(w.write(fg + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return std::filesystem::exists(w.project + "/fg.ran"); })) << w.log_text();
  ASSERT_EQ(::kill(child, 0), 0);
  EXPECT_EQ(*w.rdwr(s + "/ctl", "kill"), "killed\n");
  EXPECT_TRUE(eventually([&] { return ::kill(child, 0) != 0; }, 5s)) << "a background call's child outlived its session";
  EXPECT_EQ(w.log_text().find("toolsrv killed by signal 9"), std::string::npos) << w.log_text();
}
