// Identity and permissions (spec §1.5, §1.6, §2, §3.3, §4.2) through the real socket: a real
// olliesrv, its real toolsrv running the agents' tools under Landlock and no_new_privs. A tool of
// one agent cannot act as another, as the hostowner, or without its secret; every node of §2's
// tree answers walk, stat and open as its H/S/A/U columns say, for each principal.
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "olliesrv/identity.hpp"
#include "olliesrv/world.hpp"

using namespace convo;
using json = nlohmann::json;

namespace {

using testing_support::exists;

/// A new connection attached as `uname`, through Tauth with `secret` when one is given.
p9::Result<p9::CFid> attach(World& w, const std::string& uname, const std::optional<std::string>& secret,
                            const std::string& aname = "") {
  auto c = p9::Client::dial("unix!" + w.sock);
  if (!c) return c.error();
  if (!secret) return (*c)->attach(uname, aname);
  auto afid = (*c)->auth(uname);
  if (!afid) return afid.error();
  if (!secret->empty())
    if (auto n = afid->write(*secret); !n) return n.error();
  return (*c)->attach(uname, aname, &*afid);
}

/// A Rdwr request through a principal's root.
p9::Result<std::string> rdwr(const p9::CFid& root, const std::string& path, const std::string& request) {
  auto f = root.walk(path);
  if (!f) return f.error();
  if (auto st = f->open(p9::ORDWR); !st) return st.error();
  if (auto n = f->write(request); !n) return n.error();
  f->seek(0);
  return f->read_all();
}

/// The exec block of `!command` (§3.4), once it is there.
std::string run_bang(World& w, const std::string& agent, const std::string& command) {
  EXPECT_TRUE(w.write(agent + "/prompt", "!" + command));
  std::string out;
  eventually([&] {
    auto raw = w.read(agent + "/log.raw");
    if (!raw) return false;
    std::istringstream in(*raw);
    for (std::string line; std::getline(in, line);) {
      auto b = json::parse(line, nullptr, false);
      if (b.is_object() && b["role"] == "exec" && b["name"] == command) {
        out = b["content"];
        return true;
      }
    }
    return false;
  });
  return out;
}

/// The agent's secret, as its own tool sees it: a `!` command of the agent writes $OLLIE_AUTH
/// into a file of its cwd (`dir`), where the test reads it. Nothing else ever shows it.
std::string secret_of(World& w, const std::string& agent, const std::string& dir) {
  const std::string file = dir + "/.secret-" + agent.substr(agent.rfind('/') + 1);
  run_bang(w, agent, "printf %s \"$OLLIE_AUTH\" > " + file + ".tmp && mv " + file + ".tmp " + file);
  EXPECT_TRUE(eventually([&] { return exists(file); })) << file;
  std::string s = read_file(file);
  std::filesystem::remove(file);
  return s;
}

// ---- the tree of §2, copied from the spec ------------------------------------------------------

/// One node of §2's tree: kind and mode as the tree gives them, its owner (H = the hostowner,
/// S = the agent whose directory it is in), and the H/S/A/U columns of §2's tables. Outside an
/// agent directory the tables have no S column: the agent itself is one of the A agents there.
struct Row {
  const char* path;
  const char* kind;
  unsigned mode;
  char owner;
  const char *h, *s, *a, *u;
};

// clang-format off
const Row tree[] = {
    {"",                                     "dir",             0555, 'H', "r",  "r",  "r",  "r"},
    {"backends",                             "Read",            0444, 'H', "r",  "r",  "r",  "r"},
    {"models",                               "Read",            0444, 'H', "r",  "r",  "r",  "r"},
    {"agents",                               "Read",            0444, 'H', "r",  "r",  "r",  "r"},
    {"tools",                                "Read",            0444, 'H', "r",  "r",  "r",  "r"},
    {"help",                                 "Read",            0444, 'H', "r",  "r",  "r",  "r"},
    {"ctl",                                  "Rdwr",            0600, 'H', "rw", "-",  "-",  "-"},
    {"event",                                "StreamRdwr",      0666, 'H', "rw", "rw", "rw", "rw"},
    {"complete",                             "Rdwr",            0666, 'H', "rw", "rw", "rw", "rw"},
    {"generate",                             "Rdwr",            0666, 'H', "rw", "rw", "rw", "rw"},
    {"bypass",                               "dir",             0700, 'H', "r",  "-",  "-",  "-"},
    {"bypass/policy",                        "Read+Write",      0600, 'H', "rw", "-",  "-",  "-"},
    {"bypass/pending",                       "dir",             0700, 'H', "r",  "-",  "-",  "-"},
    {"bypass/pending/{session}",             "Read+Write",      0600, 'H', "rw", "-",  "-",  "-"},
    {"session",                              "dir",             0555, 'H', "r",  "r",  "r",  "r"},
    {"session/new",                          "Rdwr",            0600, 'H', "rw", "-",  "-",  "-"},
    {"session/idx",                          "Read",            0444, 'H', "r",  "r",  "r",  "r"},
    {"session/{session}",                    "dir",             0555, 'H', "r",  "r",  "r",  "r"},
    {"session/{session}/id",                 "Read",            0444, 'H', "r",  "r",  "r",  "r"},
    {"session/{session}/name",               "Read+Write",      0644, 'H', "rw", "r",  "r",  "r"},
    {"session/{session}/ctl",                "Rdwr",            0600, 'H', "rw", "-",  "-",  "-"},
    {"session/{session}/env",                "Read+Write",      0600, 'H', "rw", "-",  "-",  "-"},
    {"session/{session}/goal",               "Read+Write",      0644, 'H', "rw", "r",  "r",  "r"},
    {"session/{session}/bypass",             "Read+Write",      0600, 'H', "rw", "-",  "-",  "-"},
    {"session/{session}/agent",              "dir",             0555, 'H', "r",  "r",  "r",  "r"},
    {"session/{session}/agent/new",          "Rdwr",            0666, 'H', "rw", "rw", "rw", "rw"},
    {"session/{session}/agent/idx",          "Read",            0444, 'H', "r",  "r",  "r",  "r"},
    {"session/{session}/agent/{agent}",      "dir",             0555, 'H', "r",  "r",  "r",  "r"},
    {"session/{session}/agent/{agent}/id",        "Read",            0444, 'H', "r",  "r",  "r",  "r"},
    {"session/{session}/agent/{agent}/name",      "Read+Write",      0644, 'H', "rw", "r",  "r",  "r"},
    {"session/{session}/agent/{agent}/ctl",       "Rdwr",            0600, 'S', "rw", "rw", "-",  "-"},
    {"session/{session}/agent/{agent}/cfg",       "Read+Write",      0644, 'H', "rw", "r",  "r",  "r"},
    {"session/{session}/agent/{agent}/prompt",    "Write",           0200, 'H', "w",  "-",  "-",  "-"},
    {"session/{session}/agent/{agent}/fifo",      "Read+Write",      0600, 'H', "rw", "-",  "-",  "-"},
    {"session/{session}/agent/{agent}/feed",      "Write+BlockOnce", 0600, 'H', "rw", "-",  "-",  "-"},
    {"session/{session}/agent/{agent}/statewait", "BlockOnce",       0444, 'H', "r",  "r",  "r",  "r"},
    {"session/{session}/agent/{agent}/stats",     "Read",            0444, 'H', "r",  "r",  "r",  "r"},
    {"session/{session}/agent/{agent}/chat",      "Stream",          0440, 'H', "r",  "r",  "r",  "-"},
    {"session/{session}/agent/{agent}/chat.raw",  "Stream",          0440, 'H', "r",  "r",  "r",  "-"},
    {"session/{session}/agent/{agent}/log",       "Read",            0440, 'H', "r",  "r",  "r",  "-"},
    {"session/{session}/agent/{agent}/log.raw",   "Read",            0440, 'H', "r",  "r",  "r",  "-"},
    {"session/{session}/agent/{agent}/block",     "Rdwr",            0660, 'H', "rw", "rw", "rw", "-"},
    {"session/{session}/agent/{agent}/plan",      "Read+Write",      0640, 'S', "rw", "rw", "r",  "-"},
    {"session/{session}/agent/{agent}/peer",      "dir",             0500, 'S', "r",  "r",  "-",  "-"},
    {"session/{session}/agent/{agent}/peer/{peer}",      "Write",    0200, 'S', "w",  "w",  "-",  "-"},
    {"session/{session}/agent/{agent}/proc",             "dir",      0500, 'S', "r",  "r",  "-",  "-"},
    {"session/{session}/agent/{agent}/proc/{pid}",       "dir",      0500, 'S', "r",  "r",  "-",  "-"},
    {"session/{session}/agent/{agent}/proc/{pid}/out",   "Stream",   0400, 'S', "r",  "r",  "-",  "-"},
    {"session/{session}/agent/{agent}/proc/{pid}/wait",  "Stream",   0400, 'S', "r",  "r",  "-",  "-"},
    {"session/{session}/agent/{agent}/proc/{pid}/stat",  "Read",     0400, 'S', "r",  "r",  "-",  "-"},
    {"session/{session}/agent/{agent}/proc/{pid}/ctl",   "Write",    0200, 'S', "w",  "w",  "-",  "-"},
};
// clang-format on

/// Who walks: the column that applies, and the names the templates take.
struct Walker {
  std::string label;
  char column;  // 'H', 'S', 'A', 'U', or 's' for a sub-agent in its own directory
  p9::CFid root;
  std::map<std::string, std::string> names;  // {session}, {agent}, {peer}, {pid}
  std::string owner_id;                       // the uid of S-owned nodes: the {agent}'s id
};

std::string column(const Row& r, char c) {
  switch (c) {
    case 'H': return r.h;
    case 'S': return r.s;
    case 'A': return r.a;
    case 'U': return r.u;
    default: return r.owner == 'S' ? r.s : r.u;  // ‡: a sub-agent gets the owner bits only of what it owns
  }
}

std::vector<std::string> path_elements(const std::string& path) {
  std::vector<std::string> out;
  std::istringstream in(path);
  for (std::string e; std::getline(in, e, '/');)
    if (!e.empty()) out.push_back(e);
  return out;
}

std::string fill(std::string path, const std::map<std::string, std::string>& names) {
  for (const auto& [k, v] : names)
    for (auto at = path.find(k); at != std::string::npos; at = path.find(k)) path.replace(at, k.size(), v);
  return path;
}

/// Walks one element at a time, so that a refusal answers its own error (a partial walk of
/// several names only says where it stopped).
p9::Result<p9::CFid> reach(const p9::CFid& root, const std::vector<std::string>& elems) {
  auto f = root.walk("");
  if (!f) return f.error();
  for (const auto& e : elems) {
    auto next = f->walk(e);
    if (!next) return next.error();
    f = std::move(next);
  }
  return f;
}

/// Every difference between what the node answers the walker and what the spec says.
std::vector<std::string> check_tree(Walker& who, const std::string& hostowner, const std::set<std::string>& skip = {}) {
  std::map<std::string, const Row*> by_path;
  for (const auto& r : tree) by_path[r.path] = &r;
  std::vector<std::string> findings;
  for (const auto& r : tree) {
    if (skip.count(r.path)) continue;
    const std::string path = fill(r.path, who.names);
    auto note = [&](const std::string& what) { findings.push_back(who.label + " " + (path.empty() ? "/" : path) + ": " + what); };
    if (path.find('{') != std::string::npos) {
      note("no instance to walk to");
      continue;
    }
    // Reachable when every directory above it has x (= r here) for the walker.
    bool reachable = true;
    std::string above;
    for (const auto& e : path_elements(r.path)) {
      const Row* d = by_path[above];
      if (d && column(*d, who.column).find('r') == std::string::npos) reachable = false;
      above += (above.empty() ? "" : "/") + e;
    }
    const std::string want = column(r, who.column);
    const bool dir = std::string(r.kind) == "dir";
    auto f = reach(who.root, path_elements(path));
    if (!f) {
      if (f.ename().find("file not found") != std::string::npos) note("missing (" + f.ename() + ")");
      else if (reachable) note("walk refused: " + f.ename());
      else if (f.ename() != "permission denied") note("walk: " + f.ename() + ", want permission denied");
      continue;
    }
    if (!reachable) {
      note("walk allowed, want permission denied");
      continue;
    }
    auto st = f->stat();
    if (!st) {
      note("stat: " + st.ename());
    } else {
      const std::uint32_t mode = (dir ? p9::DMDIR : 0) | r.mode;
      const std::string uid = r.owner == 'S' ? who.owner_id : hostowner;
      std::ostringstream got, exp;
      got << std::oct << st->mode << " " << st->uid << " " << st->gid;
      exp << std::oct << mode << " " << uid << " agent";
      if (got.str() != exp.str()) note("stat mode uid gid " + got.str() + ", want " + exp.str());
    }
    std::vector<std::pair<std::uint8_t, char>> opens = {{p9::OREAD, 'r'}};
    if (!dir) opens.emplace_back(p9::OWRITE, 'w');
    for (const auto& [mode, bit] : opens) {
      auto g = reach(who.root, path_elements(path));
      if (!g) {
        note(std::string("walk again: ") + g.ename());
        continue;
      }
      auto o = g->open(mode);
      const bool allowed = want.find(bit) != std::string::npos;
      const std::string how = mode == p9::OREAD ? "OREAD" : "OWRITE";
      if (allowed && !o) note(how + " refused (" + o.ename() + "), want allowed");
      if (!allowed && o) note(how + " allowed, want permission denied");
      if (!allowed && !o && o.ename() != "permission denied") note(how + ": " + o.ename() + ", want permission denied");
    }
  }
  return findings;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += s + "\n";
  return out;
}

}  // namespace

// ---- attach (§1.5) -------------------------------------------------------------------------------

TEST(Permissions, AToolOfOneAgentCannotActAsAnotherAsTheHostownerOrWithoutItsSecret) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "alpha");
  auto b = w.agent(s, "beta");
  w.session("other");
  const std::string bid = id_of(w, b), login = World::login();
  // Each line: a label, then what ollie-9p answered (its error on stderr) from alpha's shell tool.
  const std::string script =
      "try() { l=$1; shift; printf '%s: %s\\n' \"$l\" \"$(\"$@\" 2>&1 | tr '\\n' ' ')\"; }; "
      "try self ollie-9p read session/work/agent/alpha/id; "
      "try ctl-b sh -c 'echo stop | ollie-9p write session/work/agent/beta/ctl'; "
      "try prompt-b sh -c 'echo hi | ollie-9p write session/work/agent/beta/prompt'; "
      "try plan-b sh -c 'echo x | ollie-9p write session/work/agent/beta/plan'; "
      "try as-b env OLLIE_UNAME=" + bid + " ollie-9p read session/work/agent/beta/id; "
      "try no-secret env -u OLLIE_AUTH ollie-9p read session/work/agent/alpha/id; "
      "try empty-secret env OLLIE_AUTH= ollie-9p read session/work/agent/alpha/id; "
      "try as-host env OLLIE_UNAME=" + login + " ollie-9p read session/idx; "
      "try default-user env -u OLLIE_UNAME -u OLLIE_AUTH ollie-9p read session/idx; "
      "try session-new sh -c 'echo cwd=/ | ollie-9p rdwr session/new'; "
      "try other-session sh -c 'echo name=x | ollie-9p rdwr session/other/agent/new'; "
      "true";
  const std::string out = run_bang(w, a, script);
  auto line = [&](const std::string& label) {
    const auto at = out.find(label + ": ");
    return at == std::string::npos ? std::string("(no line)") : out.substr(at, out.find('\n', at) - at);
  };
  EXPECT_EQ(line("self"), "self: " + id_of(w, a) + " ") << out;
  EXPECT_NE(line("ctl-b").find("permission denied"), std::string::npos) << out;
  EXPECT_NE(line("prompt-b").find("permission denied"), std::string::npos) << out;
  EXPECT_NE(line("plan-b").find("permission denied"), std::string::npos) << out;
  EXPECT_NE(line("as-b").find("authentication failed"), std::string::npos) << out;
  EXPECT_NE(line("no-secret").find("authentication failed"), std::string::npos) << out;
  EXPECT_NE(line("empty-secret").find("authentication failed"), std::string::npos) << out;
  EXPECT_NE(line("as-host").find("permission denied: sandboxed clients attach as their agent"), std::string::npos) << out;
  EXPECT_NE(line("default-user").find("permission denied: sandboxed clients attach as their agent"), std::string::npos) << out;
  EXPECT_NE(line("session-new").find("permission denied"), std::string::npos) << out;
  EXPECT_NE(line("other-session").find("permission denied: agent/new of another session"), std::string::npos) << out;
  // Nothing reached beta: no prompt, no stop.
  auto idx = w.read(s + "/agent/idx");
  ASSERT_TRUE(idx);
  EXPECT_NE(idx->find("beta\t" + bid + "\tidle"), std::string::npos) << *idx;
  auto raw = w.read(b + "/log.raw");
  ASSERT_TRUE(raw);
  EXPECT_EQ(raw->find("\"hi"), std::string::npos) << *raw;
}

TEST(Permissions, ARawClientMustPresentTheAgentsOwnSecret) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "alpha");
  auto b = w.agent(s, "beta");
  const std::string aid = id_of(w, a), bid = id_of(w, b);
  const std::string secret = secret_of(w, a, w.project);
  ASSERT_EQ(secret.size(), 64u);
  EXPECT_EQ(secret.find_first_not_of("0123456789abcdef"), std::string::npos) << secret;
  const std::string wrong(64, '0');

  EXPECT_EQ(attach(w, aid, wrong).ename(), "authentication failed");
  EXPECT_EQ(attach(w, aid, std::string()).ename(), "authentication failed");
  EXPECT_EQ(attach(w, aid, secret.substr(0, 63)).ename(), "authentication failed");
  EXPECT_EQ(attach(w, aid, std::nullopt).ename(), "authentication required");
  EXPECT_EQ(attach(w, bid, secret).ename(), "authentication failed");  // alpha's secret is not beta's
  EXPECT_EQ(attach(w, "nobody-here", std::nullopt).ename(), "unknown user: nobody-here");
  EXPECT_EQ(attach(w, aid, secret, "tree").ename(), "no such tree: tree");
  {
    auto c = p9::Client::dial("unix!" + w.sock);
    ASSERT_TRUE(c);
    EXPECT_EQ((*c)->auth("nobody-here").ename(), "unknown user: nobody-here");
    EXPECT_EQ((*c)->auth(World::login()).ename(), "authentication not required");
    // An afid made for alpha, holding alpha's secret, does not let the connection attach as beta.
    auto afid = (*c)->auth(aid);
    ASSERT_TRUE(afid);
    ASSERT_TRUE(afid->write(secret));
    EXPECT_EQ((*c)->attach(bid, "", &*afid).ename(), "authentication failed");
    auto root = (*c)->attach(aid, "", &*afid);
    ASSERT_TRUE(root) << root.ename();
    // One connection, two principals: the hostowner's attach keeps its own powers (intro(5)).
    auto host = (*c)->attach(World::login());
    ASSERT_TRUE(host) << host.ename();
    EXPECT_EQ(rdwr(*root, "session/work/agent/beta/ctl", "stop").ename(), "permission denied");
    EXPECT_TRUE(rdwr(*host, "session/work/agent/beta/ctl", "stop"));
  }
  // With the secret and a trailing newline (echo $OLLIE_AUTH > afid), the agent is itself.
  auto root = attach(w, aid, secret + "\n");
  ASSERT_TRUE(root) << root.ename();
  auto tools = rdwr(*root, "session/work/agent/alpha/ctl", "tools");
  EXPECT_TRUE(tools) << tools.ename();

  // The secrets are in no log, and a killed agent's secret attaches no more.
  const std::string log = w.log_text();
  EXPECT_NE(log.find("authentication failed"), std::string::npos);
  EXPECT_EQ(log.find(secret), std::string::npos);
  EXPECT_EQ(log.find(wrong), std::string::npos);
  // Failed attaches are logged once a second at most, with the count of those not logged: a tool
  // trying secret after secret wrote 40,000 lines in 7 s.
  const auto lines_said = [&] {
    const std::string text = w.log_text();
    std::size_t n = 0;
    for (std::size_t p = 0; (p = text.find("authentication failed", p)) != std::string::npos; p++) n++;
    return n;
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  const std::size_t said = lines_said();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; i++) EXPECT_EQ(attach(w, aid, wrong).ename(), "authentication failed");
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LE(lines_said(), said + 2 + static_cast<std::size_t>(seconds)) << w.log_text();
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_EQ(attach(w, aid, wrong).ename(), "authentication failed");
  EXPECT_NE(w.log_text().find("more failed attaches not logged)"), std::string::npos) << w.log_text();
  auto beta = attach(w, bid, secret_of(w, b, w.project));
  ASSERT_TRUE(beta) << beta.ename();
  EXPECT_TRUE(rdwr(*beta, "session/work/agent/beta/ctl", "tools"));
  ASSERT_TRUE(w.rdwr(b + "/ctl", "kill"));
  EXPECT_EQ(attach(w, bid, std::nullopt).ename(), "unknown user: " + bid);
  // Nor does an attach made before the kill act for it (a process that outlived its agent).
  EXPECT_EQ(rdwr(*beta, "session/work/agent/new", "name=gamma").ename(), "agent killed");
  EXPECT_EQ(rdwr(*beta, "generate", "hi").ename(), "agent killed");

  // A restored agent gets a fresh secret (§7.7): the old one fails after a restart.
  w.stop_server(SIGTERM);
  w.start();
  EXPECT_EQ(attach(w, aid, secret).ename(), "authentication failed");
  const std::string fresh = secret_of(w, a, w.project);
  EXPECT_EQ(fresh.size(), 64u);
  EXPECT_NE(fresh, secret);
  EXPECT_TRUE(attach(w, aid, fresh));
  for (const auto& e : std::filesystem::recursive_directory_iterator(w.data)) {
    if (!e.is_regular_file()) continue;
    const std::string text = read_file(e.path());
    EXPECT_EQ(text.find(secret), std::string::npos) << e.path();
    EXPECT_EQ(text.find(fresh), std::string::npos) << e.path();
  }
}

// A connection keeps the identity of the process that made it: one made under no_new_privs and
// handed to a process without it still cannot attach as the hostowner.
TEST(Permissions, AConnectionMadeUnderNoNewPrivsStaysRefusedWhenHandedOn) {
  World w;
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  ASSERT_LT(w.sock.size(), sizeof sa.sun_path);
  std::memcpy(sa.sun_path, w.sock.c_str(), w.sock.size() + 1);
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  const pid_t child = ::fork();  // the child makes only async-signal-safe calls
  if (child == 0) {
    ::close(pair[0]);
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ::_exit(2);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) ::_exit(3);
    char byte = 0;
    iovec iov{&byte, 1};
    alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    cmsghdr* cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    ::_exit(::sendmsg(pair[1], &m, 0) == 1 ? 0 : 4);
  }
  ::close(pair[1]);
  char byte;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctl;
  m.msg_controllen = sizeof ctl;
  ASSERT_EQ(::recvmsg(pair[0], &m, MSG_CMSG_CLOEXEC), 1);
  ::close(pair[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_EQ(WEXITSTATUS(status), 0);  // the process that connected is gone too
  int fd;
  std::memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof fd);
  auto c = p9::Client::from_fd(fd);
  ASSERT_TRUE(c);
  EXPECT_EQ((*c)->attach(World::login()).ename(), "permission denied: sandboxed clients attach as their agent");
  // The test process itself, without no_new_privs, is the hostowner.
  EXPECT_TRUE(attach(w, World::login(), std::nullopt));
}

// ---- the self allow-list of §3.3 -------------------------------------------------------------------

TEST(Permissions, SelfMayUseOnlyTheVerbsOfTheSelfColumn) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "alpha");
  w.agent(s, "beta");
  auto root = attach(w, id_of(w, a), secret_of(w, a, w.project));
  ASSERT_TRUE(root) << root.ename();
  // §3.3: each verb with the request self sends; allowed = not `permission denied`.
  struct Case {
    const char* request;
    bool allowed;
  };
  const Case cases[] = {
      {"stop", false},           {"compact", false},         {"clear", false},
      {"inject hello", false},   {"agent", true},            {"agent default", false},
      {"model", true},           {"model other", false},     {"models", true},
      {"backend", true},         {"backend openai", false},  {"tools", true},
      {"tool_load file_read", true}, {"cwd", true},          {"cwd /", false},
      {"cwd -", false},          {"name", true},             {"name renamed", false},
      {"systemprompt", true},    {"peeradd beta", false},    {"peerdel beta", false},
      {"kill", false},           {"frobnicate", false},  // anything else: refused, not named
  };
  std::vector<std::string> findings;
  for (const auto& c : cases) {
    auto r = rdwr(*root, "session/work/agent/alpha/ctl", c.request);
    const std::string got = r ? "ok" : r.ename();
    if (c.allowed && got == "permission denied") findings.push_back(std::string(c.request) + ": permission denied, want allowed");
    if (c.allowed && got.rfind("unknown command", 0) == 0) findings.push_back(std::string(c.request) + ": " + got);
    if (!c.allowed && got != "permission denied") findings.push_back(std::string(c.request) + ": " + got + ", want permission denied");
  }
  EXPECT_TRUE(findings.empty()) << joined(findings);
  // Nothing self was refused took effect: alpha lives, under its name, and beta is no peer.
  EXPECT_TRUE(w.read(s + "/agent/alpha/id"));
  auto idx = w.read(s + "/agent/idx");
  ASSERT_TRUE(idx);
  EXPECT_EQ(idx->find("renamed"), std::string::npos) << *idx;
}

// ---- containment of agent/new (§4.2) ---------------------------------------------------------------

TEST(Permissions, AnAgentCreatesAgentsOnlyInItsSessionAsParentOfItselfAndBelowItsCwd) {
  World w;
  const std::string inner = w.project + "/inner";
  std::filesystem::create_directories(inner + "/deep");
  std::filesystem::create_directory_symlink(w.project, inner + "/up");
  std::filesystem::create_directory_symlink(inner + "/deep", inner + "/down");
  std::filesystem::create_directories(inner + "/t\tab");  // a tool can make such a directory,
  std::filesystem::create_directory_symlink(inner + "/t\tab", inner + "/clean");  // and name it cleanly
  auto s = w.session("work");
  auto a = w.agent(s, "alpha", "cwd=" + inner);
  w.agent(s, "beta");
  w.session("other");
  auto root = attach(w, id_of(w, a), secret_of(w, a, inner));
  ASSERT_TRUE(root) << root.ename();
  const std::string denied_cwd = "permission denied: cwd outside " + inner;

  EXPECT_EQ(rdwr(*root, "session/other/agent/new", "name=x").ename(), "permission denied: agent/new of another session");
  EXPECT_EQ(rdwr(*root, "session/work/agent/new", "name=x parent=beta").ename(), "permission denied: parent must be the caller");
  EXPECT_EQ(rdwr(*root, "session/work/agent/new", "name=x cwd=" + w.project).ename(), denied_cwd);
  EXPECT_EQ(rdwr(*root, "session/work/agent/new", "name=x cwd=/").ename(), denied_cwd);
  EXPECT_EQ(rdwr(*root, "session/work/agent/new", "name=x cwd=" + inner + "/..").ename(), denied_cwd);
  EXPECT_EQ(rdwr(*root, "session/work/agent/new", "name=x cwd=" + inner + "/up").ename(), denied_cwd);
  EXPECT_EQ(rdwr(*root, "session/work/agent/new", "name=x cwd=" + inner + "/up/inner/../..").ename(), denied_cwd);
  EXPECT_EQ(rdwr(*root, "session/work/agent/new", "name=x cwd=" + w.project + "/inner/up").ename(), denied_cwd);
  EXPECT_EQ(rdwr(*root, "session/new", "name=x cwd=/").ename(), "permission denied");
  // Kept resolved, so checked resolved: agent/idx would get a column more, and the restore skip the session.
  EXPECT_EQ(rdwr(*root, "session/work/agent/new", "name=x cwd=" + inner + "/clean").ename(), "cwd: invalid character");
  EXPECT_EQ(w.read(s + "/agent/x/id").ename(), "x: file not found");  // nothing was created

  // Allowed: no cwd (the caller's), its own cwd, below it, and through a symlink that stays inside
  // (kept resolved, so that changing the link later does not move the agent).
  EXPECT_TRUE(rdwr(*root, "session/work/agent/new", "name=c1"));
  EXPECT_TRUE(rdwr(*root, "session/work/agent/new", "name=c2 cwd=" + inner));
  EXPECT_TRUE(rdwr(*root, "session/work/agent/new", "name=c3 cwd=" + inner + "/deep/../deep"));
  EXPECT_TRUE(rdwr(*root, "session/work/agent/new", "name=c4 cwd=" + inner + "/down"));
  auto parent_self = rdwr(*root, "session/work/agent/new", "name=c5 parent=alpha");
  EXPECT_TRUE(parent_self) << parent_self.ename();
  auto idx = w.read(s + "/agent/idx");
  ASSERT_TRUE(idx);
  auto cwd_of = [&](const std::string& name) {
    std::istringstream in(*idx);
    for (std::string line; std::getline(in, line);) {
      std::vector<std::string> f;
      std::istringstream fields(line);
      for (std::string x; std::getline(fields, x, '\t');) f.push_back(x);
      if (f.size() >= 7 && f[0] == name) return f[6];
    }
    return std::string("(none)");
  };
  EXPECT_EQ(cwd_of("c1"), inner) << *idx;
  EXPECT_EQ(cwd_of("c2"), inner) << *idx;
  EXPECT_EQ(cwd_of("c3"), inner + "/deep") << *idx;
  EXPECT_EQ(cwd_of("c4"), inner + "/deep") << *idx;
  EXPECT_EQ(cwd_of("c5"), inner) << *idx;
  auto cfg = w.read(s + "/agent/c1/cfg");
  ASSERT_TRUE(cfg);
  EXPECT_NE(cfg->find("cwd=" + inner + "\n"), std::string::npos) << *cfg;  // copied into the override
  // The hostowner is not contained.
  EXPECT_TRUE(w.rdwr(s + "/agent/new", "name=h1 cwd=/"));
}

// A tool holding every place its agent has among the session's proc streams (a read of one
// byte on each of 300 `out` fids, none read to its end) leaves the hostowner's places free.
TEST(Permissions, AnAgentHoldingProcStreamsLeavesTheHostownerReading) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "alpha");
  const std::string secret = secret_of(w, a, w.project);
  w.fake.push({{"tool_calls", json::array({{{"id", "c1"}, {"name", "shell"},
                                            {"arguments", {{"cmd", "printf x; sleep 60"}, {"background", true}}}}})}});
  w.fake.push({{"text", "started"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  ASSERT_TRUE(eventually([&] { return contents(w, a, "assistant").size() == 1; }));
  auto listed = w.open(a + "/proc").dirread_all();
  ASSERT_TRUE(listed && listed->size() == 1u);
  const std::string out = a + "/proc/" + listed->front().name + "/out";
  std::mutex mu;
  std::condition_variable cv;
  int answered = 0;
  std::string owners;
  // Reads of one byte, answered or not (the test's end hangs the connections up).
  const auto read_one = [&](p9::Client& c, const p9::CFid& f, bool owner) {
    p9::Fcall t;
    t.type = p9::Tread;
    t.fid = f.num();
    t.count = 1;
    c.start(t, [&, owner](p9::Result<p9::Fcall> r) {
      std::lock_guard lock(mu);
      if (owner) owners += r ? r->data : "error: " + r.ename();
      else answered++;
      cv.notify_all();
    });
  };
  auto tool = p9::Client::dial("unix!" + w.sock);
  ASSERT_TRUE(tool);
  auto afid = (*tool)->auth(id_of(w, a));
  ASSERT_TRUE(afid && afid->write(secret));
  auto root = (*tool)->attach(id_of(w, a), "", &*afid);
  ASSERT_TRUE(root) << root.ename();
  std::vector<p9::CFid> held;
  for (int i = 0; i < 300; i++) {
    auto f = root->walk(out);
    ASSERT_TRUE(f && f->open(p9::OREAD));
    read_one(**tool, *f, false);
    held.push_back(std::move(*f));
  }
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 20s, [&] { return answered >= 100; })) << answered;
  }
  auto host = p9::Client::dial("unix!" + w.sock);
  ASSERT_TRUE(host);
  auto hroot = (*host)->attach(World::login());
  ASSERT_TRUE(hroot) << hroot.ename();
  auto mine = hroot->walk(out);
  ASSERT_TRUE(mine && mine->open(p9::OREAD));
  read_one(**host, *mine, true);
  std::unique_lock lock(mu);
  EXPECT_TRUE(cv.wait_for(lock, 10s, [&] { return !owners.empty(); })) << answered << " of the tool's reads answered";
  EXPECT_EQ(owners, "x");
}

// ---- every node of §2 as each principal --------------------------------------------------------------

struct PermissionsTree : ::testing::Test {
  World w;
  std::string s, a, b, aid, bid, pid;

  void SetUp() override {
    s = w.session("work");
    a = w.agent(s, "alpha");
    b = w.agent(s, "beta");
    aid = id_of(w, a);
    bid = id_of(w, b);
    (void)w.rdwr(a + "/ctl", "peeradd beta");  // peer/{peer}; a finding below when it fails
    // proc/{pid}: a background process of alpha, started by its model.
    w.fake.push({{"tool_calls", json::array({{{"id", "c1"},
                                               {"name", "shell"},
                                               {"arguments", {{"cmd", "sleep 300"}, {"background", true}}}}})}});
    w.fake.push({{"text", "started"}});
    EXPECT_TRUE(w.write(a + "/prompt", "start it"));
    EXPECT_TRUE(eventually([&] {
      auto raw = w.read(a + "/log.raw");
      return raw && raw->find("started\"") != std::string::npos;
    }));
    EXPECT_TRUE(w.wait_state(a, "idle"));
    auto host = attach(w, World::login(), std::nullopt);
    ASSERT_TRUE(host) << host.ename();
    if (auto f = host->walk(a + "/proc"); f && f->open(p9::OREAD))
      if (auto ds = f->dirread_all(); ds && !ds->empty()) pid = (*ds)[0].name;
  }

  Walker walker(const std::string& label, char column, p9::CFid root, const std::string& agent, const std::string& owner) {
    Walker w{label, column, std::move(root), {{"{session}", "work"}, {"{agent}", agent}, {"{peer}", "beta"}}, owner};
    if (!pid.empty()) w.names["{pid}"] = pid;
    return w;
  }
};

TEST_F(PermissionsTree, AsTheHostowner) {
  auto root = attach(w, World::login(), std::nullopt);
  ASSERT_TRUE(root) << root.ename();
  auto who = walker("H", 'H', std::move(*root), "alpha", aid);
  auto findings = check_tree(who, World::login());
  EXPECT_TRUE(findings.empty()) << joined(findings);
}

TEST_F(PermissionsTree, AsTheAgentItself) {
  auto root = attach(w, aid, secret_of(w, a, w.project));
  ASSERT_TRUE(root) << root.ename();
  auto who = walker("S", 'S', std::move(*root), "alpha", aid);
  auto findings = check_tree(who, World::login());
  EXPECT_TRUE(findings.empty()) << joined(findings);
}

TEST_F(PermissionsTree, AsAnotherPersistentAgent) {
  auto root = attach(w, bid, secret_of(w, b, w.project));
  ASSERT_TRUE(root) << root.ename();
  auto who = walker("A", 'A', std::move(*root), "alpha", aid);
  auto findings = check_tree(who, World::login());
  EXPECT_TRUE(findings.empty()) << joined(findings);
}

// A sub-agent (group subagent) gets the other bits of everything it does not own: of alpha's
// directory (column U) and of the ‡ files of its own.
TEST_F(PermissionsTree, AsASubAgent) {
  const std::string file = w.project + "/.secret-sub", uname = w.project + "/.uname-sub";
  const std::string cmd = "printf %s \"$OLLIE_UNAME\" > " + uname + " && printf %s \"$OLLIE_AUTH\" > " + file +
                          ".tmp && mv " + file + ".tmp " + file + "; i=0; while [ -e " + file +
                          " ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done";
  w.fake.push({{"tool_calls", json::array({{{"id", "s1"}, {"name", "shell"}, {"arguments", {{"cmd", cmd}}}}})}});
  w.fake.push({{"text", "sub done"}});
  p9::Result<std::string> reply = p9::error("not run");
  std::atomic<bool> answered = false;
  std::thread run([&] {
    auto host = attach(w, World::login(), std::nullopt);
    if (host) reply = rdwr(*host, "session/work/agent/new", "name=sub prompt=wait for the test");
    answered = true;
  });
  const bool ready = eventually([&] { return exists(file) || answered; }, 15s) && exists(file);
  if (!ready) {
    run.join();
    FAIL() << "no sub-agent principal: agent/new prompt= answered " << (reply ? *reply : reply.ename());
  }
  const std::string secret = read_file(file), sid = read_file(uname);
  auto root_u = attach(w, sid, secret);
  auto root_s = attach(w, sid, secret);
  std::vector<std::string> findings;
  if (root_u && root_s) {
    auto u = walker("U", 'U', std::move(*root_u), "alpha", aid);
    findings = check_tree(u, World::login());
    // In its own directory: sub-agents have no peers and this one no background process.
    auto own = walker("S(sub-agent)", 's', std::move(*root_s), "sub", sid);
    const std::set<std::string> none = {"session/{session}/agent/{agent}/peer/{peer}",
                                        "session/{session}/agent/{agent}/proc/{pid}",
                                        "session/{session}/agent/{agent}/proc/{pid}/out",
                                        "session/{session}/agent/{agent}/proc/{pid}/wait",
                                        "session/{session}/agent/{agent}/proc/{pid}/stat",
                                        "session/{session}/agent/{agent}/proc/{pid}/ctl"};
    for (auto& f : check_tree(own, World::login(), none)) findings.push_back(f);
  } else {
    findings.push_back("attach as the sub-agent: " + (root_u ? root_s.ename() : root_u.ename()));
  }
  std::filesystem::remove(file);
  run.join();
  EXPECT_TRUE(findings.empty()) << joined(findings);
  EXPECT_TRUE(reply) << reply.ename();
  if (reply) {
    EXPECT_EQ(*reply, "sub done");
  }
}

// §1.5, §6.11: a connection through a remote session's forwarded socket may attach only as an
// agent of that session, and its Tauth says no more: another session's agent, the hostowner, or
// anyone once that session is gone, is an unknown user.
TEST(Identity, TauthOnAForwardedSocketKnowsOnlyThatSessionsAgents) {
  ollie::Identity id("me", true);
  id.agent_key = [](const std::string& u) -> std::optional<ollie::Identity::AgentKey> {
    if (u == "a1") return ollie::Identity::AgentKey{"s", "agent", "S1"};
    if (u == "a2") return ollie::Identity::AgentKey{"s", "agent", "S2"};
    return std::nullopt;
  };
  id.forwarded_session = [](std::uint64_t tag) { return tag == 7 ? std::string("S1") : std::string(); };
  p9::Peer local, forwarded, stale;
  forwarded.listener = 7;
  stale.listener = 8;
  EXPECT_EQ(id.auth("me", "", local).ename(), "authentication not required");
  EXPECT_TRUE(id.auth("a2", "", local).ok());
  EXPECT_TRUE(id.auth("a1", "", forwarded).ok());
  EXPECT_EQ(id.auth("a2", "", forwarded).ename(), "unknown user: a2");
  EXPECT_EQ(id.auth("me", "", forwarded).ename(), "unknown user: me");
  EXPECT_EQ(id.auth("a1", "", stale).ename(), "unknown user: a1");
  EXPECT_EQ(id.auth("nobody", "", local).ename(), "unknown user: nobody");
}
