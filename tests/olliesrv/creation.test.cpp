// Creating sessions and agents (spec §4.1-§4.3): every key, every error, nothing created on an
// error, the resolution order, and the blocking sub-agent mode of agent/new.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include <cctype>
#include <cerrno>
#include <csignal>
#include <future>
#include <random>
#include <thread>

#include "olliesrv/world.hpp"

using namespace convo;
using json = nlohmann::json;

namespace {

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto nl = text.find('\n', pos);
    out.push_back(text.substr(pos, nl - pos));
    pos = nl == std::string::npos ? text.size() : nl + 1;
  }
  return out;
}

std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  for (;;) {
    auto t = line.find('\t', pos);
    out.push_back(line.substr(pos, t - pos));
    if (t == std::string::npos) return out;
    pos = t + 1;
  }
}

/// The idx line whose first field is `name`, split into fields (empty when none).
std::vector<std::string> idx_row(World& w, const std::string& idx, const std::string& name) {
  auto text = w.read(idx);
  if (!text) return {};
  for (const auto& l : lines(*text))
    if (fields(l)[0] == name) return fields(l);
  return {};
}

bool is_uuid_line(const std::string& s) {
  if (s.size() != 37 || s.back() != '\n') return false;
  for (std::size_t i = 0; i < 36; i++) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? s[i] != '-' : !std::isxdigit(static_cast<unsigned char>(s[i])) || std::isupper(static_cast<unsigned char>(s[i])))
      return false;
  }
  return true;
}

json last_chat_body(World& w) {
  json body;
  for (auto& r : w.fake.requests())
    if (r.path.find("/chat/completions") != std::string::npos) body = json::parse(r.body);
  return body;
}

}  // namespace

// ---- session/new (§4.1) ------------------------------------------------------------------------

TEST(SessionNew, RepliesTheIdAndCreatesAnEmptySession) {
  World w;
  auto r = w.rdwr("session/new", "cwd=" + w.project);
  ASSERT_TRUE(r) << r.ename();
  ASSERT_TRUE(is_uuid_line(*r)) << *r;
  const std::string id = r->substr(0, 36), name = id.substr(0, 8);  // default name
  EXPECT_EQ(*w.read("session/" + name + "/id"), id + "\n");
  EXPECT_EQ(idx_row(w, "session/idx", name), (std::vector<std::string>{name, id, w.project, "-", "-", "-", "0"}));
  EXPECT_EQ(*w.read("session/" + name + "/agent/idx"), "");
  // Keys on several lines, quoted values, ~ expanded, session defaults shown in idx.
  std::filesystem::create_directories(w.home + "/my project");
  auto r2 = w.rdwr("session/new", "name=two\ncwd='~/my project'\nbackend=openai model=sess-model\n");
  ASSERT_TRUE(r2) << r2.ename();
  EXPECT_EQ(idx_row(w, "session/idx", "two"),
            (std::vector<std::string>{"two", r2->substr(0, 36), w.home + "/my project", "-", "openai", "sess-model", "0"}));
}

TEST(SessionNew, EveryErrorAndNothingCreated) {
  World w;
  w.session("work");
  write_file(w.project + "/file", "x");
  std::filesystem::create_directories(w.project + "/t\tab");
  std::filesystem::create_directory_symlink(w.project + "/t\tab", w.project + "/clean");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"name=a", "cwd is required"},
      {"name=a cwd=", "cwd is required"},
      {"cwd=relative/dir", "cwd must be absolute: relative/dir"},
      {"cwd=" + w.project + "/missing", "cwd: " + w.project + "/missing: not a directory"},
      {"cwd=" + w.project + "/file", "cwd: " + w.project + "/file: not a directory"},
      {"cwd='" + w.project + "\tx'", "cwd: invalid character"},
      {"cwd=" + w.project + std::string(1, '\0') + "/etc", "cwd: invalid character"},  // not the directory checked
      {"cwd=" + w.project + "/d\xff", "cwd: invalid character"},  // not UTF-8: session.json would restore another path
      {"cwd=" + w.project + "/clean", "cwd: invalid character"},   // kept resolved, so checked resolved
      {"cwd=" + w.project + " name=bad/name", "invalid name: bad/name"},
      // Quoted back escaped: no 9P string holds a NUL (ollie-9p refused the whole reply).
      {"cwd=" + w.project + " name=q6" + std::string(1, '\0') + "x", "invalid name: q6\\x00x"},
      {"cwd=" + w.project + " name='a\nb'", "invalid name: a\\nb"},  // on one line
      {"cwd=" + w.project + " name=new", "invalid name: new"},
      {"cwd=" + w.project + " name=idx", "invalid name: idx"},
      {"cwd=" + w.project + " name=" + std::string(65, 'n'), "invalid name: " + std::string(65, 'n')},  // whole (§1.8)
      {"cwd=" + w.project + " name=3f0c2b9e-8c1d-4d5e-9a51-0b9f6d0e2a77", "invalid name: 3f0c2b9e-8c1d-4d5e-9a51-0b9f6d0e2a77"},
      {"cwd=" + w.project + " name=work", "session already exists: work"},
      {"cwd=" + w.project + " remote=-oProxyCommand=x", "remote: invalid destination: -oProxyCommand=x"},
      {"cwd=" + w.project + " remote='me@host;x'", "remote: invalid destination: me@host;x"},
      {"cwd=relative remote=me@host", "cwd must be absolute: relative"},
      {"cwd=" + w.project + " backend=nope",
       "unknown backend: nope (ollama, openai, openrouter, anthropic, copilot, kiro, gemini)"},
      {"cwd=" + w.project + " model='a\tb\nfake\tline'", "invalid model: a\\tb\\nfake\\tline"},
      {"cwd=" + w.project + " model=m\xff", "invalid model: m\\xff"},
      {"cwd=" + w.project + " model=" + std::string(257, 'm'), "invalid model: longer than 256 bytes"},
      {"cwd=" + w.project + " justaword", "bad token: justaword"},
      {"cwd=" + w.project + " colour=blue", "unknown key: colour"},
      {"cwd=" + w.project + " name=a name=b", "duplicate key: name"},
      {"cwd='" + w.project, "unterminated quote"},
      {"cwd=" + w.project + " prompt=hello", "unknown key: prompt"},
  };
  for (const auto& [req, want] : cases) EXPECT_EQ(w.rdwr("session/new", req).ename(), want) << req;
  EXPECT_EQ(lines(*w.read("session/idx")).size(), 1u) << *w.read("session/idx");
  // ollie-9p rdwr prints the error and exits 1.
  auto r = testing_support::run({testing_support::built("bin/ollie-9p"), "-a", "unix!" + w.sock, "rdwr", "session/new"},
                                "name=x cwd=nowhere\n");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("cwd must be absolute: nowhere"), std::string::npos) << r.err;
}

// ---- agent/new (§4.2, §4.3) --------------------------------------------------------------------

TEST(AgentNew, EveryErrorAndNothingCreated) {
  World w;
  auto s = w.session("work");
  w.agent(s, "main");
  write_file(w.project + "/file", "x");
  std::filesystem::create_directories(w.project + "/t\tab");
  std::filesystem::create_directory_symlink(w.project + "/t\tab", w.project + "/clean");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"name=bad/name", "invalid name: bad/name"},
      {"name=idx", "invalid name: idx"},
      {"name=main", "agent already exists: main"},
      {"cwd=rel", "cwd must be absolute: rel"},
      {"cwd=" + w.project + "/file", "cwd: " + w.project + "/file: not a directory"},
      {"cwd=" + w.project + std::string(1, '\0') + "/etc", "cwd: invalid character"},
      {"cwd=" + w.project + "/clean", "cwd: invalid character"},  // kept resolved, so checked resolved
      {"agent=nope", "unknown agent profile: nope"},
      {"backend=nope", "unknown backend: nope (ollama, openai, openrouter, anthropic, copilot, kiro, gemini)"},
      {"model='x\ty'", "invalid model: x\\ty"},
      {"parent=ghost", "no such agent: ghost"},
      {"timeout=30", "timeout requires prompt"},
      {"timeout=abc prompt=x", "invalid timeout: abc"},
      {"timeout=-1 prompt=x", "invalid timeout: -1"},
      {"prompt=", "empty prompt"},
      {"prompt=  \n\t\n", "empty prompt"},
      {"colour=blue", "unknown key: colour"},
      {"name=a name=b", "duplicate key: name"},
      {"remote=x", "unknown key: remote"},
      {"oops", "bad token: oops"},
      // prompt= starts the raw remainder only outside quotes (§1.3): quoted, it is an ordinary
      // token, the prompt its value (here with what sub-agent mode refuses).
      {"'prompt=  ' name=x", "empty prompt"},
      {"'prompt=hi' prompt=again", "duplicate key: prompt"},
  };
  for (const auto& [req, want] : cases) EXPECT_EQ(w.rdwr(s + "/agent/new", req).ename(), want) << req;
  auto missing = w.rdwr(s + "/agent/new", "backend=anthropic");
  EXPECT_EQ(missing.ename().rfind("anthropic: missing key: set ", 0), 0u) << missing.ename();
  // A model from a profile or backends.conf is held to the same rule as one in the request: it
  // becomes an idx field, a cfg value and session.json's, which a restart would refuse.
  own_profiles(w, {{"tabbed", R"({"model":"evil\nmodel\tx"})"}});
  EXPECT_EQ(w.rdwr(s + "/agent/new", "name=x agent=tabbed").ename(), "agent profile tabbed: invalid model: evil\\nmodel\\tx");
  write_file(w.config + "/backends.conf", "[openai]\nmodel = tab\there\n");
  ASSERT_EQ(*w.rdwr("ctl", "invalidate"), "ok\n");
  EXPECT_EQ(w.rdwr(s + "/agent/new", "name=y").ename(), "openai: invalid model: tab\\there");
  EXPECT_EQ(lines(*w.read(s + "/agent/idx")).size(), 1u) << *w.read(s + "/agent/idx");
}

// A tool creating agents in a loop would make every toolsrv start sync them all: a session holds
// at most 256 at once, and a killed one makes room.
TEST(AgentNew, ASessionHoldsAtMost256Agents) {
  World w;
  auto s = w.session("work");
  for (int i = 0; i < 256; i++) ASSERT_TRUE(w.rdwr(s + "/agent/new", "name=a" + std::to_string(i))) << i;
  EXPECT_EQ(w.rdwr(s + "/agent/new", "name=more").ename(), "too many agents: at most 256 in a session");
  EXPECT_EQ(w.rdwr(s + "/agent/new", "name=sub prompt=hello").ename(), "too many agents: at most 256 in a session");
  ASSERT_TRUE(w.rdwr(s + "/agent/a7/ctl", "kill"));
  EXPECT_TRUE(w.rdwr(s + "/agent/new", "name=more"));
}

// toolsrv holds an agent's cwd resolved (§4.2): given through a symlink, the agent shows and
// runs in the directory it led to then; the link changed later does not move it.
TEST(AgentNew, ACwdThroughASymlinkIsTheDirectoryItLedTo) {
  World w;
  auto s = w.session("work");
  std::filesystem::create_directories(w.project + "/real");
  std::filesystem::create_directory_symlink(w.project + "/real", w.project + "/link");
  ASSERT_TRUE(w.rdwr(s + "/agent/new", "name=l cwd=" + w.project + "/link"));
  auto cfg = w.read(s + "/agent/l/cfg");
  ASSERT_TRUE(cfg);
  EXPECT_NE(cfg->find("cwd=" + w.project + "/real\n"), std::string::npos) << *cfg;
  auto cwd = w.rdwr(s + "/agent/l/ctl", "cwd " + w.project + "/link");
  ASSERT_TRUE(cwd) << cwd.ename();
  EXPECT_EQ(*cwd, w.project + "/real\n");
}

TEST(AgentNew, ResolutionOrderAndTheParentColumn) {
  World w;
  auto s = w.session("work", "model=sess-model");
  std::filesystem::create_directories(w.project + "/sub");
  // The session's model (§4.3), the default profile, the session cwd (no override).
  auto id = w.rdwr(s + "/agent/new", "name=main");
  ASSERT_TRUE(id) << id.ename();
  EXPECT_EQ(idx_row(w, s + "/agent/idx", "main"),
            (std::vector<std::string>{"main", id->substr(0, 36), "idle", "default", "openai", "sess-model", w.project, "-"}));
  EXPECT_EQ(*w.rdwr(s + "/agent/main/ctl", "model"), "sess-model\n");
  // model= wins; cwd= is an override.
  ASSERT_TRUE(w.rdwr(s + "/agent/new", "name=lead model=own-model cwd=" + w.project + "/sub"));
  EXPECT_EQ(*w.rdwr(s + "/agent/lead/ctl", "model"), "own-model\n");
  // parent=: its profile, backend, model and effective cwd, and the parent column.
  auto child = w.rdwr(s + "/agent/new", "name=child parent=lead");
  ASSERT_TRUE(child) << child.ename();
  auto lead_id = id_of(w, s + "/agent/lead");
  EXPECT_EQ(idx_row(w, s + "/agent/idx", "child"),
            (std::vector<std::string>{"child", child->substr(0, 36), "idle", "default", "openai", "own-model",
                                      w.project + "/sub", lead_id}));
  // A cwd= equal to the session cwd is no override.
  ASSERT_TRUE(w.rdwr(s + "/agent/new", "name=same cwd=" + w.project + "/"));
  EXPECT_EQ(idx_row(w, s + "/agent/idx", "same")[6], w.project);
  // Persisted: the override and the parent column survive a restart.
  w.stop_server(SIGTERM);
  w.start();
  EXPECT_EQ(idx_row(w, s + "/agent/idx", "child")[6], w.project + "/sub");
  EXPECT_EQ(idx_row(w, s + "/agent/idx", "child")[7], lead_id);
  EXPECT_EQ(idx_row(w, s + "/agent/idx", "main")[7], "-");
}

TEST(AgentNew, ParentSeedsTheHistory) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"text", "The code word is ALBATROSS."}});
  ASSERT_TRUE(w.write(a + "/prompt", "remember a code word"));
  ASSERT_TRUE(eventually([&] { return w.read(a + "/log")->find("ALBATROSS") != std::string::npos; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  ASSERT_TRUE(w.rdwr(s + "/agent/new", "name=heir parent=main"));
  w.fake.push({{"text", "ALBATROSS, as before."}});
  ASSERT_TRUE(w.write(s + "/agent/heir/prompt", "what was it?"));
  ASSERT_TRUE(eventually([&] { return w.read(s + "/agent/heir/log")->find("as before.") != std::string::npos; }));
  auto body = last_chat_body(w);
  std::vector<std::string> contents;
  for (auto& m : body["messages"])
    if (m["role"] != "system") contents.push_back(m.value("content", ""));
  EXPECT_EQ(contents, (std::vector<std::string>{"remember a code word", "The code word is ALBATROSS.", "what was it?"}))
      << body.dump();
}

// §8.10.2: a parent in the middle of a call: the copy ends with that assistant message, whose
// calls have no results yet; it goes, text and all.
TEST(AgentNew, AParentsMessageInFlightIsNotSeeded) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"text", "ok"}});
  ASSERT_TRUE(w.write(a + "/prompt", "first"));
  ASSERT_TRUE(eventually([&] { return w.read(a + "/log")->find("ok") != std::string::npos; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  w.fake.push({{"text", "I'll delegate this."},
               {"tool_calls", json::array({{{"id", "c1"}, {"name", "shell"},
                                            {"arguments", {{"cmd", "while [ ! -e go ]; do sleep 0.02; done"}}}}})}});
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "second"));
  ASSERT_TRUE(w.wait_state(a, "calling: shell"));
  ASSERT_TRUE(w.rdwr(s + "/agent/new", "name=heir parent=main"));
  write_file(w.project + "/go", "");
  ASSERT_TRUE(w.wait_state(a, "idle"));
  w.fake.push({{"text", "fresh"}});
  ASSERT_TRUE(w.write(s + "/agent/heir/prompt", "what now?"));
  ASSERT_TRUE(eventually([&] { return w.read(s + "/agent/heir/log")->find("fresh") != std::string::npos; }));
  auto body = last_chat_body(w);
  std::vector<std::string> contents;
  for (auto& m : body["messages"])
    if (m["role"] != "system") contents.push_back(m.value("content", ""));
  EXPECT_EQ(contents, (std::vector<std::string>{"first", "ok", "second", "what now?"})) << body.dump();
}

TEST(AgentNew, SubagentRepliesItsFinalAnswerAndIsGone) {
  World w;
  auto s = w.session("work");
  w.agent(s, "main");
  auto events = w.open("event");
  w.fake.push({{"text", "thinking out loud"},
               {"tool_calls", json::array({{{"id", "c1"}, {"name", "reasoning_think"}, {"arguments", {{"thought", "hm"}}}}})}});
  w.fake.push({{"text", "  the final answer\nexactly as produced  "}});
  auto r = w.rdwr(s + "/agent/new", "name=helper timeout=60 prompt=do the thing\nwith 'quotes' kept\n");
  ASSERT_TRUE(r) << r.ename();
  EXPECT_EQ(*r, "  the final answer\nexactly as produced  ");
  // It is gone: not listed, not persisted; its creation and destruction were published.
  EXPECT_TRUE(idx_row(w, s + "/agent/idx", "helper").empty());
  auto seen = World::read_until(events, ".kill session/work/agent/helper\n");
  EXPECT_NE(seen.find(".new session/work/agent/helper\n"), std::string::npos) << seen;
  EXPECT_NE(seen.find(".kill session/work/agent/helper\n"), std::string::npos) << seen;
  // The prompt reached the model verbatim (raw remainder, one trailing newline removed).
  bool found = false;
  for (auto& req : w.fake.requests()) {
    if (req.path.find("/chat/completions") == std::string::npos) continue;
    auto b = json::parse(req.body);
    for (auto& m : b["messages"]) found = found || m.value("content", "") == "do the thing\nwith 'quotes' kept";
  }
  EXPECT_TRUE(found);
  ASSERT_TRUE(w.rdwr(s + "/ctl", "save"));
  EXPECT_EQ(read_file(w.data + "/sessions/" + id_of(w, s) + "/session.json").find("helper"),
            std::string::npos);
}

TEST(AgentNew, SubagentFailureAndTimeout) {
  World w;
  auto s = w.session("work");
  // No scripted response: the provider answers 500, the turn ends with an error.
  auto failed = w.rdwr(s + "/agent/new", "prompt=hello");
  EXPECT_EQ(failed.ename().rfind("subagent failed: ", 0), 0u) << failed.ename();
  // An empty final response is an empty answer, exactly (§4.2).
  w.fake.push({{"text", ""}});
  auto empty = w.rdwr(s + "/agent/new", "prompt=say nothing");
  ASSERT_TRUE(empty) << empty.ename();
  EXPECT_EQ(*empty, "");
  // A refusal keeps its text in the history, but the turn failed: no answer (§4.2, §8.2).
  w.fake.push({{"text", "I can't help with"}, {"stop", "filter"}});
  EXPECT_EQ(w.rdwr(s + "/agent/new", "prompt=hello").ename(), "subagent failed: stopped: content_filter");
  w.fake.push({{"text", "far too slow"}, {"delay_ms", 3000}});
  auto slow = w.rdwr(s + "/agent/new", "name=slow timeout=1 prompt=hello");
  EXPECT_EQ(slow.ename(), "subagent timeout after 1s");
  EXPECT_EQ(*w.read(s + "/agent/idx"), "");
}

TEST(AgentNew, SubagentKilledWhileRunningIsInterrupted) {
  World w;
  auto s = w.session("work");
  w.fake.push({{"text", "slow words"}, {"delay_ms", 2000}});
  p9::Result<std::string> reply = std::string();
  std::thread req([&] { reply = w.rdwr(s + "/agent/new", "name=helper prompt=take your time"); });
  // Listed while it runs, with its group's transient nature: killed by the hostowner.
  const bool listed = eventually([&] { return !idx_row(w, s + "/agent/idx", "helper").empty(); });
  EXPECT_TRUE(listed);
  if (listed) {
    EXPECT_EQ(*w.rdwr(s + "/agent/helper/ctl", "kill"), "killed\n");
  }
  req.join();
  EXPECT_EQ(reply.ename(), "subagent interrupted");
  EXPECT_EQ(*w.read(s + "/agent/idx"), "");
}

// §8.1.1: an agent's directory appears last, when its setup (autoLoad, prompt entries, the system
// prompt) is done; its name is taken from the start. §1.5: a flushed agent/new is undone: nothing
// of the half-made agent is left (never listed, no event, not saved), and the name is free again.
// The flush reaches the `!` entry still running: it is killed, and the Rflush does not wait for it.
TEST(Creation, AFlushedAgentNewLeavesNoAgentBehind) {
  World w;
  w.own_dir("agents");
  const std::string pidfile = w.root + "/entry.pid";
  write_file(w.config + "/agents/slow.json", json{{"prompt", {"!echo $$ > " + pidfile + "; sleep 28; echo slow"}}}.dump());
  auto s = w.session("work");
  auto f = w.walk(s + "/agent/new");
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->open(p9::ORDWR));
  ASSERT_TRUE(f->write("name=half agent=slow"));
  auto held = start_read(*f);
  auto ev = w.open("event");
  // While its prompt entry runs (the name is reserved before it starts): the name is taken,
  // the directory is not there yet. Probed only then: a probe before the request is served
  // would itself make an agent `half`.
  ASSERT_TRUE(eventually([&] { return read_file(pidfile).find('\n') != std::string::npos; }));
  const pid_t entry = std::stoi(read_file(pidfile));
  const auto taken = w.rdwr(s + "/agent/new", "name=half");
  ASSERT_FALSE(taken) << *taken;
  EXPECT_EQ(taken.ename(), "agent already exists: half");
  EXPECT_EQ(*w.read(s + "/agent/idx"), "");
  EXPECT_EQ(w.walk(s + "/agent/half").ename(), "half: file not found");
  const auto flushed = std::async(std::launch::async, [&] { f->client().flush(held.tag); });
  ASSERT_EQ(flushed.wait_for(10s), std::future_status::ready) << "the Rflush waited for the 28 s entry";
  EXPECT_FALSE(held.reply.get());
  EXPECT_TRUE(eventually([&] { return ::kill(entry, 0) != 0 && errno == ESRCH; })) << "the entry's shell still runs";
  // The name is free again; the only agent events are those of the new one.
  auto again = w.rdwr(s + "/agent/new", "name=half");
  ASSERT_TRUE(again) << again.ename();
  const std::string id = again->substr(0, again->size() - 1);
  const auto seen = World::read_until(ev, "agent." + id + ".new");
  EXPECT_EQ(seen.find("agent."), seen.find("agent." + id + ".new")) << seen;
}

// §1.5: a flushed session/new or agent/new is answered by no reply, so it must leave nothing. A
// flush that came while the new session or agent was being saved left it made: the client's
// retry found its name taken, under an id it never learnt. Whatever the flush's moment, a
// creation exists exactly when its reply came.
TEST(Creation, AFlushedCreationThatGotNoReplyMadeNothing) {
  World w;
  auto s = w.session("work");
  // How long each creation takes here, unflushed: the flushes below land around its end, where
  // the save is.
  std::chrono::microseconds took[2];
  for (const bool agent : {false, true}) {
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(agent ? w.rdwr(s + "/agent/new", "name=timed") : w.rdwr("session/new", "name=timed cwd=" + w.project));
    took[agent] = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
  }
  std::mt19937 rng(7);
  std::vector<std::pair<std::string, bool>> made;  // where, answered
  for (int i = 0; i < 40; i++) {
    const bool agent = i % 2 == 1;
    const std::string name = (agent ? "fa" : "fs") + std::to_string(i);
    auto f = w.walk(agent ? s + "/agent/new" : "session/new");
    ASSERT_TRUE(f);
    ASSERT_TRUE(f->open(p9::ORDWR));
    ASSERT_TRUE(f->write(agent ? "name=" + name : "name=" + name + " cwd=" + w.project));
    auto held = start_read(*f);
    std::this_thread::sleep_for(took[agent] * (50 + rng() % 60) / 100);
    f->client().flush(held.tag);
    made.emplace_back(agent ? s + "/agent/" + name : "session/" + name, static_cast<bool>(held.reply.get()));
  }
  std::this_thread::sleep_for(2s);  // the creations still under way end, made or undone
  for (const auto& [where, answered] : made)
    EXPECT_EQ(static_cast<bool>(w.walk(where)), answered) << where << (answered ? " answered, not made" : " made, though its request got no reply");
}

// §7.5.1: a `!` entry may run for its whole 30 s. Two of them at once (two agents made with a
// slow profile) hold neither another agent's creation, nor the saves of other sessions, nor
// olliesrv's stop: SIGTERM ends the commands still running and olliesrv exits at once.
TEST(Creation, SlowPromptEntriesHoldNoOtherWorkAndEndAtTheStop) {
  World w;
  w.own_dir("agents");
  const std::string marker = w.root + "/entry-ran";
  write_file(w.config + "/agents/slow.json",
             json{{"prompt", {"!echo started >> " + marker + "; sleep 28; echo late"}}}.dump());
  auto s = w.session("work");
  struct Pending {
    std::optional<p9::CFid> f;
    std::promise<p9::Result<p9::Fcall>> reply;
  };
  std::vector<std::unique_ptr<Pending>> slow;
  for (const char* name : {"slow1", "slow2"}) {
    auto p = std::make_unique<Pending>();
    auto f = w.walk(s + "/agent/new");
    ASSERT_TRUE(f);
    ASSERT_TRUE(f->open(p9::ORDWR));
    ASSERT_TRUE(f->write(std::string("agent=slow name=") + name));
    p9::Fcall t;
    t.type = p9::Tread;
    t.fid = f->num();
    t.count = 8192;
    f->client().start(t, [q = p.get()](p9::Result<p9::Fcall> r) { q->reply.set_value(std::move(r)); });
    p->f = std::move(*f);
    slow.push_back(std::move(p));
  }
  ASSERT_TRUE(eventually([&] { return read_file(marker) == "started\nstarted\n"; })) << read_file(marker);

  // Meanwhile: a new agent, a turn, and its session saved.
  auto other = std::async(std::launch::async, [&] { return w.rdwr(s + "/agent/new", "name=main"); });
  ASSERT_EQ(other.wait_for(10s), std::future_status::ready) << "agent/new waited behind the prompt entries";
  ASSERT_TRUE(other.get());
  w.fake.push({{"text", "saved while they sleep"}});
  ASSERT_TRUE(w.write(s + "/agent/main/prompt", "hello\n"));
  const std::string file = w.data + "/sessions/" + id_of(w, s) + "/session.json";
  EXPECT_TRUE(eventually([&] { return read_file(file).find("saved while they sleep") != std::string::npos; }, 10s)) << "the session was not saved while the prompt entries ran";

  const auto t0 = std::chrono::steady_clock::now();
  w.stop_server(SIGTERM);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s) << "olliesrv's stop waited for the prompt entries";
  for (auto& p : slow) p->f.reset();
}

// A restored agent's prompt entries are resolved at their first use (they may run commands; a
// restart of many sessions runs none): `ctl systemprompt` right after a restart shows the
// system and profile prompts, not only the Environment and Tools sections.
TEST(Creation, SystempromptRightAfterARestartHasTheProfilesPrompts) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  const std::string before = *w.rdwr(a + "/ctl", "systemprompt");
  ASSERT_EQ(before.rfind("You are an agent of Ollie", 0), 0u) << before;
  ASSERT_NE(before.find("\n# Role\n"), std::string::npos) << before;
  w.stop_server(SIGTERM);
  w.start();
  EXPECT_EQ(*w.rdwr(a + "/ctl", "systemprompt"), before);
}

// §8.9: a `stop` reaches a restored agent's first turn while its `!` entry still runs (restored
// agents resolve their entries at their first use): the entry is killed, the agent is idle at
// once, and the entries are resolved again at the next turn, whose request carries their text.
TEST(Creation, AStopKillsTheEntryAFirstTurnAfterARestartRuns) {
  World w;
  w.own_dir("agents");
  const std::string flag = w.root + "/quick", pidfile = w.root + "/entry.pid";
  write_file(flag, "");
  write_file(w.config + "/agents/slow.json",
             json{{"prompt", {"!if [ -e " + flag + " ]; then echo QUICK-ENTRY; else echo $$ > " + pidfile +
                                  "; sleep 28; fi"}}}
                 .dump());
  auto s = w.session("work");
  auto a = w.agent(s, "main", "agent=slow");
  w.stop_server(SIGTERM);
  std::filesystem::remove(flag);
  w.start();
  ASSERT_TRUE(w.write(a + "/prompt", "hello"));
  ASSERT_TRUE(eventually([&] { return read_file(pidfile).find('\n') != std::string::npos; }));
  const pid_t entry = std::stoi(read_file(pidfile));
  ASSERT_TRUE(w.rdwr(a + "/ctl", "stop"));
  EXPECT_TRUE(w.wait_state(a, "idle", 10s)) << "the stop waited for the 28 s entry";
  EXPECT_TRUE(eventually([&] { return ::kill(entry, 0) != 0 && errno == ESRCH; })) << "the entry's shell still runs";
  EXPECT_EQ(chat_requests(w), 0u) << "a request was sent after the stop";
  write_file(flag, "");
  w.fake.push({{"text", "hi"}});
  ASSERT_TRUE(w.write(a + "/prompt", "again"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 1; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  EXPECT_NE(last_chat_body(w).dump().find("QUICK-ENTRY"), std::string::npos) << last_chat_body(w).dump();
}

// §7.5.1: prompt entries are resolved again at a session `invalidate` (§3.2), and the system
// prompt the next request sends carries what they give now.
TEST(Creation, ASessionInvalidateResolvesPromptEntriesAgain) {
  World w;
  w.own_dir("agents");
  const std::string note = w.project + "/note.txt";
  write_file(note, "NOTE-ONE");
  write_file(w.config + "/agents/live.json", json{{"prompt", {"!cat " + note}}}.dump());
  auto s = w.session("work");
  auto a = w.agent(s, "main", "agent=live");
  write_file(note, "NOTE-TWO");
  ASSERT_EQ(*w.rdwr(s + "/ctl", "invalidate"), "ok\n");
  w.fake.push({{"text", "seen"}});
  ASSERT_TRUE(w.write(a + "/prompt", "hi"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 1; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  const auto body = chat_bodies(w).at(0);
  const std::string system = body["messages"][0]["content"];
  EXPECT_NE(system.find("NOTE-TWO"), std::string::npos) << system;
  EXPECT_EQ(system.find("NOTE-ONE"), std::string::npos);
}
