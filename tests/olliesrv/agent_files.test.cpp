// An agent's fifo, feed, plan, peer/ and proc/ (spec §2.7, §2.8.5, §2.8.6, §6.5, §6.10, §8.11,
// §8.12), through the real socket: the real olliesrv with its real toolsrv running the shipped
// shell tool, and the fake provider.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>

#include "olliesrv/world.hpp"

using namespace convo;
using json = nlohmann::json;

namespace {

std::vector<std::string> names_in(World& w, const std::string& dir) {
  std::vector<std::string> out;
  auto f = w.open(dir);
  auto d = f.dirread_all();
  if (!d) return {"error: " + d.ename()};
  for (const auto& e : *d) out.push_back(e.name);
  return out;
}

/// A tool call of the shell tool with `background: true`.
json background_shell(const std::string& id, const std::string& cmd) {
  return {{"id", id}, {"name", "shell"}, {"arguments", {{"cmd", cmd}, {"background", true}}}};
}

/// The pids of `background process <pid> started (shell)` results, in call order.
std::vector<std::string> started_pids(World& w, const std::string& agent) {
  std::vector<std::string> out;
  const std::string pre = "background process ", post = " started (shell)";
  for (const auto& r : contents(w, agent, "tool", "shell")) {
    EXPECT_EQ(r.rfind(pre, 0), 0u) << r;
    EXPECT_EQ(r.substr(r.size() - post.size()), post) << r;
    out.push_back(r.substr(pre.size(), r.size() - pre.size() - post.size()));
  }
  return out;
}

/// A connection of its own, attached as the hostowner: for fids held across other requests.
struct Conn {
  std::shared_ptr<p9::Client> c;
  p9::CFid root;
  explicit Conn(World& w) {
    auto d = p9::Client::dial("unix!" + w.sock);
    if (!d) throw std::runtime_error("dial: " + d.ename());
    c = *d;
    auto r = c->attach(World::login(), "");
    if (!r) throw std::runtime_error("attach: " + r.ename());
    root = std::move(*r);
  }
  p9::CFid open(const std::string& path, std::uint8_t mode) {
    auto f = root.walk(path);
    if (!f) throw std::runtime_error(path + ": " + f.ename());
    if (auto st = f->open(mode); !st) throw std::runtime_error(path + ": " + st.ename());
    return std::move(*f);
  }
};

/// Links two agents both ways, by id, as ctl peeradd stores it: in session.json (§7.7), with
/// olliesrv stopped, then started again.
void link_in_store(World& w, const std::string& session, const std::string& a_id, const std::string& b_id) {
  const std::string sid = id_of(w, session);
  w.stop_server(SIGTERM);
  const std::string path = w.data + "/sessions/" + sid + "/session.json";
  auto j = json::parse(read_file(path));
  for (auto& ag : j["agents"]) ag["peers"] = json::array({ag["id"] == a_id ? b_id : a_id});
  write_file(path, j.dump());
  w.start();
}

/// Reads a Stream fid to its end.
std::string read_to_eof(p9::CFid& f) {
  std::string all;
  for (;;) {
    auto r = f.read(8192);
    if (!r || r->empty()) return all;
    all += *r;
  }
}

}  // namespace

TEST(AgentFiles, FifoPopsTheHeadAndAppendsToTheTail) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"fault", "hang"}});  // the first turn runs until `stop`
  w.fake.push({{"text", "bravo done"}});
  w.fake.push({{"text", "charlie done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "first"));
  ASSERT_TRUE(w.wait_state(a, "thinking"));
  ASSERT_TRUE(w.write(a + "/fifo", "alpha\n"));
  ASSERT_TRUE(w.write(a + "/fifo", "  bravo \n"));
  ASSERT_TRUE(w.write(a + "/fifo", "//charlie"));  // a prompt with one `/` removed
  // The head is popped at the fid's first read; later reads of that fid serve the same item.
  auto f = w.open(a + "/fifo");
  EXPECT_EQ(*f.pread(0, 100), "alpha");
  EXPECT_EQ(*f.pread(0, 100), "alpha");
  EXPECT_EQ(*f.pread(2, 100), "pha");
  // `/verb` and `!cmd` written to fifo run at once and are never queued.
  ASSERT_TRUE(w.write(a + "/fifo", "/model"));
  ASSERT_TRUE(w.write(a + "/fifo", "!echo from-fifo"));
  ASSERT_TRUE(eventually([&] { return !contents(w, a, "exec").empty(); }));
  EXPECT_EQ(contents(w, a, "exec"), std::vector<std::string>{"from-fifo\n"});
  auto infos = contents(w, a, "info");
  EXPECT_NE(std::find(infos.begin(), infos.end(), "fake-model"), infos.end());
  EXPECT_EQ(*w.rdwr(a + "/ctl", "stop"), "stopped\n");
  // What is left runs in order, one turn each; the popped item never runs.
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant") == std::vector<std::string>{"bravo done", "charlie done"}; }));
  EXPECT_EQ(contents(w, a, "user"), (std::vector<std::string>{"first", "bravo", "/charlie"}));
  EXPECT_EQ(chat_requests(w), 3u);
  ASSERT_TRUE(w.wait_state(a, "idle"));
  EXPECT_EQ(*w.read(a + "/fifo"), "");  // an empty queue: 0 bytes
  // An idle agent: a fifo write starts a turn, as a prompt does.
  w.fake.push({{"text", "delta done"}});
  ASSERT_TRUE(w.write(a + "/fifo", "delta"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 3; }));
  EXPECT_EQ(contents(w, a, "user").back(), "delta");
}

TEST(AgentFiles, FeedSubmitsOnlyANewValueAndItsReadersWaitForOne) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "observer", "agent=observer");
  w.fake.push({{"text", "noted one"}});
  w.fake.push({{"text", "noted two"}});
  auto reader = w.open(a + "/feed");  // its baseline: the value at open (none)
  auto first = std::async(std::launch::async, [&] { return reader.pread(0, 8192); });
  ASSERT_TRUE(w.write(a + "/feed", "diff one\n"));
  auto got = first.get();
  ASSERT_TRUE(got) << got.ename();
  EXPECT_EQ(*got, "diff one\n");
  EXPECT_EQ(*reader.pread(5, 8192), "one\n");  // an offset past 0: the rest of the value delivered
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 1; }));
  ASSERT_TRUE(w.write(a + "/feed", "diff one\n"));  // the same value: nothing happens
  ASSERT_TRUE(w.write(a + "/feed", "diff two"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 2; }));
  EXPECT_EQ(contents(w, a, "user", "feed"), (std::vector<std::string>{"diff one\n", "diff two"}));
  EXPECT_EQ(chat_requests(w), 2u);
  // The fid last saw "diff one\n": the changed value comes at once.
  EXPECT_EQ(*reader.pread(0, 8192), "diff two");
  // No change for 5 s: 0 bytes (feed has no Read content to fall back on).
  const auto t0 = std::chrono::steady_clock::now();
  auto quiet = reader.pread(0, 8192);
  ASSERT_TRUE(quiet) << quiet.ename();
  EXPECT_EQ(*quiet, "");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 4500ms);
}

TEST(AgentFiles, StatTimesAreTheLastChangeWhereKnownElseTheServerStart) {
  // §1.5: atime/mtime are the last change time where known (the transcript's four files,
  // statewait, plan; an agent directory's creation), else the server's start.
  World w;
  auto s = w.session("work");
  const auto started = w.open(s + "/name").stat();
  ASSERT_TRUE(started);
  std::this_thread::sleep_for(1100ms);  // times are whole seconds
  const auto t0 = static_cast<std::uint32_t>(std::time(nullptr));
  auto a = w.agent(s, "main");
  auto dir = w.open(a).stat();
  ASSERT_TRUE(dir);
  EXPECT_GE(dir->mtime, t0);
  w.fake.push({{"text", "ok"}});
  ASSERT_TRUE(w.write(a + "/prompt", "hello"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 1; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  ASSERT_TRUE(w.write(a + "/plan", "- [ ] one\n"));
  for (const char* f : {"log", "log.raw", "chat", "chat.raw", "statewait", "plan"}) {
    auto st = w.open(a + "/" + f).stat();
    ASSERT_TRUE(st) << f;
    EXPECT_GE(st->mtime, t0) << f;
    EXPECT_EQ(st->atime, st->mtime) << f;
  }
  // log.raw's length is its content's, read before and after a block more (its text is kept
  // from the first read and extended).
  std::size_t blocks = 0;
  for (int round = 0; round < 2; round++) {
    const auto raw = w.read(a + "/log.raw");
    ASSERT_TRUE(raw);
    EXPECT_EQ(w.open(a + "/log.raw").stat()->length, raw->size());
    if (round > 0) {
      EXPECT_EQ(blocks_of(*raw).size(), blocks + 1);
    }
    blocks = blocks_of(*raw).size();
    ASSERT_TRUE(w.write(a + "/prompt", "/model"));
    ASSERT_TRUE(eventually([&] { return contents(w, a, "info").size() == static_cast<std::size_t>(round + 1); }));
  }
  auto stats = w.open(a + "/stats").stat();  // no change time kept: the server's start
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->mtime, started->mtime);
  EXPECT_LT(stats->mtime, t0);
  // The files written to change: each its own time, a file nobody wrote keeps the start.
  ASSERT_TRUE(w.write(s + "/env", "FOO=1"));
  ASSERT_TRUE(w.write(a + "/cfg", "temperature=0.5"));
  ASSERT_TRUE(w.write(a + "/name", "helper"));
  ASSERT_TRUE(w.write(s + "/name", "work2"));
  for (const char* f : {"session/work2/env", "session/work2/name", "session/work2/agent/helper/cfg", "session/work2/agent/helper/name"}) {
    auto st = w.open(f).stat();
    ASSERT_TRUE(st) << f;
    EXPECT_GE(st->mtime, t0) << f;
  }
  for (const char* f : {"session/work2/goal", "session/work2/bypass"}) {
    auto st = w.open(f).stat();
    ASSERT_TRUE(st) << f;
    EXPECT_EQ(st->mtime, started->mtime) << f;
  }
}

TEST(AgentFiles, PlanAndFeedAreKeptAcrossARestart) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  const std::string plan = "- [x] read the code\n- [ ] fix the bug\n";
  auto before = w.open(a + "/plan").stat();
  ASSERT_TRUE(before);
  EXPECT_EQ(before->length, 0u);
  ASSERT_TRUE(w.write(a + "/plan", plan));
  EXPECT_EQ(*w.read(a + "/plan"), plan);
  auto after = w.open(a + "/plan").stat();
  ASSERT_TRUE(after);
  EXPECT_EQ(after->length, plan.size());
  EXPECT_GT(after->qid.vers, before->qid.vers);
  EXPECT_EQ(after->uid, id_of(w, a));  // uid S
  EXPECT_EQ(after->mode & 0777, 0640u);
  w.fake.push({{"text", "ok"}});
  ASSERT_TRUE(w.write(a + "/feed", "value one"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 1; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));

  w.stop_server(SIGTERM);
  w.start();
  EXPECT_EQ(*w.read(a + "/plan"), plan);
  // The feed value survived: writing it again submits nothing, a new one is submitted.
  w.fake.push({{"text", "ok again"}});
  ASSERT_TRUE(w.write(a + "/feed", "value one"));
  ASSERT_TRUE(w.write(a + "/feed", "value two"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 2; }));
  EXPECT_EQ(contents(w, a, "user", "feed"), (std::vector<std::string>{"value one", "value two"}));
}

TEST(AgentFiles, PeersGetTaggedMessagesUntilThePeerIsGone) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  auto b = w.agent(s, "helper");
  const std::string a_id = id_of(w, a), b_id = id_of(w, b);
  EXPECT_TRUE(names_in(w, a + "/peer").empty());
  EXPECT_EQ(w.write(a + "/peer/helper", "hi").ename(), "helper: file not found");  // not linked
  link_in_store(w, s, a_id, b_id);

  EXPECT_EQ(names_in(w, a + "/peer"), std::vector<std::string>{"helper"});
  EXPECT_EQ(names_in(w, b + "/peer"), std::vector<std::string>{"main"});
  w.fake.push({{"text", "got it"}});
  ASSERT_TRUE(w.write(a + "/peer/helper", "please review foo.c\n"));
  ASSERT_TRUE(eventually([&] { return contents(w, b, "assistant").size() == 1; }));
  EXPECT_EQ(contents(w, b, "user", "peer:main"),
            std::vector<std::string>{"<peer-message from=\"main\">\nplease review foo.c\n</peer-message>"});
  EXPECT_TRUE(contents(w, a, "user").empty());  // nothing reaches the sender's own history
  // Renamed, the peer is listed by its new name; its id reaches it too. Mode 0200, uid S.
  ASSERT_TRUE(w.write(b + "/name", "reviewer"));
  EXPECT_EQ(names_in(w, a + "/peer"), std::vector<std::string>{"reviewer"});
  Conn c(w);
  auto byid = c.root.walk(a + "/peer/" + b_id);
  ASSERT_TRUE(byid) << byid.ename();
  auto st = byid->stat();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->mode & 0777, 0200u);
  EXPECT_EQ(st->uid, a_id);
  EXPECT_EQ(byid->open(p9::OREAD).ename(), "permission denied");
  // A fid open on the peer's file when the peer is killed: `agent killed`; the entry goes.
  auto f = c.open(a + "/peer/reviewer", p9::OWRITE);
  EXPECT_EQ(*w.rdwr(s + "/agent/reviewer/ctl", "kill"), "killed\n");
  ASSERT_TRUE(f.write("still there?"));
  EXPECT_EQ(f.clunk().ename(), "agent killed");
  EXPECT_TRUE(names_in(w, a + "/peer").empty());
}

TEST(AgentFiles, ABackgroundShellIsListedStreamedWaitedForAndDismissed) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  const std::string a_id = id_of(w, a);
  const std::string cmd = "echo ready; while [ ! -e go ]; do sleep 0.05; done; echo done; exit 3";
  w.fake.push({{"tool_calls", json::array({background_shell("c1", cmd)})}});
  w.fake.push({{"text", "started"}});
  w.fake.push({{"text", "it ended"}});  // the turn of the interrupt
  ASSERT_TRUE(w.write(a + "/prompt", "run it in the background"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 1; }));
  auto pids = started_pids(w, a);
  ASSERT_EQ(pids.size(), 1u);
  const std::string pid = pids[0], dir = a + "/proc/" + pid;
  EXPECT_EQ(names_in(w, a + "/proc"), pids);
  EXPECT_EQ(names_in(w, dir), (std::vector<std::string>{"out", "wait", "stat", "ctl"}));
  auto out = w.open(dir + "/out");
  EXPECT_EQ(World::read_until(out, "ready\n"), "ready\n");
  auto stat = w.read(dir + "/stat");
  ASSERT_TRUE(stat) << stat.ename();
  EXPECT_EQ(stat->rfind("pid=" + pid + "\ntool=shell\nagent=" + a_id + "\nbackground=true\nstatus=running\nstarted=", 0), 0u)
      << *stat;
  auto wait = w.open(dir + "/wait");
  auto status = std::async(std::launch::async, [&] { return read_to_eof(wait); });
  write_file(w.project + "/go", "");
  EXPECT_EQ(read_to_eof(out), "done\n");  // the rest, then EOF after the exit
  EXPECT_EQ(status.get().rfind("pid=" + pid + "\nstatus=exited\nexit=3\nstdout=", 0), 0u);
  stat = w.read(dir + "/stat");
  EXPECT_NE(stat->find("\nstatus=exited\nexit=3\nstarted="), std::string::npos) << *stat;
  // The end comes to the agent as a prompt: a `user` block named `proc`.
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 2; }));
  EXPECT_EQ(contents(w, a, "user", "proc"),
            std::vector<std::string>{"<system-proc-interrupt id=\"" + pid + "\" cmd=\"" + cmd +
                                     "\" status=\"exited\" exit=\"3\">\nready\ndone\n</system-proc-interrupt>"});
  EXPECT_EQ(chat_requests(w), 3u);
  EXPECT_EQ(w.write(dir + "/ctl", "term").ename(), "process has exited");
  // Dismissed, it is gone from proc/.
  ASSERT_TRUE(w.write(dir + "/ctl", "dismiss"));
  EXPECT_TRUE(names_in(w, a + "/proc").empty());
  EXPECT_EQ(w.read(dir + "/stat").ename(), pid + ": file not found");
}

// §6.10: the interrupt counts every byte the process wrote, also past toolsrv's own cut of a
// stream over 10 MiB + 64 KiB (§6.5.2), whose omission line `out` carries in place of the middle.
TEST(AgentFiles, AnInterruptCountsTheBytesToolsrvLeftOutToo) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  const std::string cmd = "head -c 11000000 /dev/zero | tr '\\0' x; echo; echo end";
  w.fake.push({{"tool_calls", json::array({background_shell("c1", cmd)})}});
  w.fake.push({{"text", "started"}});
  w.fake.push({{"text", "it ended"}});
  ASSERT_TRUE(w.write(a + "/prompt", "run it in the background"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "user", "proc").size() == 1; }, 60s));
  const std::string got = contents(w, a, "user", "proc")[0];
  const std::string omitted = "[\u2026 " + std::to_string(11000005 - 4096) + " bytes omitted; full output in proc/";
  EXPECT_NE(got.find(omitted), std::string::npos) << got.substr(0, 300);
  EXPECT_TRUE(got.ends_with("x\nend\n</system-proc-interrupt>")) << got.substr(got.size() - 100);
}

// §2.7: proc/ lists the processes toolsrv still tracks. One that ended stays listed for toolsrv's
// 10 minutes, but only while that toolsrv lives: once it is gone (here kill -9), its pids are no
// one's (they stayed listed, their wait read empty and their ctl said `no such process`).
TEST(AgentFiles, ProcessesOfAToolsrvThatIsGoneAreNoLongerListed) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"tool_calls", json::array({background_shell("c1", "echo quick")})}});
  w.fake.push({{"text", "started"}});
  w.fake.push({{"text", "it ended"}});  // the turn of the interrupt
  ASSERT_TRUE(w.write(a + "/prompt", "run it in the background"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 2; }));
  auto pids = started_pids(w, a);
  ASSERT_EQ(pids.size(), 1u);
  EXPECT_EQ(names_in(w, a + "/proc"), pids) << "ended, still tracked by toolsrv";
  ASSERT_FALSE(w.toolsrvs().empty());
  w.kill_toolsrvs();
  ASSERT_TRUE(eventually([&] { return w.toolsrvs().empty(); }));
  EXPECT_TRUE(eventually([&] { return names_in(w, a + "/proc").empty(); })) << names_in(w, a + "/proc").size();
  EXPECT_EQ(w.read(a + "/proc/" + pids[0] + "/wait").ename(), pids[0] + ": file not found");
}

// §2.7: one that toolsrv let go of (it keeps the 64 background processes used last that ended)
// is no process: its out and wait say so, as its stat does, and the entry goes. They read as
// empty, finished streams, where the interrupt had pointed for the full output.
TEST(AgentFiles, AProcessToolsrvLetGoOfIsNoProcess) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  json calls = json::array();
  for (int i = 0; i < 65; i++) calls.push_back(background_shell("c" + std::to_string(i), "true"));
  w.fake.push({{"tool_calls", calls}});
  w.fake.push({{"text", "started"}});
  for (int i = 0; i < 65; i++) w.fake.push({{"text", "one ended"}});  // the turns of the interrupts
  ASSERT_TRUE(w.write(a + "/prompt", "start them"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 66; }, 120s));
  const auto pids = started_pids(w, a);
  ASSERT_EQ(pids.size(), 65u);
  std::vector<std::string> gone;
  for (const auto& pid : pids) {
    auto out = w.read(a + "/proc/" + pid + "/out");
    if (out) {
      EXPECT_EQ(*out, "") << pid;
      continue;
    }
    EXPECT_EQ(out.ename(), "no such process: " + pid);
    EXPECT_EQ(w.read(a + "/proc/" + pid + "/wait").ename(), pid + ": file not found") << "the entry went";
    gone.push_back(pid);
  }
  ASSERT_EQ(gone.size(), 1u);
  const auto listed = names_in(w, a + "/proc");
  EXPECT_EQ(listed.size(), 64u);
  EXPECT_EQ(std::find(listed.begin(), listed.end(), gone[0]), listed.end());
}

// §1.4: a SIGTERM is not held by a background process that ended: the wait of its entry for
// toolsrv to let it go (10 minutes) ends with the shutdown. It held the I/O threads for their
// 3 s of grace (`connections still busy after 3 s: stopping anyway`).
TEST(AgentFiles, AnEndedBackgroundProcessHoldsNoShutdown) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"tool_calls", json::array({background_shell("c1", "true")})}});
  w.fake.push({{"text", "started"}});
  w.fake.push({{"text", "it ended"}});
  ASSERT_TRUE(w.write(a + "/prompt", "run it in the background"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 2; }));
  w.stop_server(SIGTERM);
  EXPECT_EQ(w.log_text().find("still busy"), std::string::npos) << w.log_text();
}

// olliesrv stopped (SIGTERM) while a background process runs: the process dies with toolsrv, and
// its `lost` interrupt is in the history and the log after the restart, so the model that said
// it would report the result hears of it at the next prompt. Nothing told of it before.
TEST(AgentFiles, ABackgroundProcessLostToAStopIsToldAfterTheRestart) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"tool_calls", json::array({background_shell("c1", "sleep 300")})}});
  w.fake.push({{"text", "started; I will report when it ends"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 1; }));
  const auto pids = started_pids(w, a);
  ASSERT_EQ(pids.size(), 1u);
  w.restart_with({});
  const std::string lost = "<system-proc-interrupt id=\"" + pids[0] + "\" cmd=\"sleep 300\" status=\"lost\">\n</system-proc-interrupt>";
  EXPECT_EQ(contents(w, a, "user", "proc"), std::vector<std::string>{lost});
  w.fake.push({{"text", "it was lost"}});
  ASSERT_TRUE(w.write(a + "/prompt", "status?"));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 2; }));
  const auto body = w.fake.requests().back().body;
  const auto at = body.find(json(lost).dump());
  ASSERT_NE(at, std::string::npos) << body;
  EXPECT_LT(at, body.find("status?"));
}

// A read of `wait` waiting when toolsrv is lost, before a byte came: no such process, as its stat
// says. It ended as an empty, finished stream, which a script waiting on `wait` took for an end.
TEST(AgentFiles, AWaitReadWhenToolsrvIsLostSaysNoSuchProcess) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"tool_calls", json::array({background_shell("c1", "sleep 300")})}});
  w.fake.push({{"text", "started"}});
  w.fake.push({{"text", "it was lost"}});  // the interrupt's turn
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 1; }));
  auto pids = started_pids(w, a);
  ASSERT_EQ(pids.size(), 1u);
  Conn c(w);
  auto wait = c.open(a + "/proc/" + pids[0] + "/wait", p9::OREAD);
  auto waiting = std::async(std::launch::async, [&] { return wait.read(100); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the read waits at toolsrv
  w.kill_toolsrvs();
  const auto r = waiting.get();
  ASSERT_FALSE(r) << *r;
  EXPECT_EQ(r.ename(), "no such process: " + pids[0]);
}

TEST(AgentFiles, ProcCtlSignalsTheProcessAndRefusesWhatItCannotDo) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"tool_calls", json::array({background_shell("c1", "sleep 30"), background_shell("c2", "sleep 30"),
                                           background_shell("c3", "sleep 30")})}});
  w.fake.push({{"text", "three running"}});
  for (int i = 0; i < 3; i++) w.fake.push({{"text", "one ended"}});
  ASSERT_TRUE(w.write(a + "/prompt", "start three"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 1; }));
  auto pids = started_pids(w, a);
  ASSERT_EQ(pids.size(), 3u);
  auto listed = pids;  // listed numerically
  std::sort(listed.begin(), listed.end(), [](const std::string& x, const std::string& y) { return std::stoi(x) < std::stoi(y); });
  EXPECT_EQ(names_in(w, a + "/proc"), listed);
  const std::string p1 = a + "/proc/" + pids[0], p2 = a + "/proc/" + pids[1], p3 = a + "/proc/" + pids[2];
  EXPECT_EQ(w.write(p1 + "/ctl", "bogus").ename(), "unknown command: bogus");
  EXPECT_EQ(w.write(p1 + "/ctl", "signal x").ename(), "invalid signal: x");
  EXPECT_EQ(w.write(p1 + "/ctl", "signal 0").ename(), "invalid signal: 0");
  EXPECT_EQ(w.write(p1 + "/ctl", "signal 65").ename(), "invalid signal: 65");
  const std::vector<std::pair<std::string, std::string>> how{{"term", "15"}, {"kill", "9"}, {"signal 2", "2"}};
  const std::vector<std::string> dirs{p1, p2, p3};
  for (std::size_t i = 0; i < 3; i++) {
    auto wait = w.open(dirs[i] + "/wait");
    ASSERT_TRUE(w.write(dirs[i] + "/ctl", how[i].first));
    EXPECT_EQ(read_to_eof(wait).rfind("pid=" + pids[i] + "\nstatus=signaled\nsignal=" + how[i].second + "\n", 0), 0u)
        << how[i].first;
    EXPECT_EQ(w.write(dirs[i] + "/ctl", "kill").ename(), "process has exited");
    EXPECT_EQ(w.write(dirs[i] + "/ctl", "signal 9").ename(), "process has exited");
  }
  ASSERT_TRUE(eventually([&] { return contents(w, a, "user", "proc").size() == 3; }));
  auto interrupts = contents(w, a, "user", "proc");
  for (std::size_t i = 0; i < 3; i++) {
    const std::string head = "<system-proc-interrupt id=\"" + pids[i] + "\" cmd=\"sleep 30\" status=\"signaled\" signal=\"" +
                             how[i].second + "\">\n</system-proc-interrupt>";
    EXPECT_NE(std::find(interrupts.begin(), interrupts.end(), head), interrupts.end()) << head;
  }
  for (const auto& d : dirs) ASSERT_TRUE(w.write(d + "/ctl", "dismiss"));
  EXPECT_TRUE(names_in(w, a + "/proc").empty());
}

TEST(AgentFiles, AFlushedProcReadReachesToolsrvAndLosesNothing) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"tool_calls", json::array({background_shell("c1", "echo one; while [ ! -e go ]; do sleep 0.05; done; echo two")})}});
  w.fake.push({{"text", "started"}});
  w.fake.push({{"text", "ended"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 1; }));
  auto pids = started_pids(w, a);
  ASSERT_EQ(pids.size(), 1u);
  Conn c(w);
  auto out = c.open(a + "/proc/" + pids[0] + "/out", p9::OREAD);
  EXPECT_EQ(*out.read(100), "one\n");
  // A read with nothing to give blocks (in toolsrv); flushed, it ends without a reply.
  auto got = std::make_shared<std::promise<p9::Result<p9::Fcall>>>();
  auto reply = got->get_future();
  p9::Fcall t;
  t.type = p9::Tread;
  t.fid = out.num();
  t.count = 100;
  auto tag = c.c->start(t, [got](p9::Result<p9::Fcall> r) { got->set_value(std::move(r)); });
  c.c->flush(tag);
  auto r = reply.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.ename(), "interrupted");
  // The same fid goes on where it was: nothing lost, nothing repeated.
  write_file(w.project + "/go", "");
  EXPECT_EQ(read_to_eof(out), "two\n");
  EXPECT_EQ(read_to_eof(out), "");
}

// §1.5: a flushed read gets no reply, so it takes no bytes. A reader whose reads are flushed at
// any point (Linux's v9fs flushes a read a signal interrupts) gets every byte once; a read that
// toolsrv had answered when the flush came lost its bytes (about one flush in 250).
TEST(AgentFiles, ReadsFlushedAtAnyPointLoseNoProcOutput) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"tool_calls", json::array({background_shell("c1", "seq 1 40000")})}});
  w.fake.push({{"text", "started"}});
  w.fake.push({{"text", "ended"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 2; }));  // it ended
  auto pids = started_pids(w, a);
  ASSERT_EQ(pids.size(), 1u);
  std::string expected;
  for (int i = 1; i <= 40000; i++) expected += std::to_string(i) + "\n";
  Conn c(w);
  auto out = c.open(a + "/proc/" + pids[0] + "/out", p9::OREAD);
  std::string got;
  std::mt19937 rng(8);
  int flushed = 0;
  for (int i = 0; i < 3000 && got.size() < expected.size(); i++) {
    auto done = std::make_shared<std::promise<p9::Result<p9::Fcall>>>();
    auto reply = done->get_future();
    p9::Fcall t;
    t.type = p9::Tread;
    t.fid = out.num();
    t.count = 64;
    auto tag = c.c->start(t, [done](p9::Result<p9::Fcall> r) { done->set_value(std::move(r)); });
    if (i % 2 == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 400));
      c.c->flush(tag);
    }
    auto r = reply.get();
    if (r) {
      got += r->data;  // answered before its flush came: its bytes are the reader's
    } else {
      ASSERT_EQ(r.ename(), "interrupted");
      flushed++;
    }
  }
  got += read_to_eof(out);
  EXPECT_GT(flushed, 0);
  ASSERT_EQ(got.size(), expected.size());
  const auto diff = std::mismatch(got.begin(), got.end(), expected.begin()).first - got.begin();
  EXPECT_TRUE(got == expected) << "first difference at byte " << diff << ": " << got.substr(std::max<long>(diff - 20, 0), 40);
}

// A client's waiting reads of proc/<pid>/wait each held a request on the session's one connection
// to toolsrv: 1200 of them filled it, the running process was taken for `lost` (unkillable
// through its ctl), and the engine's calls failed `too many requests in flight`. At most 256
// streams now wait at toolsrv, the others in olliesrv, and every reader gets its status.
TEST(AgentFiles, ManyWaitingProcReadsLeaveTheEngineItsPlaces) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"tool_calls", json::array({background_shell("c1", "while [ ! -e go ]; do sleep 0.05; done; exit 4")})}});
  w.fake.push({{"text", "started"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 1; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  auto pids = started_pids(w, a);
  ASSERT_EQ(pids.size(), 1u);
  const std::string dir = a + "/proc/" + pids[0];
  // Before the connections: a failure's early return hangs them up, which completes every read.
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<std::size_t, p9::Result<p9::Fcall>>> replies;
  constexpr int per_conn = 600;
  std::vector<std::unique_ptr<Conn>> conns;
  std::vector<p9::CFid> fids;
  for (int k = 0; k < 2; k++) {
    conns.push_back(std::make_unique<Conn>(w));
    for (int i = 0; i < per_conn; i++) fids.push_back(conns.back()->open(dir + "/wait", p9::OREAD));
  }
  const auto read_on = [&](std::size_t i) {
    p9::Fcall t;
    t.type = p9::Tread;
    t.fid = fids[i].num();
    t.count = 4096;
    conns[i / per_conn]->c->start(t, [&, i](p9::Result<p9::Fcall> r) {
      std::lock_guard lock(mu);
      replies.emplace_back(i, std::move(r));
      cv.notify_all();
    });
  };
  for (std::size_t i = 0; i < fids.size(); i++) read_on(i);
  // The engine still has its calls: a tool round runs, and the process is still running.
  w.fake.push({{"tool_calls", json::array({{{"id", "c2"}, {"name", "shell"}, {"arguments", {{"cmd", "echo still here"}}}}})}});
  w.fake.push({{"text", "fine"}});
  ASSERT_TRUE(w.write(a + "/prompt", "are you there?"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 2; }));
  EXPECT_EQ(contents(w, a, "tool", "shell").back(), "still here\n");
  EXPECT_NE(w.read(dir + "/stat")->find("\nstatus=running\n"), std::string::npos);
  ASSERT_TRUE(w.wait_state(a, "idle"));
  w.fake.push({{"text", "it ended"}});  // the turn of the interrupt
  write_file(w.project + "/go", "");
  // Each reader gets the status, then EOF; a stream at its end makes way for one still waiting.
  std::vector<std::string> status(fids.size());
  std::size_t ended = 0;
  std::unique_lock lock(mu);
  while (ended < fids.size()) {
    ASSERT_TRUE(cv.wait_for(lock, 60s, [&] { return !replies.empty(); })) << ended << " streams ended";
    auto [i, r] = std::move(replies.front());
    replies.erase(replies.begin());
    ASSERT_TRUE(r) << r.ename();
    if (r->data.empty()) {
      EXPECT_EQ(status[i].rfind("pid=" + pids[0] + "\nstatus=exited\nexit=4\n", 0), 0u) << status[i];
      ended++;
      continue;
    }
    status[i] += r->data;
    lock.unlock();
    read_on(i);
    lock.lock();
  }
}

TEST(AgentFiles, AKilledAgentsFilesSayAgentKilledAndItsStreamsEnd) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"tool_calls", json::array({background_shell("c1", "echo up; sleep 30")})}});
  w.fake.push({{"text", "started"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 1; }));
  auto pids = started_pids(w, a);
  ASSERT_EQ(pids.size(), 1u);
  ASSERT_TRUE(w.wait_state(a, "idle"));
  Conn c(w);
  const std::string dir = a + "/proc/" + pids[0];
  auto out = c.open(dir + "/out", p9::OREAD);
  EXPECT_EQ(*out.read(100), "up\n");
  auto plan = c.open(a + "/plan", p9::OREAD);
  auto fifo = c.open(a + "/fifo", p9::OREAD);
  auto feed = c.open(a + "/feed", p9::OREAD);
  auto stat = c.open(dir + "/stat", p9::OREAD);
  auto ctl = c.open(dir + "/ctl", p9::OWRITE);
  auto waiting = std::async(std::launch::async, [&] { return feed.pread(0, 100); });
  EXPECT_EQ(*w.rdwr(a + "/ctl", "kill"), "killed\n");
  EXPECT_EQ(waiting.get().ename(), "agent killed");  // a blocked feed read wakes
  EXPECT_EQ(read_to_eof(out), "");                   // its process was killed with it: EOF
  EXPECT_EQ(plan.read(100).ename(), "agent killed");
  EXPECT_EQ(fifo.read(100).ename(), "agent killed");
  EXPECT_EQ(stat.read(100).ename(), "agent killed");
  EXPECT_EQ(ctl.write("term").ename(), "agent killed");
  EXPECT_TRUE(ctl.clunk());
}

TEST(AgentFiles, EveryOperationOnAKilledObjectsFidsButAStreamReadAHeldReplyAndClunkIsRefused) {
  // §1.5: walk, open, stat, wstat, read and write on fids of a killed agent answer `agent killed`,
  // on the session's other files `session killed`; chat ends, the held `killed` reply is served
  // to its end, and Tclunk frees every fid.
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  Conn c(w);
  auto sdir = c.root.walk(s);
  auto adir = c.root.walk(a);
  auto stats_unopened = c.root.walk(a + "/stats");
  auto name_unopened = c.root.walk(s + "/name");
  ASSERT_TRUE(sdir && adir && stats_unopened && name_unopened);
  auto chat = c.open(a + "/chat", p9::OREAD);
  auto log = c.open(a + "/log", p9::OREAD);
  auto prompt = c.open(a + "/prompt", p9::OWRITE);
  auto block = c.open(a + "/block", p9::ORDWR);
  auto agents = c.open(s + "/agent/idx", p9::OREAD);
  ASSERT_TRUE(log.read(1));  // a snapshot taken before the kill is not served after it
  auto ctl = c.open(s + "/ctl", p9::ORDWR);
  ASSERT_TRUE(ctl.write("kill"));
  EXPECT_EQ(*ctl.read(3), "kil");
  EXPECT_EQ(*ctl.read(100), "led\n");  // the held reply, to its end
  EXPECT_EQ(*ctl.read(100), "");

  EXPECT_EQ(adir->walk("stats").ename(), "agent killed");
  EXPECT_EQ(adir->walk("").ename(), "agent killed");  // a clone (no names) is an operation too
  EXPECT_EQ(stats_unopened->walk("").ename(), "agent killed");
  EXPECT_EQ(sdir->walk("").ename(), "session killed");
  EXPECT_EQ(sdir->walk("agent/main").ename(), "session killed");
  EXPECT_EQ(sdir->walk("id").ename(), "session killed");
  EXPECT_EQ(stats_unopened->open(p9::OREAD).ename(), "agent killed");
  EXPECT_EQ(name_unopened->open(p9::OREAD).ename(), "session killed");
  EXPECT_EQ(stats_unopened->stat().ename(), "agent killed");
  EXPECT_EQ(name_unopened->stat().ename(), "session killed");
  EXPECT_EQ(adir->stat().ename(), "agent killed");
  p9::Dir touch = p9::Dir::null();
  touch.mtime = 1;
  EXPECT_EQ(name_unopened->wstat(touch).ename(), "session killed");
  EXPECT_EQ(log.read(100).ename(), "agent killed");
  EXPECT_EQ(agents.read(100).ename(), "session killed");
  EXPECT_EQ(prompt.write("anyone?").ename(), "agent killed");
  EXPECT_EQ(block.write("00000001").ename(), "agent killed");
  EXPECT_EQ(block.read(100).ename(), "agent killed");
  World::read_until(chat, "\x01");
  auto eof = chat.read(100);
  ASSERT_TRUE(eof) << "the chat stream ends: " << eof.ename();
  EXPECT_EQ(*eof, "");
  for (auto* f : {&chat, &log, &prompt, &block, &agents, &ctl}) EXPECT_TRUE(f->clunk());
  for (auto* f : {&*sdir, &*adir, &*stats_unopened, &*name_unopened}) EXPECT_TRUE(f->clunk());
}

TEST(AgentFiles, PeeraddLinksBothWaysAndPeerdelUnlinks) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  auto b = w.agent(s, "helper");
  EXPECT_EQ(*w.rdwr(a + "/ctl", "peeradd helper"), "peer helper\n");
  EXPECT_EQ(names_in(w, a + "/peer"), std::vector<std::string>{"helper"});
  EXPECT_EQ(names_in(w, b + "/peer"), std::vector<std::string>{"main"});
  w.fake.push({{"text", "answered"}});
  ASSERT_TRUE(w.write(b + "/peer/main", "  done with foo.c  "));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 1; }));
  EXPECT_EQ(contents(w, a, "user", "peer:helper"),
            std::vector<std::string>{"<peer-message from=\"helper\">\ndone with foo.c\n</peer-message>"});
  Conn c(w);
  auto f = c.open(a + "/peer/helper", p9::OWRITE);
  EXPECT_EQ(*w.rdwr(a + "/ctl", "peerdel helper"), "unpeered helper\n");
  EXPECT_TRUE(names_in(w, a + "/peer").empty());
  EXPECT_TRUE(names_in(w, b + "/peer").empty());
  ASSERT_TRUE(f.write("one more thing"));
  EXPECT_EQ(f.clunk().ename(), "not a peer: helper");
  EXPECT_EQ(contents(w, b, "user").size(), 0u);
}
