// The agent ctl verbs (spec §3.3), cfg reads and writes (§2.8.3), the prompt prefixes (§3.4),
// renames (§2.7), the profile switch (§8.1.4), inject (§8.8) and peers (§8.11), through the real
// socket: the real olliesrv with its real toolsrv running the shipped tools, and the fake
// provider.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <future>
#include <optional>

#include "olliesrv/world.hpp"

using namespace convo;
using json = nlohmann::json;

namespace {

/// Waits for a block of `role` with exactly `content`.
bool wait_block(World& w, const std::string& agent, const std::string& role, const std::string& content) {
  return eventually([&] {
    for (const auto& c : contents(w, agent, role))
      if (c == content) return true;
    return false;
  });
}

std::string cfg_value(World& w, const std::string& agent, const std::string& key) {
  auto c = w.read(agent + "/cfg");
  if (!c) return "error: " + c.ename();
  const std::string k = "\n" + key + "=";
  const std::string text = "\n" + *c;
  auto p = text.find(k);
  if (p == std::string::npos) return "missing";
  p += k.size();
  return text.substr(p, text.find('\n', p) - p);
}

/// A prompt answered with `text`; returns once the agent is idle again.
void converse(World& w, const std::string& agent, const std::string& prompt, const std::string& text) {
  w.fake.push({{"text", text}});
  ASSERT_TRUE(w.write(agent + "/prompt", prompt));
  ASSERT_TRUE(wait_block(w, agent, "assistant", text));
  ASSERT_TRUE(w.wait_state(agent, "idle"));
}

/// A shell call that runs until the file `go` exists in the project directory.
json wait_for_go(const std::string& id) {
  return {{"id", id}, {"name", "shell"}, {"arguments", {{"cmd", "while [ ! -e go ]; do sleep 0.02; done; echo ran"}}}};
}

// §7.4: a backend secret appears in no served file and reaches nothing olliesrv starts: a prompt
// entry's `$VAR` finds it unset, and its `!` command (which may read the model-written project)
// runs without it.
TEST(AgentCtl, PromptEntriesNeverSeeABackendSecret) {
  World w;
  write_file(w.project + "/k-.md", "the file of an unset variable");
  own_profiles(w, {{"leaky", json{{"prompt", {"!env | grep -c '^OLLIE_OPENAI_KEY='; echo marker-$((1+1))",
                                              w.project + "/k-${OLLIE_OPENAI_KEY}.md"}}}.dump()}});
  auto s = w.session("work");
  auto a = w.agent(s, "leaky", "agent=leaky");
  auto sp = ctl(w, a, "systemprompt");
  EXPECT_EQ(sp.find("sk-test"), std::string::npos) << sp;
  EXPECT_NE(sp.find("0\nmarker-2\n\nthe file of an unset variable"), std::string::npos) << sp;
}

// §7.5: `systemPrompt` replaces the default: an empty file leaves no System section (§7.6:
// empty sections omitted), and the value is a path even when it starts with `!`.
TEST(AgentCtl, SystemPromptFileReplacesTheDefaultEvenEmpty) {
  World w;
  write_file(w.project + "/empty.md", "");
  write_file(w.project + "/!bang.md", "Bang system.\n");
  own_profiles(w, {{"bare", R"({"systemPrompt": ")" + w.project + R"(/empty.md"})"},
                   {"bang", R"({"systemPrompt": ")" + w.project + R"(/!bang.md"})"}});
  auto s = w.session("work");
  auto bare = w.agent(s, "bare", "agent=bare");
  auto sp = ctl(w, bare, "systemprompt");
  EXPECT_EQ(sp.rfind("# Environment\n", 0), 0u) << sp;
  auto bang = w.agent(s, "bang", "agent=bang");
  sp = ctl(w, bang, "systemprompt");
  EXPECT_EQ(sp.rfind("Bang system.\n\n# Environment\n", 0), 0u) << sp;
}

/// The peers of agent `name` in its session's session.json.
std::vector<std::string> peers_saved(World& w, const std::string& session_id, const std::string& name) {
  auto j = json::parse(read_file(w.data + "/sessions/" + session_id + "/session.json"), nullptr, false);
  for (const auto& a : j["agents"])
    if (a["name"] == name) return a["peers"].get<std::vector<std::string>>();
  return {"no agent " + name};
}

}  // namespace

TEST(AgentCtl, QueryVerbsAndTheirErrors) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.agent(s, "other");
  EXPECT_EQ(ctl(w, a, "model"), "fake-model\n");
  EXPECT_EQ(ctl(w, a, "backend"), "openai\n");
  EXPECT_EQ(ctl(w, a, "agent"), "default\n");
  EXPECT_EQ(ctl(w, a, "cwd"), w.project + "\n");
  EXPECT_EQ(ctl(w, a, "name"), "main\n");
  EXPECT_EQ(ctl(w, a, "models"), "fake-model\n");
  EXPECT_EQ(ctl(w, a, "stop"), "idle\n");
  EXPECT_EQ(ctl(w, a, "compact"), "nothing to compact\n");
  // A description with a TAB and a newline stays on its line (one item per line, §3).
  write_file(w.own_dir("tools") + "/odd.meta", R"({"description": "one\ttwo\nthree", "cmd": "true"})");
  EXPECT_EQ(ctl(w, a, "tool_load odd"), "odd\n");
  EXPECT_EQ(ctl(w, a, "tool_load odd file_read odd"), "odd\nfile_read\n");  // each name once
  auto tools = ctl(w, a, "tools");
  EXPECT_NE(tools.find("file_read\t"), std::string::npos) << tools;
  EXPECT_NE(tools.find("\nshell\t"), std::string::npos) << tools;
  EXPECT_NE(tools.find("\nodd\tone two three\n"), std::string::npos) << tools;
  auto sp = ctl(w, a, "systemprompt");
  EXPECT_NE(sp.find("- Working directory: " + w.project + "\n"), std::string::npos) << sp;
  EXPECT_NE(sp.find("- Agent: main ("), std::string::npos) << sp;
  EXPECT_EQ(sp.back(), '\n');
  // The grammar of §3 and §1.8.
  EXPECT_EQ(ctl(w, a, "frob"), "error: unknown command: frob");
  EXPECT_EQ(ctl(w, a, "model a\nmodel b"), "error: one command per request");
  EXPECT_EQ(ctl(w, a, "model a b"), "error: usage: model [name]");
  EXPECT_EQ(ctl(w, a, "tool_load"), "error: usage: tool_load <name>...");
  EXPECT_EQ(ctl(w, a, "peeradd"), "error: usage: peeradd <name>");
  EXPECT_EQ(ctl(w, a, "peerdel a b"), "error: usage: peerdel <name>");
  EXPECT_EQ(ctl(w, a, "inject"), "error: usage: inject <text>");
  EXPECT_EQ(ctl(w, a, "inject    "), "error: usage: inject <text>");
  EXPECT_EQ(ctl(w, a, "stop now"), "error: usage: stop");
  EXPECT_EQ(ctl(w, a, "model 'x"), "error: unterminated quote");
  // A model is one field of agent/idx and one value of cfg: no TAB or newline gets in (§1.2).
  EXPECT_EQ(ctl(w, a, "model 'm1\tEVIL'"), "error: invalid model: m1\\tEVIL");
  EXPECT_EQ(ctl(w, a, "model " + std::string(257, 'm')), "error: invalid model: longer than 256 bytes");
  EXPECT_EQ(ctl(w, a, "agent nosuch"), "error: unknown agent profile: nosuch");
  EXPECT_EQ(ctl(w, a, "backend nosuch"),
            "error: unknown backend: nosuch (ollama, openai, openrouter, anthropic, copilot, kiro, gemini)");
  EXPECT_EQ(ctl(w, a, "backend ''"),
            "error: unknown backend:  (ollama, openai, openrouter, anthropic, copilot, kiro, gemini)");
  EXPECT_EQ(ctl(w, a, "backend anthropic").rfind("error: anthropic: missing key: set ", 0), 0u);
  EXPECT_EQ(ctl(w, a, "backend"), "openai\n");  // nothing changed
  EXPECT_EQ(ctl(w, a, "tool_load nosuch_tool"), "error: unknown tool: nosuch_tool");
  EXPECT_EQ(ctl(w, a, "cwd rel/dir"), "error: cwd must be absolute: rel/dir");
  EXPECT_EQ(ctl(w, a, "cwd /nonexistent-dir"), "error: cwd: /nonexistent-dir: not a directory");
  EXPECT_EQ(ctl(w, a, "name bad/name"), "error: invalid name: bad/name");
  EXPECT_EQ(ctl(w, a, "name new"), "error: invalid name: new");
  EXPECT_EQ(ctl(w, a, "name other"), "error: agent already exists: other");
}

TEST(AgentCtl, ModelBackendAndToolLoadChangeWhatTheNextRequestUses) {
  World w;
  w.restart_with({"OLLIE_OLLAMA_URL=http://127.0.0.1:1"});  // nothing listens there
  auto s = w.session("work");
  auto a = w.agent(s, "main", "agent=observer");
  EXPECT_EQ(ctl(w, a, "model other-model"), "other-model\n");
  EXPECT_EQ(cfg_value(w, a, "model"), "other-model");
  EXPECT_EQ(ctl(w, a, "tool_load shell file_read"), "shell\nfile_read\n");
  converse(w, a, "hi", "hello");
  auto body = chat_bodies(w).back();
  EXPECT_EQ(body["model"], "other-model");
  bool shell = false;
  for (auto& t : body["tools"]) shell = shell || t["function"]["name"] == "shell";
  EXPECT_TRUE(shell) << body["tools"].dump();
  // The same backend keeps the model; another one takes its default (here OLLIE_MODEL).
  EXPECT_EQ(ctl(w, a, "backend openai"), "openai\n");
  EXPECT_EQ(ctl(w, a, "model"), "other-model\n");
  EXPECT_EQ(ctl(w, a, "backend ollama"), "ollama\n");
  EXPECT_EQ(ctl(w, a, "model"), "fake-model\n");
  EXPECT_EQ(cfg_value(w, a, "backend"), "ollama");
  auto models = ctl(w, a, "models");
  EXPECT_EQ(models.rfind("error: ollama: ", 0), 0u) << models;
}

// A profile broken while olliesrv was stopped: the agent is restored without it, and its
// transcript says so (§7.5: warnings are info blocks), not only the server's log.
TEST(AgentCtl, AProfileBrokenWhileStoppedIsSaidInTheTranscriptAtRestore) {
  World w;
  const auto agents = w.own_dir("agents");
  write_file(agents + "/mine.json", "{\"autoLoad\": [\"shell\"]}");
  auto s = w.session("work");
  auto a = w.agent(s, "main", "agent=mine");
  ASSERT_EQ(ctl(w, a, "tools").rfind("shell\t", 0), 0u);
  w.stop_server(SIGTERM);
  write_file(agents + "/mine.json", "{\"autoLoad\": [\"shell\"],}");
  w.start();
  const auto infos = contents(w, a, "info");
  ASSERT_FALSE(infos.empty());
  EXPECT_EQ(infos.back().rfind("agent profile mine: parse error at line 1, ", 0), 0u) << infos.back();
  EXPECT_TRUE(infos.back().ends_with(": restored without its prompt entries and autoLoad tools")) << infos.back();
  EXPECT_EQ(ctl(w, a, "agent"), "mine\n");
}

TEST(AgentCtl, IdleOnlyVerbsAreRefusedDuringATurn) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"fault", "hang"}});
  ASSERT_TRUE(w.write(a + "/prompt", "hi"));
  ASSERT_TRUE(eventually([&] { return chat_bodies(w).size() == 1; }));
  ASSERT_EQ(w.read_state(a), "thinking");
  EXPECT_EQ(ctl(w, a, "clear"), "error: cannot clear while agent is running");
  EXPECT_EQ(ctl(w, a, "compact"), "error: cannot compact while agent is running");
  EXPECT_EQ(ctl(w, a, "model x"), "error: cannot model while agent is running");
  EXPECT_EQ(ctl(w, a, "backend openai"), "error: cannot backend while agent is running");
  EXPECT_EQ(ctl(w, a, "agent observer"), "error: cannot agent while agent is running");
  EXPECT_EQ(ctl(w, a, "cwd /tmp"), "error: cannot cwd while agent is running");
  EXPECT_EQ(w.write(a + "/cfg", "temperature=0.5").ename(), "cannot change cfg while agent is running");
  EXPECT_EQ(w.write(a + "/cfg", "temperature=hot").ename(), "cannot change cfg while agent is running");  // any write
  // Queries, renames and the verbs that are not idle-only still work.
  EXPECT_EQ(ctl(w, a, "model"), "fake-model\n");
  EXPECT_EQ(ctl(w, a, "agent"), "default\n");
  EXPECT_EQ(ctl(w, a, "cwd"), w.project + "\n");
  EXPECT_EQ(ctl(w, a, "name busy"), "busy\n");
  a = s + "/agent/busy";
  EXPECT_EQ(cfg_value(w, a, "temperature"), "");
  EXPECT_EQ(ctl(w, a, "stop"), "stopped\n");
  ASSERT_TRUE(w.wait_state(a, "idle"));
  EXPECT_TRUE(wait_block(w, a, "info", "interrupted"));
  EXPECT_EQ(ctl(w, a, "stop"), "idle\n");
  EXPECT_EQ(ctl(w, a, "clear"), "cleared\n");
  EXPECT_TRUE(wait_block(w, a, "info", "cleared"));
}

TEST(AgentCtl, AnInjectReachesTheLastResultOfTheNextRound) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"tool_calls", json::array({wait_for_go("call_1")})}});
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "work on it"));
  ASSERT_TRUE(w.wait_state(a, "calling: shell"));
  EXPECT_EQ(ctl(w, a, "inject first"), "injected\n");
  EXPECT_EQ(ctl(w, a, "inject   indented"), "injected\n");  // free text: the raw rest after one blank
  EXPECT_EQ(ctl(w, a, "inject also check\nthe tests"), "injected\n");  // replaces it; free text
  write_file(w.project + "/go", "");
  ASSERT_TRUE(wait_block(w, a, "assistant", "done"));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  auto bodies = chat_bodies(w);
  ASSERT_EQ(bodies.size(), 2u);
  const auto& last = bodies[1]["messages"].back();
  EXPECT_EQ(last["role"], "tool");
  const std::string content = last["content"];
  const std::string tail = "\n\n<system-user-interruption>\nalso check\nthe tests\n</system-user-interruption>";
  ASSERT_GE(content.size(), tail.size());
  EXPECT_EQ(content.substr(content.size() - tail.size()), tail) << content;
  EXPECT_EQ(content.find("first"), std::string::npos) << content;
  // The tool block is the result exactly as the model got it, the inject included (§2.8.8).
  EXPECT_EQ(contents(w, a, "tool", "shell"), (std::vector<std::string>{content}));
  EXPECT_EQ(contents(w, a, "user", "inject"), (std::vector<std::string>{"first", "  indented", "also check\nthe tests"}));
  // Idle, an inject is an ordinary prompt (§3.3): its user block is a prompt's, without an origin.
  w.fake.push({{"text", "sure"}});
  EXPECT_EQ(ctl(w, a, "inject now this"), "submitted\n");
  ASSERT_TRUE(wait_block(w, a, "assistant", "sure"));
  EXPECT_EQ(chat_bodies(w).back()["messages"].back()["content"], "now this");
  EXPECT_EQ(contents(w, a, "user", "inject"), (std::vector<std::string>{"first", "  indented", "also check\nthe tests"}));
  auto log = w.read(a + "/log");
  ASSERT_TRUE(log);
  EXPECT_NE(log->find("\nuser: now this\n"), std::string::npos) << *log;
}

TEST(AgentCtl, AnInjectNoRoundTookIsTheNextPromptWithoutASecondBlock) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"tool_calls", json::array({wait_for_go("call_1")})}});
  w.fake.push({{"text", "finished"}, {"chunk", 2}, {"delay_ms", 300}});  // slow: the inject arrives meanwhile
  w.fake.push({{"text", "about the follow-up"}});
  ASSERT_TRUE(w.write(a + "/prompt", "work on it"));
  ASSERT_TRUE(w.wait_state(a, "calling: shell"));
  // The queued prompt waits behind the inject (§8.1.2).
  ASSERT_TRUE(w.write(a + "/prompt", "queued"));
  w.fake.push({{"text", "about the queue"}});
  write_file(w.project + "/go", "");
  ASSERT_TRUE(eventually([&] { return chat_bodies(w).size() == 2; }));
  // The final response of the turn is on its way: no round takes the inject now.
  EXPECT_EQ(ctl(w, a, "inject follow-up"), "injected\n");
  ASSERT_TRUE(wait_block(w, a, "assistant", "about the queue"));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  auto bodies = chat_bodies(w);
  ASSERT_EQ(bodies.size(), 4u);
  EXPECT_EQ(bodies[2]["messages"].back()["content"], "follow-up");
  EXPECT_EQ(bodies[3]["messages"].back()["content"], "queued");
  EXPECT_EQ(contents(w, a, "user", "inject"), (std::vector<std::string>{"follow-up"}));
}

// A response the provider stopped (content filter) runs none of its calls: no tool round took the
// inject, so it is the next prompt (§8.8), not a line under a result the model never reads.
TEST(AgentCtl, AnInjectDuringAFilteredResponseIsTheNextPrompt) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"text", "filtered slow"},
               {"chunk", 2},
               {"delay_ms", 300},
               {"tool_calls", json::array({{{"id", "f1"}, {"name", "shell"}, {"arguments", {{"cmd", "true"}}}}})},
               {"stop", "filter"}});
  w.fake.push({{"text", "about the inject"}});
  ASSERT_TRUE(w.write(a + "/prompt", "work on it"));
  ASSERT_TRUE(eventually([&] { return chat_bodies(w).size() == 1; }));
  EXPECT_EQ(ctl(w, a, "inject and this"), "injected\n");
  ASSERT_TRUE(wait_block(w, a, "assistant", "about the inject"));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  auto bodies = chat_bodies(w);
  ASSERT_EQ(bodies.size(), 2u);
  EXPECT_EQ(bodies[1]["messages"].back()["content"], "and this");
  EXPECT_EQ(contents(w, a, "tool", "shell"), (std::vector<std::string>{"error: stopped: content_filter"}));
  EXPECT_EQ(contents(w, a, "user", "inject"), (std::vector<std::string>{"and this"}));
}

// §2.8.8: one response is one assistant block, even when a `/verb` reply and an inject arrive
// while it streams; chat shows the response's text whole, the other blocks after it, and so do
// log.raw and the chat a restart renders from the blocks.
TEST(AgentCtl, BlocksAppendedWhileAResponseStreamsDoNotSplitIt) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"text", "one two three four"}, {"chunk", 4}, {"delay_ms", 150}});
  ASSERT_TRUE(w.write(a + "/prompt", "count"));
  w.fake.push({{"text", "five"}});  // the inject no round took is the next prompt (§8.8)
  ASSERT_TRUE(eventually([&] {
    auto log = w.read(a + "/log");
    return log && log->starts_with("user: count\n\none");
  }));
  ASSERT_TRUE(w.write(a + "/prompt", "/model"));
  EXPECT_EQ(ctl(w, a, "inject and five"), "injected\n");
  ASSERT_TRUE(wait_block(w, a, "assistant", "five"));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  EXPECT_EQ(contents(w, a, "assistant"), (std::vector<std::string>{"one two three four", "five"}));
  EXPECT_EQ(contents(w, a, "info"), (std::vector<std::string>{"fake-model"}));
  auto r = w.read(a + "/log");
  ASSERT_TRUE(r);
  const std::string log = *r;
  EXPECT_NE(log.find("one two three four\n\n:: fake-model\n\nuser (inject): and five\n\n"), std::string::npos) << log;
  std::vector<std::string> roles;
  for (const auto& b : blocks_of(w, a))
    if (b["role"] != "context") roles.push_back(b["role"].get<std::string>() + ":" + b["content"].get<std::string>());
  EXPECT_EQ(roles, (std::vector<std::string>{"user:count", "assistant:one two three four", "info:fake-model",
                                             "user:and five", "assistant:five"}));
  w.restart_with({});
  auto again = w.read(a + "/log");
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, log);
}

TEST(AgentCtl, StopDiscardsAPendingInject) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"fault", "hang"}});
  ASSERT_TRUE(w.write(a + "/prompt", "hi"));
  ASSERT_TRUE(eventually([&] { return chat_bodies(w).size() == 1; }));
  EXPECT_EQ(ctl(w, a, "inject lost"), "injected\n");
  EXPECT_EQ(ctl(w, a, "stop"), "stopped\n");
  ASSERT_TRUE(wait_block(w, a, "info", "interrupted"));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  converse(w, a, "next", "ok");
  auto bodies = chat_bodies(w);
  ASSERT_EQ(bodies.size(), 2u);
  EXPECT_EQ(bodies[1]["messages"].back()["content"], "next");
}

// §3.3: `stop` answers `idle` when no turn runs, also while a change holds the agent (a profile
// switch running its slow `!` entry); the change is not interrupted.
TEST(AgentCtl, StopDuringAProfileSwitchFindsNoTurn) {
  World w;
  const std::string marker = w.root + "/entry-ran";
  own_profiles(w, {{"slow", json{{"prompt", {"!echo started > " + marker + "; sleep 1; echo slow"}}}.dump()}});
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  auto switched = std::async(std::launch::async, [&] { return ctl(w, a, "agent slow"); });
  ASSERT_TRUE(eventually([&] { return read_file(marker) == "started\n"; })) << read_file(marker);
  EXPECT_EQ(ctl(w, a, "stop"), "idle\n");
  EXPECT_EQ(switched.get(), "slow\n");
  EXPECT_NE(ctl(w, a, "systemprompt").find("\nslow"), std::string::npos);
}

// §8.9, §1.5: a `kill` during a profile switch ends the switch's `!` entry at once, and the switch
// answers `agent killed`, not the new profile of an agent that is gone.
TEST(AgentCtl, KillDuringAProfileSwitchEndsItsEntry) {
  World w;
  const std::string marker = w.root + "/entry-ran";
  own_profiles(w, {{"slow", json{{"prompt", {"!echo started > " + marker + "; sleep 40; echo slow"}}}.dump()}});
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  auto switched = std::async(std::launch::async, [&] { return w.rdwr(a + "/ctl", "agent slow"); });
  ASSERT_TRUE(eventually([&] { return read_file(marker) == "started\n"; })) << read_file(marker);
  EXPECT_EQ(ctl(w, a, "kill"), "killed\n");
  ASSERT_EQ(switched.wait_for(std::chrono::seconds(5)), std::future_status::ready) << "the entry ran on";
  EXPECT_EQ(switched.get().ename(), "agent killed");
}

// §3.4, §8.9: `stop` ends the agent's `!` commands too, the only handle a user has on them (a
// `!` is no turn): the command's process group is killed and its block says `interrupted`.
TEST(AgentCtl, StopEndsTheBangCommandsRunning) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  const std::string pidfile = w.project + "/cmd.pid";
  ASSERT_TRUE(w.write(a + "/prompt", "!echo $$ > cmd.pid; sleep 60; echo slept"));
  ASSERT_TRUE(eventually([&] { return read_file(pidfile).ends_with("\n"); })) << w.log_text();
  const pid_t pid = std::stoi(read_file(pidfile));
  EXPECT_EQ(ctl(w, a, "stop"), "stopped\n");
  EXPECT_TRUE(wait_block(w, a, "exec", "interrupted"));
  EXPECT_TRUE(eventually([&] { return ::kill(pid, 0) != 0; })) << "the command still runs";
  EXPECT_EQ(ctl(w, a, "stop"), "idle\n");
  converse(w, a, "still there?", "yes");  // the global lock the command held is free
}

TEST(AgentCtl, AProfileSwitchRebuildsToolsPromptParametersAndHistory) {
  World w;
  own_profiles(w, {{"pinned", R"({"prompt": ["agent-observer.md"], "autoLoad": ["file_read"],
                                  "backend": "openai", "model": "pinned-model", "temperature": 0.7})"},
                   {"bad_profile_whose_long_name_makes_its_error_long", "{"},
                   {"planted", "PRIVATE KEY"}});
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  converse(w, a, "remember this", "noted");
  ASSERT_TRUE(w.write(a + "/cfg", "topP=0.3"));
  ASSERT_TRUE(w.write(a + "/plan", "- [ ] keep me\n"));
  EXPECT_EQ(ctl(w, a, "agent observer"), "observer\n");
  EXPECT_EQ(ctl(w, a, "agent"), "observer\n");
  auto tools = ctl(w, a, "tools");
  EXPECT_EQ(tools.find("shell"), std::string::npos) << tools;
  EXPECT_NE(tools.find("file_grep\t"), std::string::npos) << tools;
  EXPECT_EQ(cfg_value(w, a, "agent"), "observer");
  EXPECT_EQ(cfg_value(w, a, "reasoningEffort"), "low");
  EXPECT_EQ(cfg_value(w, a, "topP"), "");  // the cfg overrides are dropped
  EXPECT_EQ(cfg_value(w, a, "model"), "fake-model");  // the profile names no model
  EXPECT_EQ(*w.read(a + "/plan"), "- [ ] keep me\n");
  converse(w, a, "and now?", "fresh");
  auto body = chat_bodies(w).back();
  ASSERT_EQ(body["messages"].size(), 2u) << body["messages"].dump();  // system + the prompt: history cleared
  EXPECT_EQ(body["messages"][1]["content"], "and now?");
  EXPECT_NE(body["messages"][0]["content"].get<std::string>().find("## file_grep"), std::string::npos);
  // Naming the current profile changes nothing, as `cfg agent=` (§2.8.3): the history stays.
  EXPECT_EQ(ctl(w, a, "agent observer"), "observer\n");
  converse(w, a, "still there?", "yes");
  EXPECT_EQ(chat_bodies(w).back()["messages"].size(), 4u) << chat_bodies(w).back()["messages"].dump();
  // A profile that names its backend and model; the errors change nothing.
  EXPECT_EQ(ctl(w, a, "agent pinned"), "pinned\n");
  EXPECT_EQ(ctl(w, a, "model"), "pinned-model\n");
  EXPECT_EQ(cfg_value(w, a, "temperature"), "0.7");
  EXPECT_EQ(ctl(w, a, "tools").substr(0, 10), "file_read\t");
  const std::string bad = ctl(w, a, "agent bad_profile_whose_long_name_makes_its_error_long");
  EXPECT_EQ(bad.rfind("error: agent profile bad_profile_whose_long_name", 0), 0u) << bad;
  // Cut to 127 bytes in the Rerror, its start and its end kept; the whole of it is in the log (§1.8).
  EXPECT_EQ(bad.size(), 7 + 127u) << bad;
  const std::string log = w.log_text();
  const auto at = log.find(bad.substr(7, 62));
  ASSERT_NE(at, std::string::npos) << log;
  const std::string logged = log.substr(at, log.find('\n', at) - at);
  EXPECT_GT(logged.size(), 127u) << log;
  EXPECT_TRUE(logged.ends_with(bad.substr(7 + 62 + 3))) << bad;
  EXPECT_EQ(ctl(w, a, "agent ../x"), "error: unknown agent profile: ../x");
  // A parse error names no byte of the file: a profile may be a link to any file olliesrv reads.
  const std::string planted = ctl(w, a, "agent planted");
  EXPECT_EQ(planted, "error: agent profile planted: parse error at line 1, column 1: invalid literal");
  EXPECT_EQ(ctl(w, a, "agent"), "pinned\n");
  // !cmd respects the profile's tool set.
  ASSERT_TRUE(w.write(a + "/prompt", "!ls"));
  EXPECT_TRUE(wait_block(w, a, "error", "!: shell tool not loaded (use /tool_load shell)"));
}

// With no shell tool installed at all, §3.4's advice (`/tool_load shell`) would fail too: the
// block says what does.
TEST(AgentCtl, ABangCommandWithNoShellToolInstalledSaysHowToGetOne) {
  World w;
  const auto tools = w.own_dir("tools");
  std::filesystem::remove(tools + "/shell");
  std::filesystem::remove(tools + "/shell.meta");
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  ASSERT_TRUE(w.write(a + "/prompt", "!ls"));
  EXPECT_TRUE(wait_block(w, a, "error",
                         "!: shell tool not loaded, and none is installed: `./dev.sh install` installs the shipped tools "
                         "(doc/data.md)"));
}

// The command goes to `shell` as JSON: bytes that are not UTF-8 become U+FFFD, as in a prompt,
// and the command still runs (it was dropped without a block).
TEST(AgentCtl, ABangCommandWithBytesThatAreNotUtf8RunsWithThemReplaced) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  ASSERT_TRUE(w.write(a + "/prompt", "!echo x\xff"));
  EXPECT_TRUE(wait_block(w, a, "exec", "x\xEF\xBF\xBD\n"));
}

TEST(AgentCtl, CwdSetsTheToolsDirectoryAndClearsBackToTheSessions) {
  World w;
  std::filesystem::create_directories(w.project + "/sub");
  std::filesystem::create_directories(w.home + "/elsewhere");
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  EXPECT_EQ(ctl(w, a, "cwd " + w.project + "/sub/"), w.project + "/sub\n");
  EXPECT_EQ(cfg_value(w, a, "cwd"), w.project + "/sub");
  auto sp = ctl(w, a, "systemprompt");
  EXPECT_NE(sp.find("- Working directory: " + w.project + "/sub\n"), std::string::npos) << sp;
  ASSERT_TRUE(w.write(a + "/prompt", "!pwd"));
  EXPECT_TRUE(wait_block(w, a, "exec", w.project + "/sub\n"));
  // A shell call of the model runs there too.
  w.fake.push({{"tool_calls", json::array({{{"id", "c1"}, {"name", "shell"}, {"arguments", {{"cmd", "pwd"}}}}})}});
  w.fake.push({{"text", "there"}});
  ASSERT_TRUE(w.write(a + "/prompt", "where?"));
  ASSERT_TRUE(wait_block(w, a, "assistant", "there"));
  auto results = contents(w, a, "tool", std::string("shell"));
  ASSERT_FALSE(results.empty());
  EXPECT_EQ(results.back(), w.project + "/sub\n");
  ASSERT_TRUE(w.wait_state(a, "idle"));
  EXPECT_EQ(ctl(w, a, "cwd ~/elsewhere"), w.home + "/elsewhere\n");
  EXPECT_EQ(ctl(w, a, "cwd -"), w.project + "\n");
  EXPECT_EQ(cfg_value(w, a, "cwd"), "");
  ASSERT_TRUE(w.write(a + "/prompt", "!pwd"));
  EXPECT_TRUE(wait_block(w, a, "exec", w.project + "\n"));
  // Naming the session cwd is inheriting it, however it is named.
  EXPECT_EQ(ctl(w, a, "cwd " + w.project), w.project + "\n");
  EXPECT_EQ(cfg_value(w, a, "cwd"), "");
  std::filesystem::create_symlink(w.project, w.home + "/link");
  for (const auto& other : {w.project + "/sub/..", w.home + "/link"}) {
    EXPECT_EQ(ctl(w, a, "cwd " + other), w.project + "\n") << other;
    EXPECT_EQ(cfg_value(w, a, "cwd"), "") << other;
    ASSERT_TRUE(w.write(a + "/cfg", "cwd=" + other));
    EXPECT_EQ(cfg_value(w, a, "cwd"), "") << other;
  }
  auto b = w.agent(s, "other", "cwd=" + w.home + "/link");
  EXPECT_EQ(cfg_value(w, b, "cwd"), "");
  // A link to a name with a TAB or a newline is refused as the name itself is (§4.1); the
  // newline one was `bad resolve reply`, toolsrv's answer cut in two.
  for (const std::string odd : {"a\ttab", "a\nnl"}) {
    std::filesystem::create_directories(w.home + "/" + odd);
    std::filesystem::remove(w.home + "/odd");
    std::filesystem::create_directory_symlink(w.home + "/" + odd, w.home + "/odd");
    EXPECT_EQ(w.rdwr(a + "/ctl", "cwd " + w.home + "/odd").ename(), "cwd: invalid character") << odd;
  }
}

// A session's cwd is kept as its symlinks resolve when it is made, and toolsrv holds it only
// where that name still leads straight to it: a symlink another session's tool plants there
// later is refused, not followed, when its toolsrv starts again (after 30 s idle, a restart).
TEST(SessionCwd, IsKeptResolvedAndASymlinkPlantedOnItLaterIsRefused) {
  World w;
  std::filesystem::create_directories(w.project + "/real");
  std::filesystem::create_directories(w.home + "/elsewhere");
  std::filesystem::create_directory_symlink(w.project + "/real", w.project + "/link");
  ASSERT_TRUE(w.rdwr("session/new", "name=work cwd=" + w.project + "/link"));
  const std::string s = "session/work";
  auto a = w.agent(s, "main");
  EXPECT_EQ(cfg_value(w, a, "cwd"), "");
  ASSERT_TRUE(w.write(a + "/prompt", "!pwd"));
  ASSERT_TRUE(wait_block(w, a, "exec", w.project + "/real\n"));
  w.stop_server(SIGTERM);
  w.kill_toolsrvs();
  std::filesystem::rename(w.project + "/real", w.project + "/moved");
  std::filesystem::create_directory_symlink(w.home + "/elsewhere", w.project + "/real");
  w.start();
  ASSERT_TRUE(w.write(a + "/prompt", "!touch planted"));
  EXPECT_TRUE(eventually([&] {
    return w.read(a + "/log")->find("cwd changed since it was set: " + w.project + "/real") != std::string::npos;
  })) << *w.read(a + "/log");
  EXPECT_FALSE(std::filesystem::exists(w.home + "/elsewhere/planted"));
}

// Session `invalidate` re-syncs toolsrv (§3.2), the cwds resolved again: a directory removed and
// made anew (a fresh clone) is taken, where its calls said it had changed.
TEST(SessionCwd, InvalidateTakesADirectoryMadeAnew) {
  World w;
  std::filesystem::create_directories(w.project + "/p/sub");
  ASSERT_TRUE(w.rdwr("session/new", "name=work cwd=" + w.project + "/p"));
  const std::string s = "session/work";
  auto a = w.agent(s, "main");
  auto b = w.agent(s, "sub", "cwd=" + w.project + "/p/sub");
  ASSERT_TRUE(w.write(a + "/prompt", "!pwd"));
  ASSERT_TRUE(wait_block(w, a, "exec", w.project + "/p\n"));
  std::filesystem::remove_all(w.project + "/p");
  std::filesystem::create_directories(w.project + "/p/sub");
  ASSERT_TRUE(w.write(a + "/prompt", "!touch one"));
  EXPECT_TRUE(eventually([&] {
    return w.read(a + "/log")->find("cwd changed since it was set: " + w.project + "/p") != std::string::npos;
  })) << *w.read(a + "/log");
  EXPECT_EQ(*w.rdwr(s + "/ctl", "invalidate"), "ok\n");
  ASSERT_TRUE(w.write(a + "/prompt", "!touch two"));
  EXPECT_TRUE(eventually([&] { return std::filesystem::exists(w.project + "/p/two"); })) << *w.read(a + "/log");
  ASSERT_TRUE(w.write(b + "/prompt", "!touch three"));
  EXPECT_TRUE(eventually([&] { return std::filesystem::exists(w.project + "/p/sub/three"); })) << *w.read(b + "/log");
  EXPECT_FALSE(std::filesystem::exists(w.project + "/p/one"));
}

// OP-70: writing back what cfg reads changes nothing, the profile's values included: pinned as
// overrides, a later edit of the profile would no longer reach the agent.
TEST(AgentCtl, CfgWrittenBackKeepsFollowingTheProfile) {
  World w;
  own_profiles(w, {{"warm", R"({"temperature": 0.9, "topK": 40})"}});
  auto s = w.session("work");
  auto a = w.agent(s, "main", "agent=warm");
  ASSERT_TRUE(w.write(a + "/cfg", *w.read(a + "/cfg")));
  ASSERT_TRUE(w.write(a + "/cfg", "temperature=0.9 topK=41"));  // one of them is a real override
  write_file(w.config + "/agents/warm.json", R"({"temperature": 0.2, "topK": 7})");
  w.stop_server(SIGTERM);
  w.start();
  EXPECT_EQ(cfg_value(w, a, "temperature"), "0.2");
  EXPECT_EQ(cfg_value(w, a, "topK"), "41");
}

// A value with a blank or a quote reads as the token that sets it (§1.3), so the whole cfg written
// back is accepted and changes nothing.
TEST(AgentCtl, CfgValuesWithBlanksOrQuotesReadAsTheirTokens) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  std::filesystem::create_directories(w.project + "/my dir");
  ASSERT_TRUE(w.write(a + "/cfg", "cwd='" + w.project + "/my dir' stop='[\"a b\",\"it''s\"]'"));
  auto c = w.read(a + "/cfg");
  ASSERT_TRUE(c);
  EXPECT_NE(c->find("\ncwd='" + w.project + "/my dir'\n"), std::string::npos) << *c;
  EXPECT_NE(c->find("\nstop='[\"a b\",\"it''s\"]'\n"), std::string::npos) << *c;
  EXPECT_NE(c->find("\nmodel=fake-model\n"), std::string::npos) << *c;  // the rest as they are
  auto back = w.write(a + "/cfg", *c);
  ASSERT_TRUE(back) << back.ename();
  EXPECT_EQ(*w.read(a + "/cfg"), *c);
}

TEST(AgentCtl, CfgWritesArePartialAtomicOrderedAndPersisted) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  auto c = w.read(a + "/cfg");
  ASSERT_TRUE(c);
  EXPECT_EQ(*c,
            "backend=openai\nmodel=fake-model\nagent=default\ncwd=\nmaxTokens=\nmaxCompletionTokens=\n"
            "temperature=\ntopP=\ntopK=\nminP=\ntopA=\nfrequencyPenalty=\npresencePenalty=\n"
            "repetitionPenalty=\nreasoning=\nreasoningEffort=\nincludeReasoning=\nresponseFormat=\nstop=\n"
            "verbosity=\n");
  ASSERT_TRUE(w.write(a + "/cfg", "temperature=0.5\ntopK=40 stop='[\"END\",\"\\n\\n\"]'"));
  EXPECT_EQ(cfg_value(w, a, "temperature"), "0.5");
  EXPECT_EQ(cfg_value(w, a, "topK"), "40");
  EXPECT_EQ(cfg_value(w, a, "stop"), "[\"END\",\"\\n\\n\"]");
  // Errors of §1.3 and §2.8.3; nothing of a refused write is applied.
  EXPECT_EQ(w.write(a + "/cfg", "temperature=0.9 topK=abc").ename(), "invalid topK: abc");
  EXPECT_EQ(w.write(a + "/cfg", "temperature=abc").ename(), "invalid temperature: abc");
  EXPECT_EQ(w.write(a + "/cfg", "reasoningEffort=x").ename(), "invalid reasoningEffort: x (low, medium, high)");
  EXPECT_EQ(w.write(a + "/cfg", "foo=1").ename(), "unknown key: foo");
  EXPECT_EQ(w.write(a + "/cfg", "temperature").ename(), "bad token: temperature");
  EXPECT_EQ(w.write(a + "/cfg", "topP=1 topP=2").ename(), "duplicate key: topP");
  EXPECT_EQ(w.write(a + "/cfg", "verbosity='x").ename(), "unterminated quote");
  EXPECT_EQ(w.write(a + "/cfg", "verbosity=x\xff").ename(), "invalid verbosity: x\xEF\xBF\xBD");  // not nlohmann's exception
  EXPECT_EQ(w.write(a + "/cfg", "temperature=0.1 cwd=rel").ename(), "cwd must be absolute: rel");
  EXPECT_EQ(w.write(a + "/cfg", "temperature=0.1 cwd=/nonexistent-dir").ename(), "cwd: /nonexistent-dir: not a directory");
  EXPECT_EQ(w.write(a + "/cfg", "temperature=0.1 agent=nosuch").ename(), "unknown agent profile: nosuch");
  EXPECT_EQ(w.write(a + "/cfg", "model='m2\nbackend=evil'").ename(), "invalid model: m2\\nbackend=evil");
  EXPECT_EQ(w.write(a + "/cfg", "temperature=0.1 backend=nosuch").ename(),
            "unknown backend: nosuch (ollama, openai, openrouter, anthropic, copilot, kiro, gemini)");
  EXPECT_EQ(w.write(a + "/cfg", "temperature=0.1 backend=anthropic").ename().rfind("anthropic: missing key: set ", 0), 0u);
  EXPECT_EQ(cfg_value(w, a, "temperature"), "0.5");
  EXPECT_EQ(cfg_value(w, a, "backend"), "openai");
  // The request carries them.
  converse(w, a, "hi", "hello");
  auto body = chat_bodies(w).back();
  EXPECT_EQ(body["temperature"], 0.5);
  EXPECT_EQ(body["stop"], json::array({"END", "\n\n"}));
  // Empty drops an override; a key equal to the current value is no change (the history stays).
  ASSERT_TRUE(w.write(a + "/cfg", "temperature= agent=default backend=openai"));
  EXPECT_EQ(cfg_value(w, a, "temperature"), "");
  ASSERT_TRUE(w.write(a + "/cfg", "model=m2 backend=openai"));
  EXPECT_EQ(cfg_value(w, a, "model"), "m2");
  converse(w, a, "again", "still here");
  EXPECT_EQ(chat_bodies(w).back()["messages"].size(), 4u);  // system, hi, hello, again: the history stayed
  ASSERT_TRUE(w.write(a + "/cfg", "model="));
  EXPECT_EQ(cfg_value(w, a, "model"), "fake-model");
  // agent first, then the parameters: the switch does not replace this write's temperature.
  ASSERT_TRUE(w.write(a + "/cfg", "temperature=0.25 agent=observer"));
  EXPECT_EQ(cfg_value(w, a, "agent"), "observer");
  EXPECT_EQ(cfg_value(w, a, "temperature"), "0.25");
  EXPECT_EQ(cfg_value(w, a, "topK"), "");
  EXPECT_EQ(cfg_value(w, a, "reasoningEffort"), "low");
  std::filesystem::create_directories(w.project + "/sub");
  ASSERT_TRUE(w.write(a + "/cfg", "cwd=" + w.project + "/sub"));
  EXPECT_EQ(ctl(w, a, "cwd"), w.project + "/sub\n");
  // Persisted: a restarted olliesrv reads the same cfg.
  const std::string before = *w.read(a + "/cfg");
  w.stop_server(SIGTERM);
  w.start();
  EXPECT_EQ(*w.read(a + "/cfg"), before);
  ASSERT_TRUE(w.write(a + "/cfg", "cwd="));
  EXPECT_EQ(ctl(w, a, "cwd"), w.project + "\n");
  // `cwd=-` clears too, as `ctl cwd -` does.
  ASSERT_TRUE(w.write(a + "/cfg", "cwd=" + w.project + "/sub"));
  EXPECT_EQ(cfg_value(w, a, "cwd"), w.project + "/sub");
  ASSERT_TRUE(w.write(a + "/cfg", "cwd=-"));
  EXPECT_EQ(cfg_value(w, a, "cwd"), "");
  EXPECT_EQ(ctl(w, a, "cwd"), w.project + "\n");
}

TEST(AgentCtl, PeersLinkBothWaysPersistAndUnlink) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "alice");
  auto b = w.agent(s, "bob");
  auto c = w.agent(s, "carol");
  EXPECT_EQ(ctl(w, a, "peeradd bob"), "peer bob\n");
  EXPECT_EQ(ctl(w, a, "peeradd bob"), "error: already peers: bob");
  EXPECT_EQ(ctl(w, b, "peeradd alice"), "error: already peers: alice");
  EXPECT_EQ(ctl(w, a, "peeradd alice"), "error: cannot peer with self");
  EXPECT_EQ(ctl(w, a, "peeradd nobody"), "error: no such agent: nobody");
  EXPECT_EQ(ctl(w, a, "peerdel carol"), "error: not a peer: carol");
  EXPECT_EQ(ctl(w, a, "peerdel nobody"), "error: not a peer: nobody");
  EXPECT_EQ(ctl(w, c, "peeradd alice"), "peer alice\n");
  // A message through the link arrives as a peer message.
  w.fake.push({{"text", "got it"}});
  ASSERT_TRUE(w.write(b + "/peer/alice", "ping"));
  ASSERT_TRUE(wait_block(w, a, "assistant", "got it"));
  // Kept across a restart.
  w.stop_server(SIGTERM);
  w.start();
  EXPECT_EQ(ctl(w, b, "peerdel alice"), "unpeered alice\n");
  EXPECT_EQ(ctl(w, a, "peerdel bob"), "error: not a peer: bob");
  // Killing an agent unlinks it on the other side.
  std::string sid = *w.read(s + "/id"), carol = *w.read(c + "/id");
  sid.pop_back();
  carol.pop_back();
  EXPECT_TRUE(eventually([&] { return peers_saved(w, sid, "alice") == std::vector<std::string>{carol}; }));
  EXPECT_EQ(ctl(w, c, "kill"), "killed\n");
  w.stop_server(SIGTERM);
  EXPECT_EQ(peers_saved(w, sid, "alice"), std::vector<std::string>{});
  EXPECT_EQ(peers_saved(w, sid, "bob"), std::vector<std::string>{});
}

TEST(AgentCtl, PrefixesRunVerbsAndCommandsAtOnce) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  ASSERT_TRUE(w.write(a + "/prompt", "/model qwen3:8b"));
  EXPECT_TRUE(wait_block(w, a, "info", "qwen3:8b"));
  EXPECT_EQ(ctl(w, a, "model"), "qwen3:8b\n");
  ASSERT_TRUE(w.write(a + "/prompt", "/"));
  EXPECT_TRUE(wait_block(w, a, "error", "unknown command: "));
  ASSERT_TRUE(w.write(a + "/prompt", "  /frob it  \n"));
  EXPECT_TRUE(wait_block(w, a, "error", "unknown command: frob"));
  ASSERT_TRUE(w.write(a + "/fifo", "/agent"));
  EXPECT_TRUE(wait_block(w, a, "info", "default"));
  // A verb whose reply is a block of its own (`clear` adds `cleared`) shows it once.
  ASSERT_TRUE(w.write(a + "/prompt", "/clear"));
  EXPECT_TRUE(wait_block(w, a, "info", "cleared"));
  const auto cleared = [&] {
    const auto info = contents(w, a, "info");
    return std::count(info.begin(), info.end(), "cleared");
  };
  EXPECT_FALSE(eventually([&] { return cleared() > 1; }, 1s)) << cleared();
  ASSERT_TRUE(w.write(a + "/prompt", "!echo hi; echo there"));
  EXPECT_TRUE(wait_block(w, a, "exec", "hi\nthere\n"));
  ASSERT_TRUE(w.write(a + "/prompt", "!echo out; exit 3"));
  EXPECT_TRUE(wait_block(w, a, "exec", "out\nexit 3"));
  for (const auto& b : blocks_of(w, a)) {
    if (b["role"] == "exec" && b["content"] == "out\nexit 3") {
      EXPECT_EQ(b["name"], "echo out; exit 3");
    }
  }
  // What a terminal shows: output that looks like the model's exit prefix stays as printed, and
  // stderr follows stdout unmarked.
  ASSERT_TRUE(w.write(a + "/prompt", "!printf 'error: exit status 7'"));
  EXPECT_TRUE(wait_block(w, a, "exec", "error: exit status 7"));
  ASSERT_TRUE(w.write(a + "/prompt", "!echo out; echo err >&2; exit 2"));
  EXPECT_TRUE(wait_block(w, a, "exec", "out\nerr\nexit 2"));
  ASSERT_TRUE(w.write(a + "/fifo", "!  echo from fifo"));
  EXPECT_TRUE(wait_block(w, a, "exec", "from fifo\n"));
  for (const auto& b : blocks_of(w, a)) {  // the command as written, without the blanks after `!`
    if (b["role"] == "exec" && b["content"] == "from fifo\n") {
      EXPECT_EQ(b["name"], "echo from fifo");
    }
  }
  EXPECT_EQ(chat_bodies(w).size(), 0u);  // none of it reached the model
  EXPECT_EQ(w.read_state(a), "idle");
  // `//` is a prompt with one `/` removed.
  w.fake.push({{"text", "it is fine"}});
  ASSERT_TRUE(w.write(a + "/prompt", "//etc/hosts is wrong"));
  ASSERT_TRUE(wait_block(w, a, "assistant", "it is fine"));
  EXPECT_EQ(contents(w, a, "user").back(), "/etc/hosts is wrong");
  EXPECT_EQ(chat_bodies(w).back()["messages"].back()["content"], "/etc/hosts is wrong");
  ASSERT_TRUE(w.wait_state(a, "idle"));
  // During a turn: /verb and !cmd run at once, idle-only verbs are refused into an error block.
  w.fake.push({{"fault", "hang"}});
  ASSERT_TRUE(w.write(a + "/prompt", "think"));
  ASSERT_TRUE(eventually([&] { return chat_bodies(w).size() == 2; }));
  ASSERT_TRUE(w.write(a + "/prompt", "/clear"));
  EXPECT_TRUE(wait_block(w, a, "error", "cannot clear while agent is running"));
  ASSERT_TRUE(w.write(a + "/prompt", "!echo meanwhile"));
  EXPECT_TRUE(wait_block(w, a, "exec", "meanwhile\n"));
  EXPECT_EQ(w.read_state(a), "thinking");
  ASSERT_TRUE(w.write(a + "/prompt", "/stop"));
  EXPECT_TRUE(wait_block(w, a, "info", "stopped"));
  ASSERT_TRUE(w.wait_state(a, "idle"));
}

TEST(AgentCtl, CompactAndNameAndKill) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  for (int i = 0; i < 4; i++) converse(w, a, "q" + std::to_string(i), "a" + std::to_string(i));
  EXPECT_EQ(ctl(w, a, "compact"), "nothing to compact\n");  // 8 messages: all in the hot zone
  converse(w, a, "q4", "a4");
  EXPECT_EQ(ctl(w, a, "compact").rfind("error: compact: ", 0), 0u);
  // Renames through ctl and through the name file; the path moves, the id stays.
  const std::string id = *w.read(a + "/id");
  auto ev = w.open("event");
  EXPECT_EQ(ctl(w, a, "name first"), "first\n");
  const std::string want = "agent." + id.substr(0, id.size() - 1) + ".rename session/work/agent/main session/work/agent/first\n";
  EXPECT_NE(World::read_until(ev, want).find(want), std::string::npos);
  ASSERT_TRUE(w.write(s + "/agent/first/name", "second\n"));
  EXPECT_EQ(*w.read(s + "/agent/second/name"), "second\n");
  EXPECT_EQ(*w.read(s + "/agent/second/id"), id);
  EXPECT_NE(ctl(w, s + "/agent/second", "systemprompt").find("- Agent: second ("), std::string::npos);
  // A renamed session: its agents' Environment section names it (§7.6).
  ASSERT_TRUE(w.write(s + "/name", "play"));
  EXPECT_NE(ctl(w, "session/play/agent/second", "systemprompt").find("- Session: play ("), std::string::npos)
      << ctl(w, "session/play/agent/second", "systemprompt");
  ASSERT_TRUE(w.write("session/play/name", "work"));
  EXPECT_EQ(w.write(s + "/agent/second/name", "bad name").ename(), "invalid name: bad name");
  EXPECT_EQ(ctl(w, s + "/agent/second", "kill"), "killed\n");
  EXPECT_EQ(w.read(s + "/agent/second/id").ename(), "second: file not found");
}
