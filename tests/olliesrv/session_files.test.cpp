// The session's files (spec §2.5, §3.2): name (write and wstat renames with open fids), env
// (pushed to toolsrv, persisted, reserved names), goal, ctl invalidate; through the real socket
// and through ollie-9p as a shell user drives them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "olliesrv/world.hpp"

using namespace convo;
using json = nlohmann::json;

namespace {

testing_support::Ran ninep(World& w, const std::string& verb, const std::string& path, const std::string& input = "") {
  return testing_support::run({testing_support::built("bin/ollie-9p"), "-a", "unix!" + w.sock, verb, path}, input);
}

/// The first finalized block of a chat.raw fid that `want` accepts (null after 20 s or EOF).
template <class F>
json next_block(p9::CFid& raw, F want, std::string& pending) {
  const auto end = std::chrono::steady_clock::now() + 20s;
  for (;;) {
    for (auto nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n')) {
      json b = json::parse(pending.substr(0, nl), nullptr, false);
      pending.erase(0, nl + 1);
      if (b.is_object() && !b.value("partial", false) && want(b)) return b;
    }
    if (std::chrono::steady_clock::now() > end) return json();
    auto r = raw.read(8192);
    if (!r || r->empty()) return json();
    pending += *r;
  }
}

/// `!cmd` through the agent's shell tool (§3.4): the exec block's output.
std::string bang(World& w, const std::string& agent, const std::string& cmd) {
  auto raw = w.open(agent + "/chat.raw");
  EXPECT_TRUE(w.write(agent + "/prompt", "!" + cmd));
  std::string pending;
  auto b = next_block(raw, [&](const json& b) { return b.value("role", "") == "exec" && b.value("name", "") == cmd; }, pending);
  return b.is_object() ? b.value("content", "") : "<no exec block>";
}

p9::Status wstat_name(World& w, const std::string& path, const std::string& name) {
  auto f = w.walk(path);
  if (!f) return f.error();
  p9::Dir d = p9::Dir::null();
  d.name = name;
  return f->wstat(d);
}

}  // namespace

// ---- env ---------------------------------------------------------------------------------------

TEST(SessionEnv, ReadsSortedWithTheSessionIdAndAddressAlways) {
  World w;
  auto s = w.session("work");
  const std::string sid = id_of(w, s);
  EXPECT_EQ(*w.read(s + "/env"), "OLLIE_ADDR=unix!" + w.sock + "\nOLLIE_SESSION_ID=" + sid + "\n");
  ASSERT_TRUE(w.write(s + "/env", "ZED=last A_1=first\nMID='two words' "));
  EXPECT_EQ(*w.read(s + "/env"), "A_1=first\nMID=two words\nOLLIE_ADDR=unix!" + w.sock + "\nOLLIE_SESSION_ID=" + sid +
                                     "\nZED=last\n");
  // An empty value unsets; a later write replaces.
  ASSERT_TRUE(w.write(s + "/env", "ZED= A_1=again"));
  EXPECT_EQ(*w.read(s + "/env"),
            "A_1=again\nMID=two words\nOLLIE_ADDR=unix!" + w.sock + "\nOLLIE_SESSION_ID=" + sid + "\n");
}

TEST(SessionEnv, ErrorsNameTheKeyAndChangeNothing) {
  World w;
  auto s = w.session("work");
  const std::string before = *w.read(s + "/env");
  EXPECT_EQ(w.write(s + "/env", "1ABC=x").ename(), "invalid env name: 1ABC");
  EXPECT_EQ(w.write(s + "/env", "A-B=x").ename(), "invalid env name: A-B");
  for (const char* k : {"OLLIE_SESSION_ID", "OLLIE_ADDR", "OLLIE_AGENT_ID", "OLLIE_UNAME", "OLLIE_AUTH"})
    EXPECT_EQ(w.write(s + "/env", std::string("GOOD=1 ") + k + "=x").ename(), std::string("reserved: ") + k);
  EXPECT_EQ(w.write(s + "/env", "GOOD=1 JUSTAWORD").ename(), "bad token: JUSTAWORD");
  EXPECT_EQ(w.write(s + "/env", "=x").ename(), "invalid env name: ");  // §1.3: split at the first `=`
  EXPECT_EQ(w.write(s + "/env", "A=1 A=2").ename(), "duplicate key: A");
  EXPECT_EQ(w.write(s + "/env", "A='open").ename(), "unterminated quote");
  EXPECT_EQ(w.write(s + "/env", "A='two\nlines'").ename(), "invalid env value: A");
  EXPECT_EQ(w.write(s + "/env", "A=a\xff" "b").ename(), "invalid env value: A");  // session.json keeps UTF-8 only
  EXPECT_EQ(*w.read(s + "/env"), before);  // all or nothing
  // ollie-9p write reports the error of the clunk and exits 1 (§1.7).
  auto r = ninep(w, "write", s + "/env", "OLLIE_AUTH=stolen\n");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("reserved: OLLIE_AUTH"), std::string::npos) << r.err;
  auto ok = ninep(w, "write", s + "/env", "FROM_SHELL=yes\n");
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_NE(ninep(w, "read", s + "/env").out.find("FROM_SHELL=yes\n"), std::string::npos);
}

TEST(SessionEnv, ReachesTheRunningToolsrvAtOnce) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  ASSERT_TRUE(w.write(s + "/env", "GREETING='hello env'"));
  EXPECT_EQ(bang(w, a, "echo \"[$GREETING]\""), "[hello env]\n");
  ASSERT_TRUE(w.write(s + "/env", "GREETING="));
  EXPECT_EQ(bang(w, a, "echo \"[${GREETING-unset}]\""), "[unset]\n");
  // What olliesrv sets itself reaches the tool too.
  EXPECT_EQ(bang(w, a, "echo \"$OLLIE_SESSION_ID\""), id_of(w, s) + "\n");
}

TEST(SessionEnv, GoalAndEnvArePersistedAndReachAToolsrvStartedLater) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  ASSERT_TRUE(w.write(s + "/env", "TOKEN=abc123"));
  ASSERT_TRUE(w.write(s + "/goal", "  ship the release\nthen rest  "));
  const std::string sid = id_of(w, s);
  w.stop_server(SIGTERM);
  auto saved = json::parse(read_file(w.data + "/sessions/" + sid + "/session.json"));
  EXPECT_EQ(saved["env"], json({{"TOKEN", "abc123"}}));
  EXPECT_EQ(saved["goal"], "  ship the release\nthen rest  ");
  w.kill_toolsrvs();
  w.start();
  EXPECT_TRUE(w.toolsrvs().empty());  // restore starts no toolsrv (§7.7)
  EXPECT_NE(w.read(s + "/env")->find("TOKEN=abc123\n"), std::string::npos);
  EXPECT_EQ(*w.read(s + "/goal"), "  ship the release\nthen rest  ");
  // Bytes that are not UTF-8 are U+FFFD from the write on: what is read is what a restart gives.
  ASSERT_TRUE(w.write(s + "/goal", "ship \xff now"));
  ASSERT_TRUE(w.write(a + "/plan", "step \xfe one"));
  EXPECT_EQ(*w.read(s + "/goal"), "ship \xEF\xBF\xBD now");
  EXPECT_EQ(*w.read(a + "/plan"), "step \xEF\xBF\xBD one");
  w.stop_server(SIGTERM);
  w.kill_toolsrvs();
  w.start();
  EXPECT_EQ(*w.read(s + "/goal"), "ship \xEF\xBF\xBD now");
  EXPECT_EQ(*w.read(a + "/plan"), "step \xEF\xBF\xBD one");
  // Set while no toolsrv runs: the start syncs it.
  ASSERT_TRUE(w.write(s + "/env", "LATER=yes"));
  EXPECT_EQ(bang(w, a, "echo \"$TOKEN/$LATER\""), "abc123/yes\n");
}

// ---- goal --------------------------------------------------------------------------------------

TEST(SessionGoal, StoredExactlyAndBlankRefused) {
  World w;
  auto s = w.session("work");
  EXPECT_EQ(*w.read(s + "/goal"), "");
  ASSERT_TRUE(w.write(s + "/goal", "Make `make test` pass.\n\n- no sleeps\n"));
  EXPECT_EQ(*w.read(s + "/goal"), "Make `make test` pass.\n\n- no sleeps\n");
  EXPECT_EQ(w.write(s + "/goal", " \n\t\n").ename(), "empty goal");
  EXPECT_EQ(*w.read(s + "/goal"), "Make `make test` pass.\n\n- no sleeps\n");
  auto r = ninep(w, "write", s + "/goal", "from the shell\n");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(ninep(w, "read", s + "/goal").out, "from the shell\n");
  auto blank = ninep(w, "write", s + "/goal", "\n");
  EXPECT_EQ(blank.status, 1);
  EXPECT_NE(blank.err.find("empty goal"), std::string::npos) << blank.err;
}

// ---- name, renames ----------------------------------------------------------------------------

TEST(SessionName, WriteAndWstatRenameWithOpenFidsStillWorking) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  const std::string sid = id_of(w, s);
  auto aid = id_of(w, a);
  auto events = w.open("event");
  auto chat = w.open(a + "/chat");
  auto env_fid = w.walk(s + "/env");
  ASSERT_TRUE(env_fid);

  // Writing name (blanks trimmed).
  ASSERT_TRUE(w.write(s + "/name", "  play \n"));
  EXPECT_EQ(*w.read("session/play/name"), "play\n");
  EXPECT_EQ(w.read(s + "/name").ename(), "work: file not found");
  EXPECT_EQ(World::read_until(events, "\n"), "session." + sid + ".rename session/work session/play\n");

  // wstat of the directory's name, as the hostowner: the same rename.
  ASSERT_TRUE(wstat_name(w, "session/play", "stage"));
  EXPECT_EQ(World::read_until(events, "\n"), "session." + sid + ".rename session/play session/stage\n");
  ASSERT_TRUE(wstat_name(w, "session/stage/agent/main", "lead"));
  EXPECT_EQ(World::read_until(events, "\n"),
            "agent." + aid + ".rename session/stage/agent/main session/stage/agent/lead\n");
  EXPECT_EQ(*w.read("session/stage/agent/lead/name"), "lead\n");
  EXPECT_NE(w.read("session/idx")->find("stage\t" + sid + "\t"), std::string::npos);
  // By id, whatever the name.
  EXPECT_EQ(*w.read("session/" + sid + "/agent/" + aid + "/name"), "lead\n");
  // The stat of a renamed fid names it anew; an unchanged name changes nothing.
  auto dirfid = w.walk("session/stage");
  ASSERT_TRUE(dirfid);
  ASSERT_TRUE(wstat_name(w, "session/stage", "stage"));
  p9::Dir d = p9::Dir::null();
  d.name = "final";
  ASSERT_TRUE(dirfid->wstat(d));
  EXPECT_EQ(dirfid->stat()->name, "final");
  // A fid refers to the object (§1.5): renamed through its name file, its stat names it anew, by
  // id too, and a wstat of the stale walked name is a rename back, not "no change".
  auto by_id = w.walk("session/" + sid + "/agent/" + aid);
  auto agent_fid = w.walk("session/final/agent/lead");
  ASSERT_TRUE(by_id && agent_fid);
  EXPECT_EQ(by_id->stat()->name, "lead");
  ASSERT_TRUE(w.write("session/final/agent/lead/name", "chief"));
  EXPECT_EQ(agent_fid->stat()->name, "chief");
  EXPECT_EQ(by_id->stat()->name, "chief");
  p9::Dir back = p9::Dir::null();
  back.name = "chief";
  ASSERT_TRUE(agent_fid->wstat(back));  // its name now: no change, no event
  back.name = "lead";
  ASSERT_TRUE(agent_fid->wstat(back));
  EXPECT_EQ(*w.read("session/final/agent/lead/name"), "lead\n");
  EXPECT_EQ(World::read_until(events, "chief session/final/agent/lead\n"),
            "session." + sid + ".rename session/stage session/final\n" +  //
                "agent." + aid + ".rename session/final/agent/lead session/final/agent/chief\n" +
                "agent." + aid + ".rename session/final/agent/chief session/final/agent/lead\n");

  // The fids opened before still work: the chat stream streams the next answer.
  w.fake.push({{"text", "answer after the renames"}});
  ASSERT_TRUE(w.write("session/final/agent/lead/prompt", "hi"));
  EXPECT_NE(World::read_until(chat, "answer after the renames").find("answer after the renames"), std::string::npos);
  ASSERT_TRUE(env_fid->open(p9::OWRITE));
  ASSERT_TRUE(env_fid->write("AFTER=rename"));
  ASSERT_TRUE(env_fid->clunk());
  EXPECT_NE(w.read("session/final/env")->find("AFTER=rename\n"), std::string::npos);
  ASSERT_TRUE(w.wait_state("session/final/agent/lead", "idle"));
}

TEST(SessionName, RenameErrors) {
  World w;
  auto s = w.session("work");
  w.session("other");
  w.agent(s, "main");
  w.agent(s, "second");
  EXPECT_EQ(w.write(s + "/name", "bad name").ename(), "invalid name: bad name");
  EXPECT_EQ(w.write(s + "/name", "new").ename(), "invalid name: new");
  EXPECT_EQ(w.write(s + "/name", "other").ename(), "session already exists: other");
  EXPECT_EQ(wstat_name(w, s, "idx").ename(), "invalid name: idx");
  EXPECT_EQ(wstat_name(w, s, "other").ename(), "session already exists: other");
  EXPECT_EQ(wstat_name(w, s + "/agent/main", "second").ename(), "agent already exists: second");
  EXPECT_EQ(wstat_name(w, s + "/agent/main", "3f0c2b9e-8c1d-4d5e-9a51-0b9f6d0e2a77").ename(),
            "invalid name: 3f0c2b9e-8c1d-4d5e-9a51-0b9f6d0e2a77");
  // Only the name of a session or agent directory: not of a file, not with other changes.
  EXPECT_EQ(wstat_name(w, s + "/goal", "aim").ename(), "wstat not supported");
  EXPECT_EQ(wstat_name(w, "session", "sessions").ename(), "wstat not supported");
  auto f = w.walk(s);
  p9::Dir d = p9::Dir::null();
  d.name = "renamed";
  d.mode = p9::DMDIR | 0777;
  EXPECT_EQ(f->wstat(d).ename(), "wstat not supported");
  EXPECT_TRUE(w.read(s + "/name"));
  EXPECT_TRUE(w.read(s + "/agent/main/name"));
}

// ---- ctl ---------------------------------------------------------------------------------------

TEST(SessionCtl, InvalidateResyncsWithToolsrv) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  EXPECT_EQ(*w.rdwr(s + "/ctl", "invalidate"), "ok\n");
  EXPECT_EQ(w.rdwr(s + "/ctl", "invalidate now").ename(), "usage: invalidate");
  EXPECT_EQ(w.rdwr(s + "/ctl", "frobnicate").ename(), "unknown command: frobnicate");
  // The agent's system prompt is rendered (with its tools) and it still answers.
  auto sp = w.rdwr(a + "/ctl", "systemprompt");
  ASSERT_TRUE(sp) << sp.ename();
  EXPECT_NE(sp->find("main"), std::string::npos);
  // Invalidate after toolsrv died: a new one is started and synced.
  w.kill_toolsrvs();
  ASSERT_TRUE(eventually([&] { return *w.rdwr(s + "/ctl", "invalidate") == "ok\n" && !w.toolsrvs().empty(); }));
  ASSERT_TRUE(w.write(s + "/env", "AFTER_INVALIDATE=1"));
  EXPECT_EQ(bang(w, a, "echo \"$AFTER_INVALIDATE\""), "1\n");
  // ollie-9p rdwr, the stock client's path.
  auto r = ninep(w, "rdwr", s + "/ctl", "invalidate\n");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "ok\n");
}

TEST(SessionFiles, KilledSessionAnswersSessionKilled) {
  World w;
  auto s = w.session("work");
  auto env = w.walk(s + "/env");
  auto goal = w.walk(s + "/goal");
  ASSERT_TRUE(env && goal);
  ASSERT_TRUE(env->open(p9::ORDWR));
  ASSERT_TRUE(goal->open(p9::OWRITE));
  ASSERT_TRUE(goal->write("written before the kill"));
  EXPECT_EQ(*w.rdwr(s + "/ctl", "kill"), "killed\n");
  EXPECT_EQ(env->read(100).ename(), "session killed");
  EXPECT_EQ(env->write("A=1").ename(), "session killed");
  EXPECT_EQ(goal->clunk().ename(), "session killed");  // its handler never takes the goal
  EXPECT_TRUE(env->clunk());
}

// A killed session takes its tools' private TMPDIR along (§6.1: kept across toolsrv restarts for
// the session's life), what they left there included, and follows none of their symlinks.
TEST(SessionFiles, AKilledSessionTakesItsToolsTmpdirAlong) {
  World w;
  auto s = w.session("work");
  auto id = w.read(s + "/id");
  ASSERT_TRUE(id);
  const std::string tmp = w.root + "/run/ollie/tmp/" + id->substr(0, 36);
  std::filesystem::create_directories(tmp + "/deep/er");  // as its tools would leave it
  write_file(tmp + "/deep/er/left", "x");
  const std::string outside = w.home + "/keep";
  std::filesystem::create_directories(outside);
  write_file(outside + "/precious", "y");
  std::filesystem::create_directory_symlink(outside, tmp + "/deep/link");
  EXPECT_EQ(*w.rdwr(s + "/ctl", "kill"), "killed\n");
  EXPECT_TRUE(eventually([&] { return !std::filesystem::exists(tmp); }));
  EXPECT_EQ(read_file(outside + "/precious"), "y");
}

// §1.5: a session directory's mtime is when it was made (times are whole seconds), not the
// server's start; after a restart, when its oldest agent was (session.json keeps no time).
TEST(SessionFiles, ASessionDirectoryCarriesItsCreationTime) {
  World w;
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  const auto t0 = static_cast<std::uint32_t>(std::time(nullptr));
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  auto made = w.open(s).stat();
  ASSERT_TRUE(made);
  EXPECT_GE(made->mtime, t0);
  auto agent_dir = w.open(a).stat();
  ASSERT_TRUE(agent_dir);
  w.stop_server(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  w.start();
  auto restored = w.open(s).stat();
  ASSERT_TRUE(restored);
  EXPECT_EQ(restored->mtime, agent_dir->mtime);
  EXPECT_LT(restored->mtime, static_cast<std::uint32_t>(std::time(nullptr)));
}
