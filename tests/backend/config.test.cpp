#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include <sqlite3.h>

#include "backend/config.hpp"

namespace ollie::backend {
namespace {

Environment env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](std::string_view k) -> std::optional<std::string> {
    auto it = vars.find(std::string(k));
    if (it == vars.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
}

const char* spec_example = R"(# default backend for new agents
backend = anthropic

[anthropic]
model = claude-sonnet-4-5
key_env = OLLIE_ANTHROPIC_KEY

[ollama]
url = http://localhost:11434
model = qwen3:8b
num_ctx = 16384

[openai]
url = https://api.openai.com/v1/
key_env = OPENAI_API_KEY
header = OpenAI-Organization: org-123
)";

TEST(BackendConfig, ParsesTheSpecExample) {
  auto c = parse_backends_conf(spec_example);
  EXPECT_TRUE(c.warnings.empty());
  EXPECT_EQ(c.backend, "anthropic");
  EXPECT_EQ(c.sections.at("anthropic").model, "claude-sonnet-4-5");
  EXPECT_EQ(c.sections.at("ollama").num_ctx, 16384);
  ASSERT_EQ(c.sections.at("openai").headers.size(), 1u);
  EXPECT_EQ(c.sections.at("openai").headers[0], "OpenAI-Organization: org-123");
}

// A byte order mark (an editor's) is not part of the first key: `backend` still chooses.
TEST(BackendConfig, ALeadingByteOrderMarkIsSkipped) {
  auto c = parse_backends_conf("\xEF\xBB\xBF" "backend = anthropic\n");
  EXPECT_TRUE(c.warnings.empty());
  EXPECT_EQ(c.backend, "anthropic");
}

TEST(BackendConfig, UnknownSectionsKeysAndBadLinesWarnWithFileAndLine) {
  auto c = parse_backends_conf("model = x\n[mistral]\nurl = y\n[ollama]\ncolour = blue\nnonsense\nheader = A: b\n",
                               "/cfg/backends.conf");
  ASSERT_EQ(c.warnings.size(), 5u);
  EXPECT_EQ(c.warnings[0], "/cfg/backends.conf:1: only backend, subagents, subagent_depth and subagent_budget are "
                           "allowed before the first section, 'model' ignored");
  EXPECT_EQ(c.warnings[1], "/cfg/backends.conf:2: unknown backend [mistral], ignored");
  EXPECT_EQ(c.warnings[2], "/cfg/backends.conf:5: unknown key 'colour' in [ollama], ignored");
  EXPECT_EQ(c.warnings[3], "/cfg/backends.conf:6: expected key = value, ignored");
  EXPECT_NE(c.warnings[4].find(":7: header"), std::string::npos);
  EXPECT_FALSE(c.sections.count("mistral"));
}

// A section given twice is one section (the later value of a key wins), and the log says so: a
// second [ollama] pasted at the end of the file silently changed the first one's url before.
TEST(BackendConfig, ASectionGivenTwiceIsMergedWithAWarning) {
  auto c = parse_backends_conf("[ollama]\nurl = http://a:1\nmodel = m1\n[openai]\nmodel = o\n[ollama]\nurl = http://b:2\n",
                               "/cfg/backends.conf");
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_EQ(c.warnings[0], "/cfg/backends.conf:6: [ollama] again: its keys join the first [ollama]'s, a key given twice "
                           "takes the later value");
  EXPECT_EQ(c.sections.at("ollama").url, "http://b:2");
  EXPECT_EQ(c.sections.at("ollama").model, "m1");
  EXPECT_EQ(c.sections.at("openai").model, "o");
}

// A secret pasted where its variable's name goes is refused without a word of it: §7.4 keeps
// secrets out of errors and logs, and `missing key: set <key_env>` would have said it.
TEST(BackendConfig, AKeyEnvThatIsNoVariableNameIsIgnoredUnsaid) {
  auto c = parse_backends_conf("[openai]\nkey_env = sk-SECRET123\n[anthropic]\nkey_env = MY_KEY_2\n"
                               "[gemini]\nkey_env = ghp_R3alL00kingGitHubT0kenAbCdEf0123456789\n", "/cfg/backends.conf");
  ASSERT_EQ(c.warnings.size(), 2u);
  EXPECT_EQ(c.warnings[0], "/cfg/backends.conf:2: key_env must name an environment variable in capitals ([A-Z_][A-Z0-9_]*), ignored");
  EXPECT_EQ(c.warnings[1].rfind("/cfg/backends.conf:6: key_env must name", 0), 0u) << c.warnings[1];
  EXPECT_EQ(c.sections.at("openai").key_env, "");
  EXPECT_EQ(c.sections.at("gemini").key_env, "");
  EXPECT_EQ(c.sections.at("anthropic").key_env, "MY_KEY_2");
}

// A header line is sent as written: one whose name is no HTTP token (a blank, a separator) or whose
// value holds a control character would reach the server as something else, so it is refused.
TEST(BackendConfig, AHeaderThatIsNoHttpHeaderIsIgnored) {
  auto c = parse_backends_conf("[openai]\nheader = Bad Header: x\nheader = : x\nheader = X-Ok: a\tb\n"
                               "header = X-Bell: \a\nheader = X-Org: org-1\n");
  ASSERT_EQ(c.warnings.size(), 3u);
  for (const auto& w : c.warnings) EXPECT_NE(w.find("header needs 'Name: value'"), std::string::npos) << w;
  EXPECT_EQ(c.sections.at("openai").headers, (std::vector<std::string>{"X-Ok: a\tb", "X-Org: org-1"}));
}

// `[openai] # the fake` is no header: the keys under it must not land in the section before, or
// the key_env meant for one provider goes to the other's endpoint.
TEST(BackendConfig, AMalformedHeaderTakesItsKeysWithIt) {
  auto c = parse_backends_conf("backend = anthorpic\n[anthropic]\nmodel = a\n[openai] # the fake\nurl = http://x\n"
                               "key_env = MINE\n",
                               "b.conf");
  ASSERT_EQ(c.warnings.size(), 2u);
  EXPECT_EQ(c.warnings[0], "b.conf:1: unknown backend 'anthorpic'");
  EXPECT_EQ(c.warnings[1], "b.conf:4: malformed section header, its keys ignored");
  EXPECT_EQ(c.sections.at("anthropic").model, "a");
  EXPECT_EQ(c.sections.at("anthropic").url, "");
  EXPECT_EQ(c.sections.at("anthropic").key_env, "");
  EXPECT_FALSE(c.sections.count("openai"));
}

TEST(BackendConfig, SubagentLimitsBeforeTheFirstSectionWithDefaultsAndBounds) {
  auto d = parse_backends_conf("");
  EXPECT_EQ(d.subagents.running, 4);
  EXPECT_EQ(d.subagents.depth, 2);
  EXPECT_EQ(d.subagents.budget, 0);
  auto c = parse_backends_conf("subagents = 3\nsubagent_depth = 1\nsubagent_budget = 200000\n[ollama]\n");
  EXPECT_TRUE(c.warnings.empty());
  EXPECT_EQ(c.subagents.running, 3);
  EXPECT_EQ(c.subagents.depth, 1);
  EXPECT_EQ(c.subagents.budget, 200000);
  auto bad = parse_backends_conf("subagents = 0\nsubagent_depth = many\nsubagent_budget = -5\n");
  ASSERT_EQ(bad.warnings.size(), 3u);
  EXPECT_EQ(bad.warnings[0], "backends.conf:1: subagents must be a whole number from 1 to 64, ignored");
  EXPECT_EQ(bad.subagents.running, 4);
  EXPECT_EQ(bad.subagents.depth, 2);
  EXPECT_EQ(bad.subagents.budget, 0);
}

TEST(BackendConfig, SectionBeatsVariableBeatsDefault) {
  auto conf = parse_backends_conf(spec_example);
  auto env = env_of({{"OLLIE_OPENAI_URL", "http://env"}, {"OLLIE_GEMINI_URL", "http://gem"}, {"OPENAI_API_KEY", "k1"},
                     {"GEMINI_API_KEY", "g"}, {"OLLIE_MODEL", "m-env"}});
  auto o = resolve_backend("openai", conf, env);
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->url, "https://api.openai.com/v1");  // section, trailing slash dropped
  EXPECT_EQ(o->model, "m-env");
  EXPECT_EQ(o->headers.size(), 1u);
  auto g = resolve_backend("gemini", conf, env);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->url, "http://gem");
  auto l = resolve_backend("ollama", conf, env);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->model, "qwen3:8b");
  EXPECT_TRUE(l->key.empty());
  auto r = resolve_backend("openrouter", BackendsConf{}, env_of({{"OPENROUTER_API_KEY", "r"}}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->url, "https://openrouter.ai/api/v1");
}

TEST(BackendConfig, OllieVariableBeforeTheProvidersOwn) {
  auto a = resolve_backend("anthropic", BackendsConf{},
                           env_of({{"OLLIE_ANTHROPIC_KEY", "ollie"}, {"ANTHROPIC_API_KEY", "usual"}}));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->key, "ollie");
  EXPECT_EQ(a->key_var, "OLLIE_ANTHROPIC_KEY");
  auto b = resolve_backend("anthropic", BackendsConf{}, env_of({{"ANTHROPIC_API_KEY", "usual"}}));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->key, "usual");
  auto g = resolve_backend("gemini", BackendsConf{}, env_of({{"GOOGLE_API_KEY", "gg"}}));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->key_var, "GOOGLE_API_KEY");
  auto c = resolve_backend("copilot", BackendsConf{}, env_of({{"GITHUB_TOKEN", "gh"}}));
  // The exchange is GitHub's for the default URL, and the URL's own for any other (GitHub
  // Enterprise's, a fake provider's): it used to be GitHub's always.
  ASSERT_TRUE(c);
  EXPECT_EQ(c->token_url, "https://api.github.com/copilot_internal/v2/token");
  auto own = resolve_backend("copilot", BackendsConf{},
                             env_of({{"GITHUB_TOKEN", "gh"}, {"OLLIE_COPILOT_URL", "http://127.0.0.1:9/"}}));
  ASSERT_TRUE(own);
  EXPECT_EQ(own->token_url, "http://127.0.0.1:9/copilot_internal/v2/token");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->key, "gh");
}

TEST(BackendConfig, MissingKeyNamesTheVariableToSet) {
  auto conf = parse_backends_conf(spec_example);
  auto a = resolve_backend("anthropic", conf, env_of({{"ANTHROPIC_API_KEY", "ignored: key_env names another"}}));
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().message, "anthropic: missing key: set OLLIE_ANTHROPIC_KEY");
  EXPECT_EQ(a.error().cls, ErrorClass::config);
  auto o = resolve_backend("openrouter", BackendsConf{}, env_of({}));
  EXPECT_EQ(o.error().message, "openrouter: missing key: set OLLIE_OPENROUTER_KEY");
  auto k = resolve_backend("kiro", BackendsConf{}, env_of({{"HOME", "/nonexistent"}}));
  EXPECT_EQ(k.error().message, "kiro: missing key: set OLLIE_KIRO_TOKEN");
}

TEST(BackendConfig, DefaultBackendFromFileThenVariable) {
  EXPECT_EQ(default_backend(parse_backends_conf(spec_example), env_of({{"OLLIE_BACKEND", "ollama"}})), "anthropic");
  EXPECT_EQ(default_backend(BackendsConf{}, env_of({{"OLLIE_BACKEND", "ollama"}})), "ollama");
  EXPECT_EQ(backends_conf_path(env_of({{"XDG_CONFIG_HOME", "/x"}, {"HOME", "/h"}})), "/x/ollie/backends.conf");
  EXPECT_EQ(backends_conf_path(env_of({{"HOME", "/h"}})), "/h/.config/ollie/backends.conf");
}

TEST(BackendConfig, MissingFileIsEmptyConfiguration) {
  auto c = load_backends_conf("/nonexistent/ollie/backends.conf");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->sections.empty());
}

// With the cwd at $HOME the model can replace backends.conf: a FIFO must not hang olliesrv's start,
// a link to /dev/zero must not fill its memory. Each is an error naming the file, at once.
TEST(BackendConfig, AFifoOrADeviceOrAHugeFileIsAnErrorNotAHang) {
  const auto dir = std::filesystem::temp_directory_path() / ("ollie-conf-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "backends.conf").string();
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  auto fifo = load_backends_conf(path);
  ASSERT_FALSE(fifo.ok());
  EXPECT_EQ(fifo.error().message, path + ": cannot read: not a regular file");
  std::filesystem::remove(path);
  std::filesystem::create_symlink("/dev/zero", path);
  auto zero = load_backends_conf(path);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.error().message, path + ": cannot read: not a regular file");
  std::filesystem::remove(path);
  { std::ofstream(path) << "backend = ollama\n"; }
  ASSERT_EQ(::truncate(path.c_str(), 2 << 20), 0);
  auto huge = load_backends_conf(path);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.error().message, path + ": cannot read: larger than 1 MiB");
  std::filesystem::remove_all(dir);
}

TEST(BackendConfig, KiroTokenFromTheCliDatabase) {
  const auto dir = std::filesystem::temp_directory_path() / ("ollie-kiro-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "kiro-cli");
  const auto db_path = (dir / "kiro-cli" / "data.sqlite3").string();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "CREATE TABLE auth_kv (key TEXT PRIMARY KEY, value TEXT);"
                         "INSERT INTO auth_kv VALUES ('kirocli:social:token', '{\"access_token\":\"aoa-123\",\"expires_at\":\"x\"}');",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  EXPECT_EQ(read_kiro_token_db(db_path), "aoa-123");
  auto k = resolve_backend("kiro", BackendsConf{}, env_of({{"XDG_DATA_HOME", dir.string()}}));
  ASSERT_TRUE(k.ok()) << k.error().message;
  EXPECT_EQ(k->key, "sqlite://" + db_path);
  auto t = resolve_backend("kiro", BackendsConf{}, env_of({{"OLLIE_KIRO_TOKEN", "bearer-x"}}));
  EXPECT_EQ(t->key, "bearer-x");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ollie::backend
