// olliesrv and ollie-9p as a user runs them: real binaries, real socket.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <thread>
#include <tuple>

#include "lib9p/dial.hpp"
#include "lib9p/dirs.hpp"
#include "olliesrv/olliesrv.hpp"
#include "server.hpp"
#include "support/process.hpp"
#include "support/testserver.hpp"

using testing_support::built;
using testing_support::Child;
using testing_support::run;

namespace {

using testing_support::exists;
using testing_support::wait_for;

struct Daemon : ::testing::Test {
  testing_support::TempDir dir;
  std::string sock = dir.path + "/ollie";
  std::string addr = "unix!" + sock;
  std::unique_ptr<Child> srv;

  void SetUp() override {
    srv = std::make_unique<Child>(std::vector<std::string>{built("bin/olliesrv"), "-a", addr, "-l", "info"},
                                  std::vector<std::string>{"XDG_DATA_HOME=" + dir.path + "/data"});
    ASSERT_TRUE(wait_for(sock)) << srv->err_text();
  }
  testing_support::Ran o9p(std::vector<std::string> args, const std::string& input = "", std::vector<std::string> env = {}) {
    args.insert(args.begin(), {built("bin/ollie-9p"), "-a", addr});
    return run(args, input, env);
  }
};

}  // namespace

TEST_F(Daemon, HelpIsGeneratedFromTheDeclaration) {
  auto r = o9p({"read", "help"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("/\tdir\t0555\t"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/ctl\tRdwr\t0600\tserver control; verbs: invalidate kill\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/event\tStreamRdwr\t0666\t"), std::string::npos) << r.out;
}

// -l on a plain Read file prints its content once and ends (it does not spin on the snapshot).
TEST_F(Daemon, ReadDashLOnAPlainFileEndsAfterOneCopy) {
  auto once = o9p({"read", "help"});
  auto r = o9p({"read", "-l", "help"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, once.out);
  // `--` ends the options.
  r = o9p({"read", "--", "help"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, once.out);
}

TEST(Ollie9p, HelpForEachVerbAndUsageErrors) {
  auto all = run({built("bin/ollie-9p"), "-h"});
  EXPECT_EQ(all.status, 0);
  EXPECT_NE(all.out.find("usage: ollie-9p [-a address] ls [-l] [path]"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("Exit status: 0 done; 1 an error"), std::string::npos) << all.out;
  for (const char* verb : {"ls", "stat", "read", "write", "rdwr"}) {
    auto r = run({built("bin/ollie-9p"), verb, "--help"});
    EXPECT_EQ(r.status, 0) << verb;
    EXPECT_EQ(r.out.rfind(std::string("ollie-9p ") + verb, 0), 0u) << r.out;  // the verb's own text first
  }
  auto bad = run({built("bin/ollie-9p"), "frobnicate", "-h"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("usage: ollie-9p"), std::string::npos) << bad.err;
}

TEST_F(Daemon, LsListsTheRoot) {
  auto r = o9p({"ls"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "agents\nbackends\nbypass\ncomplete\nctl\nevent\ngenerate\nhelp\nmodels\nsession\ntools\n");
  auto l = o9p({"ls", "-l", "/"});
  ASSERT_EQ(l.status, 0) << l.err;
  std::string me = p9::login_name();
  EXPECT_NE(l.out.find("--rw------- M 0 " + me + " agent 0 "), std::string::npos) << l.out;
  EXPECT_TRUE(l.out.ends_with(" tools\n")) << l.out;
  auto f = o9p({"ls", "help"});
  EXPECT_EQ(f.out, "help\n");
}

TEST_F(Daemon, StatPrintsTheDirEntry) {
  auto r = o9p({"stat", "ctl"});
  ASSERT_EQ(r.status, 0) << r.err;
  std::string me = p9::login_name();
  EXPECT_TRUE(r.out.starts_with("'ctl' '" + me + "' 'agent' '" + me + "' q (")) << r.out;
  EXPECT_NE(r.out.find(" m 0600 "), std::string::npos) << r.out;
}

TEST_F(Daemon, ErrorsNameThePathAndExitNonZero) {
  auto r = o9p({"read", "nosuch"});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "ollie-9p: nosuch: file not found\n");  // the element is not said twice
  r = o9p({"read", "session/nosuch/id"});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "ollie-9p: session/nosuch/id: nosuch: file not found\n");
  auto u = o9p({"rdwr", "ctl"}, "bogus\n");
  EXPECT_EQ(u.status, 1);
  EXPECT_EQ(u.err, "ollie-9p: ctl: unknown command: bogus\n");
  auto w = o9p({"write", "ctl"}, "bogus\n");  // the handler runs at clunk; its error is reported
  EXPECT_EQ(w.status, 1);
  EXPECT_EQ(w.err, "ollie-9p: ctl: unknown command: bogus\n");
  auto dial = run({built("bin/ollie-9p"), "-a", "unix!" + dir.path + "/none", "ls"});
  EXPECT_EQ(dial.status, 1);
  EXPECT_EQ(dial.err, "ollie-9p: unix!" + dir.path + "/none: dial " + dir.path +
                          "/none: No such file or directory: is olliesrv running?\n");
}

// Started with stdout (or stdout and stderr) closed, ollie-9p's socket would take their number and
// what it prints would go to olliesrv as 9P frames, run with its principal's rights.
TEST_F(Daemon, ClosedStandardDescriptorsNeverCarryOutputIntoTheConnection) {
  const std::string o9 = built("bin/ollie-9p") + " -a '" + addr + "'";
  for (const char* closed : {">&-", ">&- 2>&-", "<&- >&- 2>&-"}) {
    auto r = run({"/bin/sh", "-c", "exec " + o9 + " read help " + closed});
    EXPECT_EQ(r.status, 0) << closed << ": " << r.err;
  }
  EXPECT_EQ(srv->err_text().find("closing the connection"), std::string::npos) << srv->err_text();
}

// `ollie-9p read event | head -c 0` ends when head does, though the stream says nothing; and the
// output's own errors are said (ls > /dev/full), as is a stdin that cannot be read.
TEST_F(Daemon, AReaderThatGoesEndsTheStreamAndOutputErrorsAreSaid) {
  const std::string o9 = built("bin/ollie-9p") + " -a '" + addr + "'";
  auto r = run({"timeout", "10", "/bin/sh", "-c", o9 + " read event | head -c 0"});
  EXPECT_EQ(r.status, 0) << r.err;  // 124: still waiting for an event nobody will read
  // One that had printed all it had (one line, one write) ends with its own status, as cat(1)
  // does: `o` runs `ollie-9p read session/idx | grep -q` under pipefail.
  ASSERT_EQ(o9p({"rdwr", "session/new"}, "name=work cwd='" + dir.path + "'\n").status, 0);
  auto done = run({"bash", "-o", "pipefail", "-c", o9 + " read session/idx | grep -q ^work"});
  EXPECT_EQ(done.status, 0) << done.err;
  auto full = run({"/bin/sh", "-c", o9 + " ls / > /dev/full"});
  EXPECT_EQ(full.status, 1);
  EXPECT_EQ(full.err, "ollie-9p: stdout: No space left on device\n");
  // So are those of read and rdwr, which print each reply as it comes (a stream into a full disk
  // would run on printing nothing).
  for (const std::string& cmd : {o9 + " read session/idx", "echo invalidate | " + o9 + " rdwr ctl"}) {
    auto lost = run({"timeout", "10", "/bin/sh", "-c", cmd + " > /dev/full"});
    EXPECT_EQ(lost.status, 1) << cmd;
    EXPECT_EQ(lost.err, "ollie-9p: stdout: No space left on device\n") << cmd;
  }
  auto dir_in = run({"/bin/sh", "-c", o9 + " write ctl < /"});
  EXPECT_EQ(dir_in.status, 1);
  EXPECT_EQ(dir_in.err, "ollie-9p: stdin: Is a directory\n");
}

// A server that stops on the root ctl's `kill` hangs up after its reply: rdwr ends well. One that
// dies under another rdwr (a stream of events, a reply half read) is an error, said.
TEST_F(Daemon, RdwrEndsWellOnlyWhenItsKillStoppedTheServer) {
  Child events({built("bin/ollie-9p"), "-a", addr, "rdwr", "event"});
  events.close_stdin();
  // An event it has read: its stream runs.
  for (int i = 0; i < 50 && events.read_until("session.", 200).find("session.") == std::string::npos; i++)
    ASSERT_EQ(o9p({"rdwr", "session/new"}, "name=s" + std::to_string(i) + " cwd='" + dir.path + "'\n").status, 0);
  ASSERT_NE(events.read_until("session.", 100).find("session."), std::string::npos);
  ::kill(srv->pid(), SIGKILL);
  ASSERT_TRUE(events.wait());
  EXPECT_EQ(events.result().status, 1);
  EXPECT_NE(events.result().err.find("ollie-9p: event: "), std::string::npos) << events.result().err;
  srv = std::make_unique<Child>(std::vector<std::string>{built("bin/olliesrv"), "-a", addr},
                                std::vector<std::string>{"XDG_DATA_HOME=" + dir.path + "/data"});
  // Its socket is the dead one's until it listens.
  for (int i = 0; i < 100 && o9p({"read", "help"}).status != 0; i++) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto killed = o9p({"rdwr", "ctl"}, "kill\n");
  EXPECT_EQ(killed.status, 0) << killed.err;
  EXPECT_EQ(killed.out, "ok\n");
}

// rdwr prints the reply from its start (§1.7); on a file that is a Read and a Write (a session's
// env), that is its content, whole, where it lost as many bytes as the request had.
TEST_F(Daemon, RdwrPrintsFromTheStart) {
  ASSERT_EQ(o9p({"rdwr", "session/new"}, "name=work cwd='" + dir.path + "'\n").status, 0);
  auto before = o9p({"read", "session/work/env"});
  ASSERT_EQ(before.status, 0) << before.err;
  ASSERT_FALSE(before.out.empty());
  auto r = o9p({"rdwr", "session/work/env"}, "FOO=bar\n");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, before.out);
  EXPECT_NE(o9p({"read", "session/work/env"}).out.find("FOO=bar\n"), std::string::npos);
}

// A usage error says what was wrong before the usage, and is found before any dial.
TEST(Ollie9p, UsageErrorsSayWhatWasWrong) {
  const std::vector<std::string> nowhere{"OLLIE_ADDR=unix!/nonexistent/sock"};
  for (const auto& [args, why] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"help"}, "unknown verb: help"},
           {{}, "a verb is needed"},
           {{"stat"}, "stat: a path is needed"},
           {{"read", "-l"}, "read: a path is needed"},
           {{"ls", "a", "b"}, "ls: unexpected argument: b"},
           {{"rdwr", "session/new", "name=x cwd=/"}, "rdwr: unexpected argument: name=x cwd=/ (what is sent comes from stdin)"},
           {{"-a"}, "-a needs an address (a socket path, unix!<path> or tcp!<host>!<port>)"},
           {{"ls", "-x"}, "ls: unknown option: -x"},
           {{"-x", "ls"}, "unknown option: -x"},
           {{"read", "-x", "session/idx"}, "read: unknown option: -x"},
           {{"read", "-l", "-l", "event"}, "read: -l given twice"},
           {{"stat", "-l", "event"}, "stat: unknown option: -l"},
       }) {
    std::vector<std::string> argv{built("bin/ollie-9p")};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = run(argv, "", nowhere);
    EXPECT_EQ(r.status, 2) << why;
    EXPECT_EQ(r.err.rfind("ollie-9p: " + why + "\nusage: ollie-9p", 0), 0u) << r.err;
  }
}

// olliesrv -h is asked for: the usage and what each option does on stdout, exit 0. A wrong
// option is a usage error: why, then the usage, on stderr, exit 2, and nothing started.
TEST(OlliesrvBinary, HelpIsAnswerAndAWrongOptionIsAUsageError) {
  auto h = run({built("bin/olliesrv"), "-h"});
  EXPECT_EQ(h.status, 0) << h.err;
  EXPECT_EQ(h.out.rfind("usage: olliesrv [-a dialstring]...", 0), 0u) << h.out;
  EXPECT_NE(h.out.find("  -maxconn n "), std::string::npos) << h.out;
  EXPECT_EQ(h.err, "");
  auto u = run({built("bin/olliesrv"), "-x"});
  EXPECT_EQ(u.status, 2);
  EXPECT_EQ(u.out, "");
  EXPECT_EQ(u.err.rfind("olliesrv: unknown option: -x\nusage: olliesrv [-a dialstring]...", 0), 0u) << u.err;
  for (const auto& [args, why] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"-maxconn", "0"}, "-maxconn: not a positive count: 0"}, {{"-a"}, "-a: needs a value"}}) {
    std::vector<std::string> argv{built("bin/olliesrv")};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = run(argv);
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(r.err.rfind("olliesrv: " + why + "\nusage: olliesrv", 0), 0u) << r.err;
  }
}

// No socket: said so, with the likely cause, and not the mode of the directory it would be in
// (`/: mode 0755, not 0700: chmod 700 /` for -a /nonexistent).
TEST(Ollie9p, AMissingSocketIsSaidToBeMissing) {
  auto r = run({built("bin/ollie-9p"), "-a", "/nonexistent", "read", "session/idx"}, "");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "ollie-9p: unix!/nonexistent: dial /nonexistent: No such file or directory: is olliesrv running?\n");
}

TEST_F(Daemon, UnknownUserIsRefused) {
  auto r = o9p({"ls"}, "", {"OLLIE_UNAME=nobody-here"});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "ollie-9p: " + addr + ": unknown user: nobody-here\n");
}

TEST_F(Daemon, SandboxedPeerCannotPoseAsTheHostowner) {
  auto r = run({"setpriv", "--no-new-privs", built("bin/ollie-9p"), "-a", addr, "read", "help"});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "ollie-9p: " + addr + ": permission denied: sandboxed clients attach as their agent\n");
}

TEST_F(Daemon, CtlKillRepliesThenStops) {
  auto r = o9p({"rdwr", "ctl"}, "kill\n");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "ok\n");
  ASSERT_TRUE(srv->wait());
  EXPECT_EQ(srv->result().status, 0);
  EXPECT_FALSE(exists(sock));
}

TEST_F(Daemon, SigtermRemovesTheSocketAndExitsZero) {
  Child reader({built("bin/ollie-9p"), "-a", addr, "read", "event"});  // a blocked client
  // Its read is under way once it prints an event (a sleep was not enough on a busy machine).
  for (int i = 0; i < 100; i++) {
    ASSERT_EQ(o9p({"rdwr", "session/new"}, "name=s" + std::to_string(i) + " cwd=/tmp\n").status, 0);
    if (reader.read_until("\n", 100).find("session.") != std::string::npos) break;
  }
  ::kill(srv->pid(), SIGTERM);
  ASSERT_TRUE(srv->wait());
  EXPECT_EQ(srv->result().status, 0) << srv->err_text();
  EXPECT_EQ(srv->err_text().find("[error]"), std::string::npos) << srv->err_text();  // a stop is no error
  EXPECT_FALSE(exists(sock));
  ASSERT_TRUE(reader.wait());  // the blocked reader was let go: end of file, exit 0
  EXPECT_EQ(reader.result().status, 0) << reader.result().err;
}

// Two servers on one data directory would restore the same sessions and overwrite, or delete,
// each other's files: the second is refused before it listens, naming the first; once the
// first is gone, however it went, the directory is free again.
TEST_F(Daemon, ASecondServerOnTheSameDataIsRefused) {
  const std::string data = dir.path + "/data", other = dir.path + "/other";
  auto second = run({built("bin/olliesrv"), "-a", "unix!" + other}, "", {"XDG_DATA_HOME=" + data});
  EXPECT_EQ(second.status, 1);
  EXPECT_NE(second.err.find("olliesrv: " + data + "/ollie: in use by another olliesrv (pid " + std::to_string(srv->pid()) +
                            "): stop it, or give this one another XDG_DATA_HOME\n"),
            std::string::npos)
      << second.err;
  EXPECT_FALSE(exists(other)) << "the refused server made a socket";
  ::kill(srv->pid(), SIGKILL);
  ASSERT_TRUE(srv->wait());
  Child next({built("bin/olliesrv"), "-a", "unix!" + other}, {"XDG_DATA_HOME=" + data});
  ASSERT_TRUE(wait_for(other)) << next.err_text();
  ::kill(next.pid(), SIGTERM);
  ASSERT_TRUE(next.wait());
  EXPECT_EQ(next.result().status, 0) << next.err_text();
}

// A client that connects while olliesrv restores (§7.7: after the listener is up) is served once
// the restore is done: its first answer holds every session. A restarted chat (o, ellie) that saw
// a part of them would take its agent for gone.
TEST(DaemonRestore, AClientDuringTheRestoreSeesEverySession) {
  testing_support::TempDir dir;
  const std::string sessions = dir.path + "/data/ollie/sessions";
  const int n = 400;
  for (const auto& d : {dir.path + "/data", dir.path + "/data/ollie", sessions}) ASSERT_EQ(::mkdir(d.c_str(), 0700), 0);
  for (int i = 0; i < n; i++) {
    char id[40], aid[40];
    std::snprintf(id, sizeof id, "00000000-0000-4000-8000-%012d", i);
    std::snprintf(aid, sizeof aid, "00000000-0000-4000-9000-%012d", i);
    ASSERT_EQ(::mkdir((sessions + "/" + id).c_str(), 0700), 0);
    std::ofstream(sessions + "/" + id + "/session.json")
        << R"({"id":")" << id << R"(","name":"s)" << i << R"(","cwd":")" << dir.path << R"(","agents":[{"id":")" << aid
        << R"(","name":"main","created":1757000000,"messages":[{"role":"user","content":"hello"}]}]})";
  }
  const std::string sock = dir.path + "/ollie";
  Child srv({built("bin/olliesrv"), "-a", "unix!" + sock}, {"XDG_DATA_HOME=" + dir.path + "/data"});
  ASSERT_TRUE(wait_for(sock)) << srv.err_text();
  auto r = run({built("bin/ollie-9p"), "-a", "unix!" + sock, "read", "session/idx"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), n) << r.out.substr(0, 200);
  ::kill(srv.pid(), SIGTERM);
  ASSERT_TRUE(srv.wait());
}

// olliesrv runs itself again for its heap's huge pages (main.cpp): it still goes by its name, so
// `pgrep olliesrv` and `pkill olliesrv` (which match /proc/<pid>/comm) find it.
TEST_F(Daemon, GoesByItsName) {
  std::ifstream comm("/proc/" + std::to_string(srv->pid()) + "/comm");
  std::string name;
  std::getline(comm, name);
  EXPECT_EQ(name, "olliesrv");
}

TEST(DaemonFlags, TcpNeedsInsecureTcp) {
  auto r = run({built("bin/olliesrv"), "-a", "tcp!127.0.0.1!0"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("olliesrv: tcp!127.0.0.1!0: tcp needs -insecure-tcp\n"), std::string::npos) << r.err;
  auto l = run({built("bin/olliesrv"), "-l", "loud"});
  EXPECT_EQ(l.status, 2);
  EXPECT_EQ(l.err, "olliesrv: unknown log level: loud\n");
}

// A newcomer with no backend configured gets one line saying what to do, naming ollama when one
// answers (§4.3 has no fallback: agent/new without backend= fails); one with a backend does
// not. The server serves either way.
TEST(DaemonFlags, FirstRunWithoutABackendSaysHowToFixIt) {
  testing_support::TempDir dir;
  fakeprovider::Server ollama;  // its models: fake-model
  fakeprovider::Server bare_ollama(nlohmann::json{{"models", nlohmann::json::array()}});
  fakeprovider::Server odd_ollama(nlohmann::json{{"route_faults", {{"tags", "malformed"}}}});  // a list, not {"models": …}
  const std::string addr = "unix!" + dir.path + "/ollie";
  const std::string none = "no model backend: none is configured, so agents cannot be created without backend=. Set one: ";
  const auto named = [&](const fakeprovider::Server& o) {
    return "no model backend: none is configured, so agents cannot be created without backend=. ollama answers at " + o.url() +
           ": set `backend = ollama` in " + dir.path + "/config/ollie/backends.conf (or OLLIE_BACKEND=ollama)";
  };
  // The model an agent would ask for is named only when this ollama has not pulled it.
  const std::string see = "; see doc/backends.md";
  // A default that cannot be used is said at start too, in agent/new's words.
  const std::string unusable = "default backend unusable: ";
  const std::string tail = "; agents cannot be created without another backend=. See doc/backends.md";
  for (const auto& [backend, key, url, want, model] :
       std::vector<std::tuple<std::string, std::string, std::string, std::string, std::string>>{
           {"", "", "http://127.0.0.1:1", none, ""},
           {"", "", ollama.url(), named(ollama) + see, "fake-model"},
           {"", "", ollama.url(),
            named(ollama) + ", and a model it has, e.g. `model = fake-model` in its [ollama] section (qwen3:8b is not pulled there)" + see, ""},
           {"", "", bare_ollama.url(), named(bare_ollama) + "; it has no model yet: `ollama pull qwen3:8b`" + see, ""},
           {"", "", odd_ollama.url(), named(odd_ollama) + see, ""},
           {"openai", "sk-test", "http://127.0.0.1:1", "", ""},
           {"bogus", "", "http://127.0.0.1:1",
            unusable + "unknown backend: bogus (ollama, openai, openrouter, anthropic, copilot, kiro, gemini)" + tail, ""},
           {"openai", "", "http://127.0.0.1:1", unusable + "openai: missing key: set OLLIE_OPENAI_KEY" + tail, ""},
           // A default ollama is a server that must answer, with the model an agent asks for.
           {"ollama", "", "http://127.0.0.1:1", "default backend ollama: nothing answers at http://127.0.0.1:1 (", ""},
           {"ollama", "", ollama.url(),
            "default backend ollama at " + ollama.url() +
                " has not pulled qwen3:8b: `ollama pull qwen3:8b`, or `model = fake-model` in its [ollama] section" + see,
            ""},
           {"ollama", "", ollama.url(), "", "fake-model"}}) {
    Child srv({built("bin/olliesrv"), "-a", addr},
              {"XDG_CONFIG_HOME=" + dir.path + "/config", "XDG_DATA_HOME=" + dir.path + "/data", "OLLIE_OLLAMA_URL=" + url,
               "OLLIE_MODEL=" + model, "OLLIE_BACKEND=" + backend, "OLLIE_OPENAI_KEY=" + key, "OPENAI_API_KEY="});
    ASSERT_TRUE(wait_for(dir.path + "/ollie"));
    // The warning comes once the listener is up (after its probe of ollama): a kill sooner would
    // cut the probe short.
    if (!want.empty()) {
      ASSERT_TRUE(srv.wait_for_err(want.substr(0, 20))) << srv.err_text();
    }
    auto r = run({built("bin/ollie-9p"), "-a", addr, "rdwr", "ctl"}, "kill\n");
    EXPECT_EQ(r.out, "ok\n") << r.err;
    ASSERT_TRUE(srv.wait());
    if (want.empty()) {
      for (const char* said : {"no model backend", "default backend"})
        EXPECT_EQ(srv.err_text().find(said), std::string::npos) << srv.err_text();
    } else {
      EXPECT_NE(srv.err_text().find(want), std::string::npos) << srv.err_text();
    }
    // Nothing installed in this config root: agents would have no tools, and it says so.
    EXPECT_NE(srv.err_text().find("no tools in " + dir.path + "/config/ollie/tools: agents will have none; `./dev.sh install`"),
              std::string::npos)
        << srv.err_text();
  }
}

TEST(DaemonFlags, DefaultAddressIsTheNamespaceService) {
  testing_support::TempDir dir;
  std::string ns = dir.path + "/ns.me";
  Child srv({built("bin/olliesrv")}, {"NAMESPACE=" + ns, "XDG_DATA_HOME=" + dir.path + "/data"});
  ASSERT_TRUE(wait_for(ns + "/ollie")) << srv.err_text();
  struct stat s;
  ASSERT_EQ(::stat(ns.c_str(), &s), 0);
  EXPECT_EQ(s.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat((ns + "/ollie").c_str(), &s), 0);
  EXPECT_EQ(s.st_mode & 0777, 0600u);
  auto r = run({built("bin/ollie-9p"), "ls"}, "", {"NAMESPACE=" + ns, "OLLIE_ADDR="});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "agents\nbackends\nbypass\ncomplete\nctl\nevent\ngenerate\nhelp\nmodels\nsession\ntools\n");
  ::kill(srv.pid(), SIGINT);
  ASSERT_TRUE(srv.wait());
  EXPECT_EQ(srv.result().status, 0);
}

// The event file, with events published inside an in-process olliesrv.
struct Events : ::testing::Test {
  testing_support::TempDir dir;
  std::string addr = "unix!" + dir.path + "/ollie";
  ollie::Olliesrv srv{ollie::Options{{addr}, false, 2}};
  void SetUp() override {
    ::setenv("XDG_DATA_HOME", (dir.path + "/data").c_str(), 1);  // not the user's sessions
    ASSERT_TRUE(srv.start());
  }

  // A subscription starts when the reader opens `event`, which the test cannot see: publish
  // `events` every 50 ms until the reader has printed `want`, then return what it printed.
  std::string publish_until(Child& reader, const std::vector<std::pair<std::string, std::string>>& events,
                            const std::string& want) {
    for (int i = 0; i < 200; i++) {
      for (auto& [topic, payload] : events) srv.bus().publish(topic, payload);
      auto out = reader.read_until(want, 50);
      if (out.find(want) != std::string::npos) return out;
    }
    return reader.read_until(want, 0);
  }
};

TEST_F(Events, ReadDashLFollowsTheStream) {
  Child reader({built("bin/ollie-9p"), "-a", addr, "read", "-l", "event"});
  auto out = publish_until(reader, {{"session.1.new", "session/one"}}, "session.1.new session/one\n");
  EXPECT_EQ(out.rfind("session.1.new session/one\n", 0), 0u) << out;
  srv.bus().publish("agent.2.state", "idle");
  EXPECT_TRUE(reader.read_until("idle\n").ends_with("agent.2.state idle\n"));
}

TEST_F(Events, RdwrSetsTheFilter) {
  Child reader({built("bin/ollie-9p"), "-a", addr, "rdwr", "event"});
  reader.write_stdin("agent.*.state\n");
  reader.close_stdin();
  auto out = publish_until(reader, {{"session.1.new", "session/one"}, {"agent.2.state", "thinking"}},
                           "agent.2.state thinking\n");
  EXPECT_EQ(out.rfind("agent.2.state thinking\n", 0), 0u) << out;
  EXPECT_EQ(out.find("session."), std::string::npos) << out;  // filtered out
}

TEST_F(Events, BadFilterIsTheReadError) {
  auto r = run({built("bin/ollie-9p"), "-a", addr, "rdwr", "event"}, "agent.**\n");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "ollie-9p: event: bad pattern: agent.**\n");
}
