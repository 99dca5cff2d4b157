// The root files (spec §2.1, §2.2, §3.1) through the real socket: backends, models, agents, tools,
// help, ctl, complete and generate, with the fake provider answering as an openai backend.

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <filesystem>
#include <future>
#include <regex>
#include <set>

#include "lib9p/utf8.hpp"
#include "world.hpp"

using namespace convo;
using json = nlohmann::json;

namespace {

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto end = text.find(sep, pos);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

std::vector<fakeprovider::Recorded> requests_to(World& w, const std::string& path_part) {
  std::vector<fakeprovider::Recorded> out;
  for (auto& r : w.fake.requests())
    if (r.path.find(path_part) != std::string::npos) out.push_back(r);
  return out;
}


/// The body of the last chat request the fake provider received.
json last_chat(World& w) {
  auto chats = requests_to(w, "/chat/completions");
  return chats.empty() ? json() : json::parse(chats.back().body);
}

std::string user_text(const json& body) {
  std::string out;
  for (const auto& m : body["messages"])
    if (m["role"] == "user") out = m["content"];
  return out;
}

std::string system_text(const json& body) {
  for (const auto& m : body["messages"])
    if (m["role"] == "system") return m["content"];
  return "";
}

void replace_with_dir(const std::string& link) {
  std::filesystem::remove(link);
  std::filesystem::create_directories(link);
}

/// An HTTP endpoint that holds the first request it gets until answer(): a fetch that is still
/// running while other readers arrive. Counts connections.
class HeldEndpoint {
 public:
  HeldEndpoint() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0)
      throw std::runtime_error("listen");
    socklen_t n = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &n);
    port_ = ntohs(a.sin_port);
  }
  ~HeldEndpoint() {
    for (int c : conns_) ::close(c);
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  /// Waits (at most 20 s) for a connection and its request head; false when none came.
  bool accept_request() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 20000) != 1) return false;
    const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return false;
    conns_.push_back(c);
    std::string head;
    char buf[4096];
    while (head.find("\r\n\r\n") == std::string::npos) {
      const auto got = ::read(c, buf, sizeof buf);
      if (got <= 0) return false;
      head.append(buf, static_cast<std::size_t>(got));
    }
    return true;
  }
  void answer(const std::string& body) {
    const std::string r = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    (void)!::write(conns_.back(), r.data(), r.size());
  }
  /// Connections accepted or waiting to be.
  std::size_t connections() const {
    pollfd p{fd_, POLLIN, 0};
    return conns_.size() + (::poll(&p, 1, 0) == 1 ? 1 : 0);
  }

 private:
  int fd_ = -1, port_ = 0;
  std::vector<int> conns_;
};

/// A shell command run by agent `main`'s shell tool (as the agent principal); its output.
std::string as_agent(World& w, const std::string& agent_path, const std::string& cmd, const std::vector<json>& between) {
  const auto before = chat_requests(w);
  w.fake.push({{"tool_calls", json::array({{{"id", "c1"}, {"name", "shell"}, {"arguments", {{"cmd", cmd}}}}})}});
  for (const auto& r : between) w.fake.push(r);
  w.fake.push({{"text", "done"}});
  if (!w.write(agent_path + "/prompt", "run it")) return "prompt failed";
  if (!eventually([&] { return chat_requests(w) == before + 2 + between.size(); })) return "no second request";
  if (!w.wait_state(agent_path, "idle")) return "not idle";
  std::string result;
  auto raw = w.read(agent_path + "/log.raw");
  for (const auto& line : split(raw ? *raw : "", '\n')) {
    if (line.empty()) continue;
    auto b = json::parse(line);
    if (b["role"] == "tool") result = b["content"];
  }
  return result;
}

}  // namespace

// ---- backends, models --------------------------------------------------------------------------

TEST(RootFiles, BackendsListsTheSupportedBackendsInTheirOrder) {
  World w;
  EXPECT_EQ(*w.read("backends"), "ollama\nopenai\nopenrouter\nanthropic\ncopilot\nkiro\ngemini\n");
}

TEST(RootFiles, ModelsListsConfiguredBackendsSkipsFailingOnesAndKeepsItUntilInvalidate) {
  World w;
  // ollama needs no key, so it is configured: at a closed port it fails and is skipped.
  write_file(w.config + "/backends.conf", "[ollama]\nurl = http://127.0.0.1:1\n");
  ASSERT_EQ(*w.rdwr("ctl", "invalidate"), "ok\n");
  EXPECT_EQ(*w.read("models"), "openai\tfake-model\n");
  EXPECT_EQ(*w.read("models"), "openai\tfake-model\n");
  EXPECT_EQ(requests_to(w, "/v1/models").size(), 1u);  // cached
  // An edit of backends.conf is seen only after invalidate.
  write_file(w.config + "/backends.conf", "[ollama]\nurl = " + w.fake.url() + "\n");
  EXPECT_EQ(*w.read("models"), "openai\tfake-model\n");
  EXPECT_TRUE(requests_to(w, "/api/tags").empty());
  ASSERT_EQ(*w.rdwr("ctl", "invalidate"), "ok\n");
  EXPECT_EQ(*w.read("models"), "ollama\tfake-model\nopenai\tfake-model\n");
  EXPECT_EQ(requests_to(w, "/v1/models").size(), 2u);
  EXPECT_EQ(requests_to(w, "/api/tags").size(), 1u);
}

TEST(RootFiles, ConcurrentFirstReadsOfModelsShareOneFetch) {
  World w;
  HeldEndpoint held;
  write_file(w.config + "/backends.conf",
             "[ollama]\nurl = http://127.0.0.1:1\n[openai]\nurl = " + held.url() + "/v1\n");
  ASSERT_EQ(*w.rdwr("ctl", "invalidate"), "ok\n");
  std::vector<std::future<std::string>> readers;
  for (int i = 0; i < 4; i++)
    readers.push_back(std::async(std::launch::async, [&] {
      auto r = w.read("models");
      return r ? *r : "error: " + r.ename();
    }));
  ASSERT_TRUE(held.accept_request());
  held.answer(R"({"object":"list","data":[{"id":"held-b","context_length":1000},{"id":"held-a","context_length":1000}]})");
  for (auto& r : readers) EXPECT_EQ(r.get(), "openai\theld-a\nopenai\theld-b\n");
  EXPECT_EQ(held.connections(), 1u);
}

// ---- agents, tools -----------------------------------------------------------------------------

TEST(RootFiles, AgentsListsProfileNamesSortedUntilInvalidate) {
  World w;
  EXPECT_NE(w.read("agents")->find("default\n"), std::string::npos);
  replace_with_dir(w.config + "/agents");
  write_file(w.config + "/agents/zeta.json", "{}");
  write_file(w.config + "/agents/alpha.json", "{}");
  write_file(w.config + "/agents/notes.txt", "not a profile");
  ASSERT_EQ(*w.rdwr("ctl", "invalidate"), "ok\n");
  EXPECT_EQ(*w.read("agents"), "alpha\nzeta\n");
  write_file(w.config + "/agents/mid.json", "{}");
  EXPECT_EQ(*w.read("agents"), "alpha\nzeta\n");
  ASSERT_EQ(*w.rdwr("ctl", "invalidate"), "ok\n");
  EXPECT_EQ(*w.read("agents"), "alpha\nmid\nzeta\n");
}

TEST(RootFiles, ToolsIsTheCatalogWithInvalidToolsAndTheirErrors) {
  World w;
  auto shipped = w.read("tools");
  ASSERT_TRUE(shipped);
  bool file_read = false;
  for (const auto& line : split(*shipped, '\n')) {
    EXPECT_EQ(split(line, '\t').size(), 4u) << line;
    file_read = file_read || line.rfind("file_read\tread\t", 0) == 0;
  }
  EXPECT_TRUE(file_read) << *shipped;

  replace_with_dir(w.config + "/tools");
  write_file(w.config + "/tools/greet.meta", R"({"description": "Say hi.", "scope": "read", "tier": "cold", "cmd": "echo hi"})");
  write_file(w.config + "/tools/plain.meta", R"({"description": "Defaults.", "cmd": "true"})");
  write_file(w.config + "/tools/broken.meta", "not json");
  write_file(w.config + "/tools/nodesc.meta", R"({"cmd": "true"})");
  write_file(w.config + "/tools/elsewhere.meta",
             R"({"description": "x", "cmd": "true", "variants": [{"when": {"env": "OLLIE_NO_SUCH_VARIABLE"}}]})");
  ASSERT_EQ(*w.rdwr("ctl", "invalidate"), "ok\n");
  auto text = w.read("tools");
  ASSERT_TRUE(text);
  auto rows = split(*text, '\n');
  ASSERT_EQ(rows.size(), 5u) << *text;
  EXPECT_EQ(rows[0].rfind("broken\t-\t-\tinvalid: ", 0), 0u) << rows[0];
  EXPECT_EQ(rows[1], "elsewhere\t-\t-\tinvalid: not available on this host");
  EXPECT_EQ(rows[2], "greet\tread\tcold\tSay hi.");
  EXPECT_EQ(rows[3], "nodesc\t-\t-\tinvalid: description is required");
  EXPECT_EQ(rows[4], "plain\tglobal\thot\tDefaults.");
  write_file(w.config + "/tools/late.meta", R"({"description": "Late.", "cmd": "true"})");
  EXPECT_EQ(*w.read("tools"), *text);
  // A name that is no valid tool name is any file name: listed as UTF-8 all the same (§1.2).
  write_file(w.config + "/tools/bad\xff.meta", R"({"description": "x", "cmd": "true"})");
  ASSERT_EQ(*w.rdwr("ctl", "invalidate"), "ok\n");
  const auto listed = *w.read("tools");
  EXPECT_TRUE(p9::is_utf8(listed)) << listed;
  EXPECT_NE(listed.find("bad\xef\xbf\xbd\t-\t-\tinvalid: "), std::string::npos) << listed;
  std::filesystem::remove(w.config + "/tools/bad\xff.meta");
  ASSERT_EQ(*w.rdwr("ctl", "invalidate"), "ok\n");
  EXPECT_NE(w.read("tools")->find("\nlate\tglobal\thot\tLate.\n"), std::string::npos);
}

// ---- help, ctl ---------------------------------------------------------------------------------

TEST(RootFiles, HelpListsEveryNodeAsPathKindModeDoc) {
  World w;
  auto help = w.read("help");
  ASSERT_TRUE(help);
  const std::set<std::string> kinds{"dir",       "Read",       "Write",     "Rdwr",           "Read+Write",
                                    "Stream",    "StreamRdwr", "BlockOnce", "Write+BlockOnce"};
  const std::regex mode("^0[0-7]{3}$");
  std::vector<std::string> paths;
  for (const auto& line : split(*help, '\n')) {
    auto f = split(line, '\t');
    ASSERT_EQ(f.size(), 4u) << line;
    EXPECT_EQ(f[0].rfind("/", 0), 0u) << line;
    EXPECT_TRUE(kinds.count(f[1])) << line;
    EXPECT_TRUE(std::regex_match(f[2], mode)) << line;
    EXPECT_FALSE(f[3].empty()) << line;
    paths.push_back(f[0] + "\t" + f[1] + "\t" + f[2]);
  }
  // Spec §2's tree, in its order.
  const std::vector<std::string> root{"/\tdir\t0555",          "/backends\tRead\t0444", "/models\tRead\t0444",
                                      "/agents\tRead\t0444",   "/tools\tRead\t0444",    "/help\tRead\t0444",
                                      "/ctl\tRdwr\t0600",      "/event\tStreamRdwr\t0666", "/complete\tRdwr\t0666",
                                      "/generate\tRdwr\t0666"};
  ASSERT_GE(paths.size(), root.size());
  EXPECT_EQ(std::vector<std::string>(paths.begin(), paths.begin() + root.size()), root);
  EXPECT_NE(std::find(paths.begin(), paths.end(), "/session/{session}/agent/{agent}\tdir\t0555"), paths.end()) << *help;
}

TEST(RootFiles, CtlAnswersItsVerbsAndRefusesOthers) {
  World w;
  EXPECT_EQ(w.rdwr("ctl", "frob").ename(), "unknown command: frob");
  EXPECT_EQ(w.rdwr("ctl", "invalidate now").ename().rfind("usage: invalidate", 0), 0u);
  EXPECT_EQ(*w.rdwr("ctl", "  invalidate\n"), "ok\n");
  (void)w.rdwr("ctl", "kill");  // its reply, then the hang-up (Daemon.CtlKillRepliesThenStops reads it with ollie-9p)
  EXPECT_TRUE(eventually([&] { return !std::filesystem::exists(w.sock); }));
}

TEST(RootFiles, AnErrorQuotingAClientsBytesIsUtf8) {
  // plan9port's 9p prints an Rerror as it comes: a walked name that is not UTF-8 came back in it.
  World w;
  EXPECT_EQ(w.read("caf\xC3").ename(), "caf\xEF\xBF\xBD: file not found");  // the first name of a walk
  EXPECT_EQ(w.rdwr("ctl", "frob\xFF\xFE").ename(), "unknown command: frob\xEF\xBF\xBD\xEF\xBF\xBD");
}

// ---- generate ----------------------------------------------------------------------------------

TEST(Generate, ReturnsTheWholeAnswerAndCountsInNoAgentsStats) {
  World w;
  auto a = w.agent(w.session("work"), "main");
  w.fake.push({{"text", "The answer is 42."}, {"usage", {{"input", 10}, {"output", 5}}}});
  EXPECT_EQ(*w.rdwr("generate", "What is it?\n"), "The answer is 42.");
  auto body = last_chat(w);
  EXPECT_EQ(user_text(body), "What is it?\n");
  EXPECT_EQ(body["model"], "fake-model");
  EXPECT_TRUE(!body.contains("tools") || body["tools"].empty());
  EXPECT_EQ(body["messages"].size(), 1u);  // no history, no system prompt
  EXPECT_NE(w.read(a + "/stats")->find("requests=0\n"), std::string::npos);
}

TEST(Generate, AHeaderSetsModelAndSystem) {
  World w;
  w.fake.push({{"text", "ok"}});
  EXPECT_EQ(*w.rdwr("generate", "model=other-model system='Be terse.'\n\nHi"), "ok");
  auto body = last_chat(w);
  EXPECT_EQ(body["model"], "other-model");
  EXPECT_EQ(system_text(body), "Be terse.");
  EXPECT_EQ(user_text(body), "Hi");
  w.fake.push({{"text", "ok"}});
  EXPECT_EQ(*w.rdwr("generate", "backend=openai\nmodel=m2\n\nfirst\n\nsecond\n"), "ok");
  body = last_chat(w);
  EXPECT_EQ(body["model"], "m2");
  EXPECT_EQ(user_text(body), "first\n\nsecond\n");
  // The empty line is blanks only (§1.3): a CRLF request, or a line of spaces, ends the header too.
  for (const std::string req : {"model=m3\r\n\r\nthird", "model=m3  \n  \nthird"}) {
    w.fake.push({{"text", "ok"}});
    EXPECT_EQ(*w.rdwr("generate", req), "ok");
    body = last_chat(w);
    EXPECT_EQ(body["model"], "m3") << req;
    EXPECT_EQ(user_text(body), "third") << req;
  }
}

TEST(Generate, ALineThatIsNotKeyValueMakesTheWholeRequestThePrompt) {
  World w;
  for (const std::string req : {"Explain this:\nmodel=x\n\nbody", "temperature=2\n\nhi", "model=x", "model='x\n\nhi"}) {
    w.fake.push({{"text", "ok"}});
    ASSERT_EQ(*w.rdwr("generate", req), "ok") << req;
    auto body = last_chat(w);
    EXPECT_EQ(user_text(body), req);
    EXPECT_EQ(body["model"], "fake-model") << req;
  }
}

TEST(Generate, EmptyPromptsAndBackendErrorsAreRerrors) {
  World w;
  EXPECT_EQ(w.rdwr("generate", "model=x\n\n").ename(), "empty prompt");
  EXPECT_EQ(w.rdwr("generate", "  \n").ename(), "empty prompt");
  EXPECT_EQ(w.rdwr("generate", "model=a\nmodel=b\n\nhi").ename(), "duplicate key: model");
  EXPECT_EQ(w.rdwr("generate", "backend=nope\n\nhi").ename().rfind("unknown backend: nope (ollama, openai", 0), 0u);
  EXPECT_EQ(w.rdwr("generate", "backend=anthropic\n\nhi").ename().rfind("anthropic: missing key: set ", 0), 0u);
  EXPECT_EQ(chat_requests(w), 0u);
  w.fake.push({{"fault", "auth"}});
  auto r = w.rdwr("generate", "hi");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.ename().rfind("openai: authentication failed", 0), 0u) << r.ename();
  EXPECT_EQ(r.ename().find("sk-test"), std::string::npos) << r.ename();
}

// Each request under way holds a connection to the provider: a principal has 16 at once, the
// next is refused until one ends (an agent that opened a thousand took every descriptor of
// olliesrv's and locked everyone out).
TEST(Generate, APrincipalHasSixteenRequestsUnderWayAtOnce) {
  World w;
  for (int i = 0; i < 17; i++) w.fake.push({{"text", "slow " + std::to_string(i)}, {"delay_ms", 300}});
  std::vector<std::future<p9::Result<std::string>>> asked;
  for (int i = 0; i < 16; i++)
    asked.push_back(std::async(std::launch::async, [&w, i] { return w.rdwr("generate", "question " + std::to_string(i)); }));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 16; })) << chat_requests(w);
  auto refused = w.rdwr("generate", "one more");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.ename(), "too many requests at once (limit 16)");
  for (auto& a : asked) {
    auto r = a.get();
    ASSERT_TRUE(r) << r.ename();
    EXPECT_EQ(r->rfind("slow ", 0), 0u) << *r;
  }
  EXPECT_EQ(*w.rdwr("generate", "now there is room"), "slow 16");
}

TEST(Generate, AFlushedReadAbortsTheTransfer) {
  World w;
  w.fake.push({{"fault", "hang"}});
  auto f = w.walk("generate");
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->open(p9::ORDWR));
  ASSERT_TRUE(f->write("hang, please"));
  auto held = start_read(*f);
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 1; }));
  f->client().flush(held.tag);
  auto got = held.reply.get();
  EXPECT_FALSE(got);
  EXPECT_TRUE(eventually([&] { return requests_to(w, "/chat/completions").at(0).client_closed; }));
  // The fid serves the next request.
  w.fake.push({{"text", "after"}});
  ASSERT_TRUE(f->write("again"));
  f->seek(0);
  EXPECT_EQ(*f->read_all(), "after");
}

// ---- complete ----------------------------------------------------------------------------------

TEST(Complete, NeedsExactlyOneCursorMarker) {
  World w;
  EXPECT_EQ(w.rdwr("complete", "def f():\n    return\n").ename(), "missing cursor marker");
  EXPECT_EQ(w.rdwr("complete", "a{{CURSOR}}b{{CURSOR}}").ename(), "more than one cursor marker");
  EXPECT_EQ(w.rdwr("complete", "lang=go\n\n{{CURSOR}} and {{CURSOR}}").ename(), "more than one cursor marker");
  EXPECT_EQ(chat_requests(w), 0u);
}

TEST(Complete, RepliesWithTheInsertionOnlyFencesStripped) {
  World w;
  const std::string code = "def inc(x):\n    return {{CURSOR}}\n";
  w.fake.push({{"text", "```python\nx + 1\n```"}});
  EXPECT_EQ(*w.rdwr("complete", "lang=python\n\n" + code), "x + 1");
  auto body = last_chat(w);
  EXPECT_EQ(user_text(body), code);
  EXPECT_NE(system_text(body).find("only"), std::string::npos) << system_text(body);
  EXPECT_TRUE(system_text(body).ends_with("nothing.\n\nThe code is python.")) << system_text(body);  // one blank line
  EXPECT_EQ(body["model"], "fake-model");
  w.fake.push({{"text", " x + 1\n"}});
  EXPECT_EQ(*w.rdwr("complete", code), " x + 1\n");  // an unfenced reply exactly as given
}

TEST(Complete, DefaultsToOllieCompleteBackendAndModel) {
  World w;
  w.restart_with({"OLLIE_COMPLETE_MODEL=complete-model"});
  w.fake.push({{"text", "x"}});
  ASSERT_TRUE(w.rdwr("complete", "a{{CURSOR}}"));
  EXPECT_EQ(last_chat(w)["model"], "complete-model");
  w.fake.push({{"text", "x"}});
  ASSERT_TRUE(w.rdwr("complete", "model=given\n\na{{CURSOR}}"));
  EXPECT_EQ(last_chat(w)["model"], "given");
  w.fake.push({{"text", "x"}});
  ASSERT_TRUE(w.rdwr("generate", "hi"));
  EXPECT_EQ(last_chat(w)["model"], "fake-model");  // generate does not use them

  w.restart_with({"OLLIE_COMPLETE_BACKEND=anthropic", "OLLIE_COMPLETE_MODEL=claude-x"});
  EXPECT_EQ(w.rdwr("complete", "a{{CURSOR}}").ename().rfind("anthropic: missing key: set ", 0), 0u);
  // Another backend in the header: OLLIE_COMPLETE_MODEL belongs to OLLIE_COMPLETE_BACKEND.
  w.fake.push({{"text", "x"}});
  ASSERT_TRUE(w.rdwr("complete", "backend=openai\n\na{{CURSOR}}"));
  EXPECT_EQ(last_chat(w)["model"], "fake-model");
}

// ---- permissions (§2.1 columns) ----------------------------------------------------------------

TEST(RootFiles, AnAgentReadsTheListsAndUsesCompleteButNotCtl) {
  World w;
  auto a = w.agent(w.session("work"), "main");
  const std::string cmd =
      "printf 'a{{CURSOR}}c' | ollie-9p rdwr complete 2>&1; echo; ollie-9p read backends 2>&1 | head -1;"
      " ollie-9p read agents 2>&1 | grep -c default; echo invalidate | ollie-9p rdwr ctl 2>&1; true";
  std::vector<json> completion;
  completion.push_back({{"text", "INSERTED"}});
  auto out = as_agent(w, a, cmd, completion);
  EXPECT_NE(out.find("INSERTED\n"), std::string::npos) << out;
  EXPECT_NE(out.find("ollama\n"), std::string::npos) << out;
  EXPECT_NE(out.find("permission denied"), std::string::npos) << out;
  EXPECT_EQ(out.find("ok\n"), std::string::npos) << out;
}
