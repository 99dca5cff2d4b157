#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "olliesrv/profile.hpp"
#include "olliesrv/sysprompt.hpp"

using namespace ollie;
namespace fs = std::filesystem;

namespace {

class ProfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "ollie-profile-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root = tmpl;
    fs::create_directories(root + "/agents");
    fs::create_directories(root + "/prompts");
    fs::create_directories(root + "/home");
  }
  void TearDown() override { fs::remove_all(root); }

  void write(const std::string& rel, const std::string& text) {
    fs::create_directories(fs::path(root + "/" + rel).parent_path());
    std::ofstream(root + "/" + rel, std::ios::binary) << text;
  }
  std::string read(const std::string& rel) {
    std::ifstream in(root + "/" + rel);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  PromptContext ctx(std::map<std::string, std::string> vars = {}) {
    vars.emplace("HOME", root + "/home");
    PromptContext c;
    c.config_root = root;
    c.env = [vars](std::string_view k) -> std::optional<std::string> {
      auto it = vars.find(std::string(k));
      if (it == vars.end()) return std::nullopt;
      return it->second;
    };
    c.session_id = "3f0c2b9e-8c1d-4d5e-9a51-0b9f6d0e2a77";
    c.agent_id = "9b1c0d2e-1111-4222-8333-944455556666";
    c.cwd = root;
    return c;
  }

  std::string root;
};

}  // namespace

TEST_F(ProfileTest, MissingDefaultIsEmptyOtherMissingIsUnknown) {
  auto d = load_profile(root, "default");
  ASSERT_TRUE(d) << d.ename();
  EXPECT_EQ(d->name, "default");
  EXPECT_TRUE(d->prompt.empty());
  EXPECT_TRUE(d->auto_load.empty());
  EXPECT_EQ(d->params, "{}");
  EXPECT_TRUE(d->warnings.empty());
  EXPECT_EQ(load_profile(root, "review").ename(), "unknown agent profile: review");
  write("x.json", "{}");
  EXPECT_EQ(load_profile(root, "../x").ename(), "unknown agent profile: ../x");
  write("agents/.hidden.json", "{}");
  EXPECT_EQ(load_profile(root, ".hidden").ename(), "unknown agent profile: .hidden");
  EXPECT_EQ(load_profile(root, "").ename(), "unknown agent profile: ");
}

TEST_F(ProfileTest, FieldsAndParams) {
  write("agents/review.json", R"({
    "prompt": ["agent-default.md", "output-brief.md"],
    "systemPrompt": "sys.md",
    "userPrompts": ["session-start.md"],
    "autoLoad": ["shell", "file_read"],
    "backend": "ollama",
    "model": "qwen3:8b",
    "temperature": 0.2,
    "reasoningEffort": "medium",
    "maxTokens": 4096,
    "includeReasoning": true,
    "stop": ["END"],
    "verbosity": "",
    "topP": null
  })");
  auto p = load_profile(root, "review");
  ASSERT_TRUE(p) << p.ename();
  EXPECT_EQ(p->name, "review");
  EXPECT_EQ(p->prompt, (std::vector<std::string>{"agent-default.md", "output-brief.md"}));
  EXPECT_EQ(p->system_prompt, "sys.md");
  EXPECT_EQ(p->user_prompts, std::vector<std::string>{"session-start.md"});
  EXPECT_EQ(p->auto_load, (std::vector<std::string>{"shell", "file_read"}));
  EXPECT_EQ(p->backend, "ollama");
  EXPECT_EQ(p->model, "qwen3:8b");
  EXPECT_EQ(p->params,
            R"({"includeReasoning":true,"maxTokens":4096,"reasoningEffort":"medium","stop":["END"],"temperature":0.2})");
  EXPECT_TRUE(p->warnings.empty());
}

TEST_F(ProfileTest, UnknownFieldsAreWarnings) {
  write("agents/old.json", R"({"hooks": {}, "maxSteps": 20, "temperature": 1, "tools": ["x"]})");
  auto p = load_profile(root, "old");
  ASSERT_TRUE(p) << p.ename();
  EXPECT_EQ(p->warnings, (std::vector<std::string>{"agent profile old: unknown field hooks",
                                                   "agent profile old: unknown field maxSteps",
                                                   "agent profile old: unknown field tools"}));
  EXPECT_EQ(p->params, R"({"temperature":1})");
}

TEST_F(ProfileTest, BadJsonAndWrongTypes) {
  write("agents/broken.json", "{\"prompt\": [");
  auto b = load_profile(root, "broken");
  ASSERT_FALSE(b);
  EXPECT_EQ(b.ename().rfind("agent profile broken: parse error at line 1", 0), 0u) << b.ename();
  const std::vector<std::pair<std::string, std::string>> cases{
      {"[]", "agent profile p: not a JSON object"},
      {R"({"prompt": "a.md"})", "agent profile p: prompt must be an array of strings"},
      {R"({"userPrompts": [1]})", "agent profile p: userPrompts must be an array of strings"},
      {R"({"autoLoad": "shell"})", "agent profile p: autoLoad must be an array of strings"},
      {R"({"systemPrompt": 3})", "agent profile p: systemPrompt must be a string"},
      {R"({"backend": true})", "agent profile p: backend must be a string"},
      {R"({"model": []})", "agent profile p: model must be a string"},
      {R"({"temperature": "hot"})", "agent profile p: temperature must be a number"},
      {R"({"maxTokens": 1.5})", "agent profile p: maxTokens must be an integer"},
      {R"({"maxTokens": -1})", "agent profile p: invalid maxTokens: -1"},
      {R"({"reasoning": -5})", "agent profile p: invalid reasoning: -5"},
      {R"({"topK": "4"})", "agent profile p: topK must be an integer"},
      {R"({"reasoningEffort": "max"})", "agent profile p: invalid reasoningEffort: max (low, medium, high)"},
      {R"({"includeReasoning": "yes"})", "agent profile p: includeReasoning must be a boolean"},
      {R"({"stop": "END"})", "agent profile p: stop must be an array of strings"},
      {R"({"responseFormat": 1})", "agent profile p: responseFormat must be a string"},
      // A profile the model could write (a cwd holding ~/.config) must not overflow the stack of
      // every olliesrv that loads it: copies and dumps of a value recurse on its depth.
      {R"({"prompt": ["a.md"], "x": )" + std::string(400'000, '[') + std::string(400'000, ']') + "}",
       "agent profile p: nested deeper than 128 levels"},
  };
  for (const auto& [text, want] : cases) {
    write("agents/p.json", text);
    auto r = load_profile(root, "p");
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.ename(), want) << text;
  }
}

// Restored overrides are checked as cfg and a profile check them: a hand-edited session.json's
// bad value is left out, not shown in cfg and sent to the provider.
TEST(CheckedParams, KeepsWhatACfgWriteTakesAndSaysWhyOfTheRest) {
  std::vector<std::string> why;
  const auto tell = [&](const std::string& w) { why.push_back(w); };
  EXPECT_EQ(checked_params(R"({"temperature":0.5,"stop":["END"],"reasoningEffort":"low","maxTokens":-5,)"
                           R"("topP":"hot","foo":{"x":[1]}})",
                           tell),
            R"({"reasoningEffort":"low","stop":["END"],"temperature":0.5})");
  EXPECT_EQ(why, (std::vector<std::string>{"unknown key foo", "invalid maxTokens: -5", "topP must be a number"}));
  why.clear();
  EXPECT_EQ(checked_params("{}", tell), "{}");
  EXPECT_EQ(checked_params("", tell), "{}");
  EXPECT_TRUE(why.empty());
  EXPECT_EQ(checked_params("[1]", tell), "{}");
  EXPECT_EQ(why, std::vector<std::string>{"params are not a JSON object"});
}

TEST_F(ProfileTest, NamesSorted) {
  write("agents/zeta.json", "{}");
  write("agents/alpha.json", "{}");
  write("agents/notes.txt", "");
  write("agents/.swap.json", "{}");
  fs::create_directories(root + "/agents/dir.json");
  EXPECT_EQ(profile_names(root), (std::vector<std::string>{"alpha", "zeta"}));
  EXPECT_TRUE(profile_names(root + "/nowhere").empty());
}

TEST_F(ProfileTest, ShippedProfilesLoadCleanly) {
  const char* src = (std::getenv("OLLIE_SOURCE_DIR") ? std::getenv("OLLIE_SOURCE_DIR") : OLLIE_TEST_SOURCE_DIR);
  ASSERT_NE(src, nullptr);
  const std::string data = std::string(src) + "/data";
  auto names = profile_names(data);
  EXPECT_NE(std::find(names.begin(), names.end(), "default"), names.end());
  for (const auto& n : names) {
    auto p = load_profile(data, n);
    ASSERT_TRUE(p) << p.ename();
    EXPECT_TRUE(p->warnings.empty()) << n;
    // Every file entry of a shipped profile exists among the shipped prompts.
    auto ctx = this->ctx();
    ctx.config_root = data;
    EXPECT_TRUE(resolve_entries(p->prompt, ctx).warnings.empty()) << n;
  }
}

TEST_F(ProfileTest, FileEntries) {
  write("prompts/a.md", "Alpha\n\n\n");
  write("prompts/sub/b.md", "Beta");
  write("home/c.md", "Gamma\n");
  write("abs.md", "Delta\n");
  write("prompts/3f0c2b9e-8c1d-4d5e-9a51-0b9f6d0e2a77.md", "Session");
  auto r = resolve_entries({"a.md", "missing.md", "sub/b.md", "~/c.md", root + "/abs.md", "$DIR/b.md",
                            "${DIR}/b.md", "$OLLIE_SESSION_ID.md"},
                           ctx({{"DIR", root + "/prompts/sub"}}));
  EXPECT_EQ(r.text, "Alpha\n\nBeta\n\nGamma\n\nDelta\n\nBeta\n\nBeta\n\nSession");
  EXPECT_EQ(r.warnings, std::vector<std::string>{"prompt entry not found: missing.md"});
}

TEST_F(ProfileTest, UnsetVariablesExpandToNothingAndLoneDollarsStay) {
  write("prompts/cost$.md", "Cost");
  auto r = resolve_entries({"cost$.md", "$NOPE", "${NOPE}cost$.md"}, ctx());
  EXPECT_EQ(r.text, "Cost\n\nCost");
  EXPECT_EQ(r.warnings, std::vector<std::string>{"prompt entry not found: $NOPE"});
}

// A profile is at most 1 MiB, but it can name one 1 MiB file a quarter of a million times, or a
// missing one as often (each warning an info block): the text stops past 4 MiB, the warnings at 16.
TEST_F(ProfileTest, ManyEntriesAreBoundedInTextAndInWarnings) {
  write("prompts/big.md", std::string(1 << 20, 'x'));
  auto r = resolve_entries(std::vector<std::string>(100'000, "big.md"), ctx());
  EXPECT_LE(r.text.size(), (5u << 20) + 10);
  EXPECT_EQ(r.warnings, std::vector<std::string>{"prompt entries past 4 MiB of text left out, from big.md"});
  auto m = resolve_entries(std::vector<std::string>(100'000, "missing.md"), ctx());
  ASSERT_EQ(m.warnings.size(), 17u);
  EXPECT_EQ(m.warnings[0], "prompt entry not found: missing.md");
  EXPECT_EQ(m.warnings[16], "99984 more prompt entry warnings left out");
}

TEST_F(ProfileTest, CommandEntries) {
  fs::create_directories(root + "/work");
  auto c = ctx({{"WHO", "me"}});
  c.cwd = root + "/work";
  auto r = resolve_entries({"!printf 'hello %s\\n\\n\\n' $WHO", "!pwd", "!echo $OLLIE_AGENT_ID",
                            "!sh -c 'echo \"$0\"' \"$(printenv OLLIE_SESSION_ID)\""},
                           c);
  EXPECT_EQ(r.text, "hello me\n\n" + root + "/work\n\n9b1c0d2e-1111-4222-8333-944455556666\n\n" +
                        "3f0c2b9e-8c1d-4d5e-9a51-0b9f6d0e2a77");
  EXPECT_TRUE(r.warnings.empty());
  c.cwd = root + "/gone";  // not a local directory: the command runs in $HOME
  EXPECT_EQ(resolve_entries({"!pwd"}, c).text, root + "/home");
}

TEST_F(ProfileTest, FailingCommandIsSkippedWithAWarning) {
  auto r = resolve_entries({"!echo partial; exit 3", "!kill -9 $$"}, ctx());
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(r.warnings, (std::vector<std::string>{"prompt entry failed: !echo partial; exit 3: exit status 3",
                                                  "prompt entry failed: !kill -9 $$: killed by signal 9"}));
}

TEST_F(ProfileTest, CommandTimeoutKillsTheGroup) {
  const std::string pidfile = root + "/pid";
  const auto t0 = std::chrono::steady_clock::now();
  auto r = detail::resolve_entries({"!sleep 30 & echo $! > " + pidfile + "; wait", "!echo after"}, ctx(),
                                   std::chrono::milliseconds(300), 1024);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(r.text, "after");
  EXPECT_EQ(r.warnings, std::vector<std::string>{"prompt entry failed: !sleep 30 & echo $! > " + pidfile +
                                                 "; wait: timed out after 0.3s"});
  // The background sleep was in the command's process group: it is dead (gone, or a zombie
  // waiting for init) within moments.
  const pid_t pid = std::stoi(read("pid"));
  bool dead = false;
  for (int i = 0; i < 200 && !dead; i++) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) dead = true;
    else if (auto p = line.rfind(')'); p != std::string::npos && line.size() > p + 2 && line[p + 2] == 'Z') dead = true;
    else std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(dead);
  if (!dead) ::kill(pid, SIGKILL);
}

TEST_F(ProfileTest, CommandOutputIsCapped) {
  auto r = detail::resolve_entries({"!yes"}, ctx(), std::chrono::seconds(20), 1024);
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(r.warnings, std::vector<std::string>{"prompt entry failed: !yes: output larger than 1 KiB"});
}

TEST_F(ProfileTest, BackgroundChildDoesNotHoldTheEntry) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = detail::resolve_entries({"!sleep 30 & echo hi"}, ctx(), std::chrono::seconds(20), 1024);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(r.text, "hi");
  EXPECT_TRUE(r.warnings.empty());
}

TEST_F(ProfileTest, SystemPromptFileOrTheDefault) {
  write("prompts/sys.md", "Custom system\n");
  auto c = ctx({{"P", "sys"}});
  auto d = resolve_system_prompt("", c);
  EXPECT_EQ(d.text, default_system_prompt());
  EXPECT_FALSE(d.text.empty());
  EXPECT_TRUE(d.warnings.empty());
  auto r = resolve_system_prompt("$P.md", c);
  EXPECT_EQ(r.text, "Custom system");
  EXPECT_TRUE(r.warnings.empty());
  auto m = resolve_system_prompt("~/none.md", c);
  EXPECT_EQ(m.text, d.text);
  EXPECT_EQ(m.warnings, std::vector<std::string>{"prompt entry not found: ~/none.md"});
}
